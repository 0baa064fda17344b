"""Signals: per-layer, per-token measurements of one Context."""

from workbench.signals.deviation import deviation_frame, kv_deviation, residual_deviation
from workbench.signals.patching import (
    AttributionCheck, RankCorrelation, attribution_check, patch_effects, sample_positions,
)
from workbench.signals.saliency import CacheGradients, Saliency, cache_gradients, decision_saliency

__all__ = [
    "AttributionCheck", "CacheGradients", "RankCorrelation", "Saliency", "attribution_check",
    "cache_gradients", "decision_saliency", "deviation_frame", "kv_deviation", "patch_effects",
    "residual_deviation", "sample_positions",
]
