"""A user plugin in one small file: a toy token signal and a toy selector. The app imports it
when $KVWB_PLUGINS names this file; test_app.py checks that both reach the app's choices."""

import torch

from workbench.selectors import register_selector
from workbench.signals import register_signal


@register_signal("toy_len", per="token", reads=("deviation",), label="toy length")
def toy_len(signals):
    """The reused row's index: a stand-in for any score a user computes."""
    return torch.arange(signals.ctx.n_reused, dtype=torch.float64)  # [n_reused]


@register_selector("toy-first", uses=("deviation",), default_unit="single", description="the first rows first")
def toy_first(signals):
    return -torch.arange(signals.ctx.n_reused, dtype=torch.float64)  # [n_reused]: earlier rows score higher
