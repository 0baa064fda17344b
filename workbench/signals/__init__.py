"""Signals: per-layer, per-token measurements of one Context, in a registry.

    from workbench.signals import SignalSet, register_signal, signals_of
    signals = SignalSet(ctx)
    signals["saliency"].cadence_grad        # a record, computed once on first use
"""

from workbench.signals import builtin  # noqa: F401  (registers the built-in signals)
from workbench.signals.deviation import deviation_frame, kv_deviation, residual_deviation
from workbench.signals.patching import (
    AttributionCheck, RankCorrelation, attribution_check, patch_effects, sample_positions,
)
from workbench.signals.registry import Cost, SignalInfo, get_signal, register_signal, signals_of
from workbench.signals.saliency import CacheGradients, Saliency, cache_gradients, decision_saliency
from workbench.signals.signal_set import SignalOptions, SignalSet

__all__ = [
    "AttributionCheck", "CacheGradients", "Cost", "RankCorrelation", "Saliency", "SignalInfo", "SignalOptions",
    "SignalSet", "attribution_check", "cache_gradients", "decision_saliency", "deviation_frame", "get_signal",
    "kv_deviation", "patch_effects", "register_signal", "residual_deviation", "sample_positions", "signals_of",
]
