"""Figures: one colour per selector everywhere, dodged curves, the unit curve's axis, the token
strip's legend and long tokens, the per-example figures of a Diagnosis, `axis_problems`."""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from conftest import small_example, tiny_model

from workbench import plots
from workbench.diagnosis import Diagnosis, diagnose
from workbench.errors import WorkbenchError
from workbench.plots import colors
from workbench.plots.tokens import MAX_CHARS
from workbench.selectors.registry import registered_specs

SELECTORS = ("none", "full", "random", "cacheblend", "cadence-grad", "qattn")


@pytest.fixture(scope="module")
def diagnosis() -> Diagnosis:
    return diagnose(tiny_model("llama"), small_example(), selectors=SELECTORS, budgets=(0.1, 0.3),
                    attribution=False, max_new_tokens=4, progress=False)


def budget_summary(labels, em=None) -> pd.DataFrame:
    """A summary table as `experiments.summary.summarize` makes it: every selector at 0.1, 0.2, 0.3."""
    rows = []
    for i, label in enumerate(labels):
        for budget in (0.1, 0.2, 0.3):
            value = em if em is not None else 0.1 * i + budget
            rows.append({"selector": label, "unit": "single", "budget": budget, "em": value, "em_low": value - 0.05,
                         "em_high": value + 0.05, "flip_rate": 1 - value, "flip_low": 0.9 - value,
                         "flip_high": 1.1 - value, "rows_per_example": budget * 100})
    return pd.DataFrame(rows)


def unit_summary() -> pd.DataFrame:
    """A unit-curve summary whose units 64 and 256 are not budget-matched."""
    units = [1, 16, 64, 256, 1024]
    return pd.DataFrame({"unit": units, "informed_error": [0.1, 0.15, 0.2, 0.25, 0.3],
                         "random_error": [0.3, 0.3, 0.31, 0.32, 0.33], "unrepaired_error": [0.5] * 5,
                         "budget_share": [0.2, 0.2, 0.25, 0.4, 0.2], "budget_matched": [True, True, False, False, True],
                         "prompts_won": [3] * 5, "n_prompts": [3] * 5, "p_value": [0.1] * 5})


def trace_colors(fig: go.Figure) -> dict[str, str]:
    return {html.unescape(t.name): t.line.color for t in fig.data if t.name}


# ------------------------------------------------------------------ colours


def test_one_colour_per_selector_across_figures(diagnosis):
    toy = "my-toy-selector"
    curve = plots.budget_curve(budget_summary(["qattn", toy, "cadence-grad", "random", "cacheblend"]))
    rows = plots.rows_vs_accuracy(budget_summary(["cacheblend", "random", "cadence-grad", toy, "qattn"]))
    residual = plots.residual_figure(diagnosis, 0.1)  # another figure kind, other order, from a Diagnosis
    seen = [trace_colors(curve), trace_colors(rows), trace_colors(residual)]
    for label in ("random", "cacheblend", "cadence-grad", "qattn"):
        assert {figure[label] for figure in seen} == {plots.selector_color(label)}
    assert trace_colors(curve)[toy] == trace_colors(rows)[toy] == plots.selector_color(toy)
    assert plots.selector_color(toy) == colors.selector_color(toy)  # a stable hash, not registration order
    builtin = [s for s in registered_specs() if s not in ("none", "full")]
    assert len({plots.selector_color(s) for s in builtin}) == len(builtin)  # every built-in its own colour
    assert plots.selector_color("none") != plots.selector_color("full")


def test_coinciding_curves_are_dodged_and_hover_shows_the_true_budget():
    fig = plots.budget_curve(budget_summary(["random", "cacheblend", "qattn"], em=0.5))
    xs = [tuple(np.round(t.x, 6)) for t in fig.data]
    assert len(set(xs)) == 3  # same values, different x
    for trace in fig.data:  # each budget one slot (0, 1, 2), its selectors side by side within it
        true = [float(text.removeprefix("b = ")) for text in trace.text]
        assert true == [0.1, 0.2, 0.3] and max(abs(np.array(trace.x) - [0, 1, 2])) <= colors_slot() / 2 + 1e-9
    assert len({t.marker.symbol for t in fig.data}) == 3
    assert list(fig.layout.xaxis.tickvals) == [0, 1, 2] and list(fig.layout.xaxis.ticktext) == ["0.1", "0.2", "0.3"]
    rows = plots.rows_vs_accuracy(budget_summary(["random", "cacheblend"], em=0.5))
    assert tuple(rows.data[0].x) != tuple(rows.data[1].x)


def test_the_gap_curve_draws_each_share_with_its_interval_between_the_references():
    summary = budget_summary(["none", "full", "cacheblend", "cadence-grad"])
    dense, splice = 0.6, 0.2  # the share of the gap: (EM - splice) / (dense - splice)
    summary["gap_recovered"] = (summary["em"] - splice) / (dense - splice)
    summary.loc[summary["selector"] == "none", "gap_recovered"] = 0.0
    summary.loc[summary["selector"] == "full", "gap_recovered"] = 1.0
    summary["gap_recovered_low"] = summary["gap_recovered"] - 0.2
    summary["gap_recovered_high"] = summary["gap_recovered"] + 0.3
    fig = plots.gap_curve(summary, "gap")
    line = next(t for t in fig.data if t.name == "cadence-grad")
    want = summary[summary["selector"] == "cadence-grad"]
    assert list(line.y) == pytest.approx(list(want["gap_recovered"]))
    assert list(line.error_y.array) == pytest.approx([0.3] * 3) and list(line.error_y.arrayminus) == pytest.approx([0.2] * 3)
    assert sorted(s.y0 for s in fig.layout.shapes if s.name) == [0.0, 1.0]  # reuse all and full recompute
    assert "gap closed" in fig.layout.yaxis.title.text and plots.figure_problems(fig) == []
    assert "candidate pool" in fig.layout.xaxis.title.text and "reused rows" not in fig.layout.xaxis.title.text  # b is over the pool
    none = plots.gap_curve(summary.assign(gap_recovered=np.nan, gap_recovered_low=np.nan, gap_recovered_high=np.nan))
    assert not none.data and "no EM gap" in none.layout.title.text and plots.figure_problems(none) == []


def colors_slot() -> float:
    from workbench.plots.curves import SLOT

    return SLOT


STUDY_SELECTORS = ["none", "full", "random", "cacheblend", "relay", "densedev", "cadence", "cadence-grad", "bcr",
                   "bcr:grow", "bcr:single", "qattn", "epic", "prophetkv", "relaxkv", "coin:bcr"]  # RESULTS 10.4


@pytest.mark.parametrize("make", [lambda s: plots.budget_curve(s), lambda s: plots.rows_vs_accuracy(s)])
def test_a_curve_grows_to_show_every_legend_entry(make):
    """Sixteen selectors (the studies' list) put 16 entries beside the plot: at the fixed 440 px
    plotly scrolled the legend and hid the last ones (seen in the browser on a study run)."""
    from workbench.plots.curves import LEGEND_ENTRY, LEGEND_FRAME
    few, many = make(budget_summary(STUDY_SELECTORS[:6])), make(budget_summary(STUDY_SELECTORS))
    entries = [t.name for t in many.data if t.showlegend is not False] + [s.name for s in many.layout.shapes
                                                                         if s.showlegend]
    assert len(entries) == len(STUDY_SELECTORS)
    assert many.layout.height >= LEGEND_FRAME + LEGEND_ENTRY * len(entries) > few.layout.height


def test_one_budget_sits_on_its_tick_and_many_stay_apart():
    one = budget_summary(["random", "cacheblend", "qattn", "bcr"])
    one = one[one["budget"] == 0.2]
    fig = plots.budget_curve(one)
    xs = sorted(x for t in fig.data for x in t.x)
    assert list(fig.layout.xaxis.ticktext) == ["0.2"] and list(fig.layout.xaxis.tickvals) == [0]
    assert list(fig.layout.xaxis.range) == [-0.5, 0.5] and np.mean(xs) == pytest.approx(0)  # centred on the tick
    assert xs[-1] - xs[0] <= 0.6 + 1e-9  # not at the axis's edges
    assert plots.figure_problems(fig) == []
    ten = [s for s in registered_specs() if s not in ("none", "full")][:10]
    wide = budget_summary(ten)
    wide = pd.concat([wide, wide.assign(budget=wide["budget"] + 0.35)])  # five budgets, uneven gaps
    fig = plots.budget_curve(wide)
    per_slot = {}
    for t in fig.data:
        for x in t.x:
            per_slot.setdefault(round(x), []).append(x)
    gaps = [np.diff(sorted(v)).min() for v in per_slot.values()]
    assert len(per_slot) == 6 and min(gaps) >= 0.6 / 9 - 1e-9  # every selector's bar apart, at every budget
    shown = plots.budget_curve(wide, selectors=["random", "bcr"])
    assert [t.name for t in shown.data] == ["random", "bcr"]


def test_references_are_lines_in_their_own_colours_named_in_the_legend():
    fig = plots.budget_curve(budget_summary(["none", "full", "random"]))
    assert [t.name for t in fig.data] == ["random"] and not fig.layout.annotations  # no text on the data
    lines = [s for s in fig.layout.shapes if s.showlegend]
    assert {s.line.color for s in lines} == {plots.selector_color("none"), plots.selector_color("full")}
    assert sorted(s.name.split(" (")[0] for s in lines) == ["full recompute", "reuse all"]
    rows = plots.rows_vs_accuracy(budget_summary(["none", "full", "random", "cacheblend"]))
    assert min(x for t in rows.data for x in t.x) >= 0  # never at a negative number of rows


def test_a_coin_wears_its_selectors_colour_dotted_with_open_markers():
    coin, bcr = plots.selector_style("coin:bcr"), plots.selector_style("bcr")
    assert coin["line"]["color"] == bcr["line"]["color"] == plots.selector_color("coin:bcr")
    assert coin["line"]["dash"] == "dot" and coin["marker"]["symbol"] == bcr["marker"]["symbol"] + "-open"
    assert plots.method_color("bcr") == plots.selector_color("bcr")  # BCR's repair, a method and a selector
    assert plots.method_style("bcr-coin")["line"]["dash"] == "dot"


def test_methods_and_series_never_borrow_a_selectors_colour():
    from workbench.experiments.pipeline_run import DEFAULT_METHODS

    palette = {plots.selector_color(s) for s in registered_specs()}
    methods = {m: plots.method_color(m) for m in DEFAULT_METHODS if not m.startswith("bcr")}
    assert len(set(methods.values())) == len(methods) and not set(methods.values()) & palette
    assert plots.method_color("my-method") == plots.method_color("my-method")  # hashed, stable
    assert not {plots.series_color(s) for s in colors.SERIES} & palette
    assert not {plots.series_color(s) for s in colors.SERIES} & set(methods.values())  # nor a method's


# ------------------------------------------------------------------ axes


def test_unit_curve_axis_covers_its_data():
    fig = plots.unit_curve_figure(unit_summary())
    assert plots.axis_problems(fig) == []
    low, high = fig.layout.xaxis.range
    assert low < math.log10(1) and high > math.log10(1024) and high < 4  # not 10^256
    assert not fig.layout.annotations and plots.annotation_problems(fig) == []  # nothing a line can strike through
    ticks = dict(zip(fig.layout.xaxis.tickvals, fig.layout.xaxis.ticktext))
    assert "25% rows" in ticks[64] and "40% rows" in ticks[256] and ticks[16] == "16"
    assert fig.data[0].line.color == plots.selector_color("bcr") and fig.data[1].line.color == plots.selector_color("random")


def test_annotation_problems_flag_text_on_the_plotting_area():
    fig = go.Figure(go.Scatter(x=[0, 1], y=[0, 1]))
    fig.add_hline(y=0.0, annotation_text="floor 0.000", annotation_position="bottom left")
    fig.add_annotation(x=0.5, y=0.5, text="")  # an arrow without text
    fig.add_annotation(x=1.02, y=0.5, xref="paper", yref="paper", text="in the margin")
    problems = plots.annotation_problems(fig)
    assert len(problems) == 1 and "floor 0.000" in problems[0]
    assert plots.figure_problems(fig) == problems


def test_axis_problems_flags_the_old_unit_curve():
    s = unit_summary()
    fig = go.Figure(go.Scatter(x=s["unit"], y=s["informed_error"]))
    for u in (64, 256):  # the first version's notes: data coordinates on a log axis
        fig.add_annotation(x=u, y=0.3, text="not matched")
    fig.update_xaxes(type="log")
    problems = plots.axis_problems(fig)
    assert len(problems) == 2 and "10^256" in problems[1] and "xaxis" in problems[0]


def test_axis_problems_checks_explicit_ranges_and_figure_json():
    fig = go.Figure(go.Scatter(x=np.array([0.0, 1.0, 2.0]), y=np.array([0.5, 1.5, 0.2])))
    fig.update_yaxes(range=[0, 1])
    fig.add_hline(y=1.2)
    problems = plots.axis_problems(fig)
    assert len(problems) == 2 and "yaxis shows [0, 1]" in problems[0] and "shape" in problems[1]
    assert plots.axis_problems(json.loads(fig.to_json())) == problems  # as a browser gets it (typed arrays)
    fig.update_yaxes(range=[0, 2])
    assert plots.axis_problems(fig) == []
    log = go.Figure(go.Scatter(x=[0, 1, 10], y=[1, 2, 3]))
    log.update_xaxes(type="log")
    assert "<= 0" in plots.axis_problems(log)[0]


# ------------------------------------------------------------------ token strip


def long_tokens() -> pd.DataFrame:
    toks = ["The", " antidisestablishmentarianism", " <script>", "\n", " of", " internationalization"] * 5
    return pd.DataFrame({"position": range(len(toks)), "token": toks, "segment": ["passage 1"] * len(toks),
                         "passage": [0] * len(toks), "reused": [True] * len(toks)})


def test_token_strip_legend_and_colour_bar_never_overlap():
    tokens = long_tokens()
    values = pd.Series(np.linspace(0.01, 1, len(tokens)), index=tokens["position"])
    fig = plots.token_strip(tokens, values, picks=[1, 4], value_label="score")
    legend, bar = fig.layout.legend, fig.data[0].colorbar
    assert fig.layout.showlegend and fig.data[0].showscale
    assert legend.orientation == "h" and legend.yanchor == "bottom" and legend.y >= 1  # above the plot area
    assert legend.xanchor == "left" and legend.x == 0  # at the left, under the title: away from the tool bar
    assert bar.lenmode == "fraction" and bar.yanchor == "middle"
    assert bar.y + bar.len / 2 <= 1 and bar.y - bar.len / 2 >= 0 and bar.x >= 1  # beside it, within its height
    assert [s.name for s in fig.layout.shapes if s.showlegend] == ["recomputed"]
    outlines = [s for s in fig.layout.shapes if s.name == "recomputed"]
    halos = [s for s in fig.layout.shapes if s.name == "recomputed (halo)"]  # white under crimson: seen on dark cells
    assert len(outlines) == len(halos) == 2 and halos[0].line.width > outlines[0].line.width
    assert plots.axis_problems(fig) == []


def test_token_strip_shows_only_the_segments_asked_for():
    tokens = long_tokens()
    tokens.loc[15:, "segment"] = "passage 2"
    fig = plots.token_strip(tokens, None, segments=["passage 2"], per_line=5)
    assert list(fig.layout.yaxis.ticktext) == ["passage 2"] and np.asarray(fig.data[0].z).shape == (3, 5)
    with pytest.raises(WorkbenchError, match="no segments"):
        plots.token_strip(tokens, None, segments=["passage 9"])


def test_token_strip_truncates_long_tokens_and_keeps_them_in_hover():
    fig = plots.token_strip(long_tokens(), None)
    cells = [html.unescape(t) for t in np.asarray(fig.data[0].text).ravel() if t]
    assert max(len(t) for t in cells) == MAX_CHARS and " antidi…" in cells and " <scrip…" in cells
    hover = " ".join(str(h) for h in next(t for t in fig.data if t.name == "tokens").text)
    assert " antidisestablishmentarianism" in hover and "&lt;script&gt;" in hover and "<script>" not in hover
    assert fig.data[0].x is None and np.asarray(fig.data[0].z).shape[1] <= 1000 // (6.5 * MAX_CHARS)


# ------------------------------------------------------------------ per-example figures


def test_diagnosis_figures_have_the_expected_keys(diagnosis):
    layer = list(dict.fromkeys(diagnosis.layer_signals["signal"]))
    figures = plots.diagnosis_figures(diagnosis)
    assert list(figures) == ["tokens", "picks", "deviation", *[f"layer:{n}" for n in layer], "residual",
                             "answer_tokens"]
    assert all(plots.axis_problems(fig) == [] for fig in figures.values())
    picks = figures["picks"].layout.yaxis.ticktext  # rows named by ticks on a numeric axis
    assert list(picks) == ["random", "cacheblend", "cadence-grad", "qattn", "agreement"]  # no references
    assert "b = 0.1" in figures["tokens"].layout.title.text
    chosen = plots.diagnosis_figures(diagnosis, budget=0.3, selectors=["qattn"])
    assert list(chosen["picks"].layout.yaxis.ticktext) == ["qattn", "agreement"]
    assert {t.name for t in chosen["residual"].data} == {"none", "full", "qattn"}


def test_a_model_with_local_and_global_layers_gets_a_layer_type_figure(diagnosis):
    assert "layer_types" not in plots.diagnosis_figures(diagnosis)  # Llama: every layer global
    gemma = diagnose(tiny_model("gemma3_text"), small_example(), selectors=("none", "full"), budgets=(0.1,),
                     attribution=False, max_new_tokens=2, progress=False)
    figures = plots.diagnosis_figures(gemma)
    keys = list(figures)
    assert keys[keys.index("deviation") + 1] == "layer_types"
    fig = figures["layer_types"]
    assert plots.axis_problems(fig) == []
    marked = {t.name: list(t.x) for t in fig.data if t.mode == "markers"}
    assert marked == {"local layers (window 16)": [0, 2], "global layers": [1]}
    assert list(fig.layout.xaxis.range) == [-0.5, 2.5]  # the layers, not -1 to n
    dev = gemma.deviation
    rel = dev[(dev["kind"] == "v") & (dev["metric"] == "rel_l2")].groupby("layer")["value"].mean()
    assert list(fig.data[0].y) == pytest.approx(rel.tolist())
    with pytest.raises(WorkbenchError, match="does not mix"):
        plots.diagnosis.layer_type_figure(diagnosis)
    heat = figures["deviation"]
    assert list(heat.layout.yaxis.ticktext) == ["0 L", "1 G", "2 L"] and "G global" in heat.layout.title.text
    assert plots.deviation_figure(diagnosis).layout.yaxis.ticktext is None  # Llama: plain layer numbers


def test_layer_signals_take_log_scale_and_label_from_the_registry(diagnosis):
    fig = plots.layer_signal_figure(diagnosis, "grad_sq_v")
    assert fig.layout.title.text.startswith("squared gradient, values") and "log10" in fig.data[0].colorbar.title.text
    plain = plots.layer_signal_figure(diagnosis, "question_attention")
    assert "log10" not in (plain.data[0].colorbar.title.text or "")
    strip = plots.strip_figure(diagnosis, signal="cadence_grad")  # registered log=True
    assert "log10" in strip.data[0].colorbar.title.text


def test_a_diagnosis_renders_itself(diagnosis, monkeypatch):
    page = diagnosis._repr_html_()
    assert page.count("Plotly.newPlot") == len(plots.diagnosis_figures(diagnosis))
    assert page.count("window.PlotlyConfig") == 1 and html.escape(diagnosis.example.question, quote=False) in page
    shown = []
    monkeypatch.setattr(go.Figure, "show", lambda self, *a, **k: shown.append(self))
    diagnosis.show(budget=0.3)
    assert len(shown) == len(plots.diagnosis_figures(diagnosis))


def test_the_flip_matrix_says_which_example_and_how_many_draws():
    from workbench.plots.curves import flip_matrix_figure

    matrix = pd.DataFrame({"bcr": [1.0, 0.0], "coin:bcr": [0.6, 0.0]}, index=["a", "b"])
    fig = flip_matrix_figure(matrix, questions={"a": "Who coached <b>Mira</b>?"}, draws={"coin:bcr": 5})
    cells = fig.data[1]
    hover = dict(zip(map(tuple, cells.customdata), cells.text))
    assert "flips in 3 of its 5 draws" in hover[("a", "coin:bcr")]
    assert "kept dense's answer in all 5 draws" in hover[("b", "coin:bcr")]  # never "flips in 0 of 5"
    assert "Who coached &lt;b&gt;Mira&lt;/b&gt;?" in hover[("a", "bcr")] and "flips against dense" in hover[("a", "bcr")]
    assert fig.data[0].xgap >= 2 and fig.data[0].colorbar.title.text.startswith("flips")  # a grid and a key


def test_heatmaps_mark_passage_boundaries_and_layer_types_keep_their_axis(diagnosis):
    fig = plots.deviation_figure(diagnosis)
    reused = diagnosis.tokens[diagnosis.tokens["reused"]]
    assert len([s for s in fig.layout.shapes if s.type == "line"]) == reused["segment"].nunique() - 1


def test_the_flip_matrix_labels_every_example_of_a_small_run_and_stays_bounded_for_a_large_one():
    from workbench.plots.curves import MAX_MATRIX_HEIGHT, flip_matrix_figure

    small = pd.DataFrame({"none": [1, 0, 1], "cadence": [0, 0, 1]}, index=["a", "b", "c"])
    fig = flip_matrix_figure(small)
    assert fig.layout.yaxis.dtick == 1 and fig.layout.height == 360 and fig.layout.xaxis.side == "top"
    large = pd.DataFrame({"none": [1, 0] * 200}, index=[str(i) for i in range(400)])
    fig = flip_matrix_figure(large)
    assert fig.layout.yaxis.dtick is None and fig.layout.height == MAX_MATRIX_HEIGHT
    assert plots.axis_problems(fig) == []


# ------------------------------------------------------------------ linked selection, hover with every signal


def test_a_chosen_token_is_outlined_in_the_strip_the_picks_and_every_heatmap(diagnosis):
    reused = diagnosis.tokens[diagnosis.tokens["reused"]].reset_index(drop=True)
    chosen = int(reused["position"].iloc[5])
    strip = plots.strip_figure(diagnosis, 0.3, "deviation", highlight=chosen)
    cells = next(t for t in strip.data if t.name == "tokens")  # the clickable cells: customdata [position]
    assert sorted(int(c[0]) for c in cells.customdata) == diagnosis.tokens["position"].tolist()
    box = next(s for s in strip.layout.shapes if s.name == "chosen token")
    at = [int(c[0]) for c in cells.customdata].index(chosen)
    assert (box.x0 + box.x1) / 2 == cells.x[at] and (box.y0 + box.y1) / 2 == cells.y[at]
    assert not [s for s in plots.strip_figure(diagnosis, 0.3).layout.shapes if s.name == "chosen token"]
    for fig in (plots.picks_figure(diagnosis, 0.3, highlight=chosen), plots.deviation_figure(diagnosis, highlight=chosen),
                plots.layer_signal_figure(diagnosis, "grad_sq_v", highlight=chosen)):
        (column,) = [s for s in fig.layout.shapes if s.name == "chosen token"]
        assert (column.x0 + column.x1) / 2 == 5 and column.yref == "y domain"
        assert plots.axis_problems(fig) == []


def test_heatmaps_and_the_picks_matrix_name_their_columns_by_token(diagnosis):
    from workbench.plots.text import token_text

    reused = diagnosis.tokens[diagnosis.tokens["reused"]].reset_index(drop=True)
    for fig in (plots.picks_figure(diagnosis, 0.3), plots.deviation_figure(diagnosis)):
        ticks = dict(zip(fig.layout.xaxis.tickvals, fig.layout.xaxis.ticktext))
        assert ticks[0] == token_text(reused["token"].iloc[0], MAX_CHARS)
        assert all(ticks[i] == token_text(reused["token"].iloc[i], MAX_CHARS) for i in ticks)
    many = pd.DataFrame({"position": range(300), "token": [f"t{i}" for i in range(300)], "segment": "passage 1",
                         "passage": 0, "reused": True})
    fig = plots.picks_matrix(many, {"a": [3, 4]})
    assert len(fig.layout.xaxis.tickvals) <= 60 and fig.layout.xaxis.ticktext[1] == "t5"


def test_hovering_a_token_lists_every_signal_and_who_picked_it(diagnosis):
    from workbench.plots.diagnosis import token_values
    from workbench.signals.registry import label

    card = token_values(diagnosis, 0.3, ["random", "cadence-grad"])
    names = [label(n, "token") for n in dict.fromkeys(diagnosis.token_signals["signal"])]
    assert all(n in card.columns for n in names) and any(c.startswith("value deviation") for c in card.columns)
    position = diagnosis.picks("cadence-grad", 0.3)[0]
    assert "cadence-grad" in card.loc[position, "picked by"]
    assert card.loc[position, names[0]] == pytest.approx(diagnosis.signal(names and next(
        iter(dict.fromkeys(diagnosis.token_signals["signal"])))).loc[position])
    strip = plots.strip_figure(diagnosis, 0.3, "deviation", selectors=["random", "cadence-grad"])
    cells = next(t for t in strip.data if t.name == "tokens")
    hover = html.unescape(cells.text[[int(c[0]) for c in cells.customdata].index(position)])
    assert all(f"{n}:" in hover for n in names) and "picked by: " in hover and "cadence-grad" in hover


# ------------------------------------------------------------------ A against B


def test_a_against_b_splits_the_rows_into_only_a_both_and_only_b(diagnosis):
    from workbench.plots.compare import compare_figure, picks_compared

    a, b = set(diagnosis.picks("cadence-grad", 0.3)), set(diagnosis.picks("random", 0.3))
    table = picks_compared(diagnosis, "cadence-grad", "random", 0.3)
    split = {k: set(g["position"]) for k, g in table.groupby("picked")}
    assert split.get("both", set()) == a & b and split.get("only cadence-grad", set()) == a - b
    assert split.get("only random", set()) == b - a and set(table["position"]) == a | b
    fig = compare_figure(diagnosis, "cadence-grad", "random", 0.3, highlight=sorted(a)[0])
    z = np.asarray(fig.data[0].z)  # [3, reused token]: only A = 1, both = 2, only B = 3, else 0
    assert [int((z[i] > 0).sum()) for i in range(3)] == [len(a - b), len(a & b), len(b - a)]
    assert fig.data[0].y[0] == f"only cadence-grad ({len(a - b)})" and fig.data[0].y[2] == f"only random ({len(b - a)})"
    scale = dict((round(edge, 3), color) for edge, color in fig.data[0].colorscale)
    assert scale[0.25] == colors.selector_color("cadence-grad") and scale[1.0] == colors.selector_color("random")
    assert [s.name for s in fig.layout.shapes if s.name == "chosen token"] == ["chosen token"]
    assert plots.axis_problems(fig) == []


# ------------------------------------------------------------------ the answer token by token


def test_the_answer_tokens_figure_shows_dense_answer_probabilities_under_each_cell(diagnosis):
    from dataclasses import replace

    from workbench.plots.answer import answer_tokens_figure

    rows = diagnosis.answer_tokens
    outcomes = at_budget(diagnosis.outcomes, 0.3)
    for _, cell in outcomes.iterrows():  # per cell, the tokens' log p add up to the recorded dense_logprob
        mine = rows[(rows["cell"] == cell["selector"]) & ((rows["budget"] - 0.3).abs() < 1e-9)]
        mine = mine[mine["draw"] == cell["draw"]] if pd.notna(cell["draw"]) else mine
        assert mine["logprob"].sum() == pytest.approx(cell["dense_logprob"], abs=1e-4)
    n = len(diagnosis.answers.dense.token_ids) + int(diagnosis.answers.dense.stopped)
    assert (rows.groupby("cell")["index"].nunique() == n).all()
    fig = answer_tokens_figure(diagnosis, 0.3, ["cadence-grad", "random"])
    assert list(fig.data[0].y) == ["dense", "spliced", "cadence-grad", "random"]
    dense = rows[rows["cell"] == "dense"].sort_values("index")
    assert np.asarray(fig.data[0].z)[0] == pytest.approx(np.exp(dense["logprob"].to_numpy()))
    assert len(fig.layout.xaxis.ticktext) == n and fig.data[0].zmin == 0 and fig.data[0].zmax == 1
    assert plots.axis_problems(fig) == []
    old = replace(diagnosis, tables={k: v for k, v in diagnosis.tables.items() if k != "answer_tokens"})
    with pytest.raises(WorkbenchError, match="made before"):
        answer_tokens_figure(old, 0.3, ["random"])


def at_budget(table: pd.DataFrame, budget: float) -> pd.DataFrame:
    return table[(table["budget"] - budget).abs() < 1e-9]
