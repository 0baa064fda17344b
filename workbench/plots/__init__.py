"""Plotly figure builders shared by the app, notebooks and reports (computation lives elsewhere)."""

from workbench.plots.curves import budget_curve, flip_matrix_figure, rows_vs_accuracy
from workbench.plots.tokens import layer_heatmap, layer_profile, picks_matrix, residual_by_layer, token_strip

__all__ = ["budget_curve", "flip_matrix_figure", "layer_heatmap", "layer_profile", "picks_matrix", "residual_by_layer",
           "rows_vs_accuracy", "token_strip"]
