"""Plotly figure builders shared by the app, the reports and the notebooks. Plots compute no
measurements and read no files: they take tables (or a Diagnosis) and return figures.

    from workbench import plots
    plots.diagnosis_figures(d)              # the per-example figures (also d.show())
    plots.budget_curve(summary, "em")       # across a sweep; one colour per selector everywhere
"""

from workbench.plots.axes import annotation_problems, axis_problems, figure_problems
from workbench.plots.colors import method_color, method_style, selector_color, selector_style, selector_symbol, series_color
from workbench.plots.curves import METRIC_TITLES, budget_curve, flip_matrix_figure, gap_curve, rows_vs_accuracy
from workbench.plots.diagnosis import (
    deviation_figure,
    diagnosis_figures,
    diagnosis_html,
    layer_signal_figure,
    picks_figure,
    residual_figure,
    show_diagnosis,
    strip_figure,
)
from workbench.plots.evidence import evidence_attention_figure
from workbench.plots.fidelity import fidelity_figures
from workbench.plots.heads import head_pattern_figure
from workbench.plots.layer_effects import layer_effects_figure
from workbench.plots.lens import logit_lens_figure
from workbench.plots.pipeline import agent_graph, gate_entropy, reuse_vs_accuracy
from workbench.plots.tokens import (
    layer_heatmap,
    layer_profile,
    picks_matrix,
    residual_by_layer,
    token_strip,
)
from workbench.plots.unit_curve import unit_curve_figure

__all__ = [
    "agent_graph", "annotation_problems", "axis_problems", "figure_problems", "method_color", "method_style",
    "series_color", "budget_curve", "deviation_figure", "evidence_attention_figure", "diagnosis_figures", "diagnosis_html", "fidelity_figures",
    "METRIC_TITLES", "flip_matrix_figure", "gap_curve", "gate_entropy", "head_pattern_figure", "layer_effects_figure", "logit_lens_figure", "layer_heatmap", "layer_profile", "layer_signal_figure", "picks_figure", "picks_matrix",
    "residual_by_layer", "residual_figure", "reuse_vs_accuracy", "rows_vs_accuracy", "selector_color", "selector_style",
    "selector_symbol", "show_diagnosis", "strip_figure", "token_strip", "unit_curve_figure",
]
