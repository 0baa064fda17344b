"""`diagnosis_to_html`: one standalone page per Diagnosis, its figures from `workbench.plots`.

Sections: the example, the answers (which repairs flip, and what an answer recites of the passages
outside the gold evidence), one token strip per token signal, each selector's picks per budget,
layer x token heatmaps, the deviation left after repair, costs, the attribution check and where the
result comes from.
"""

from __future__ import annotations

from workbench.diagnosis import Diagnosis
from workbench.experiments.answer_sources import recited_note
from workbench.plots import diagnosis as figures
from workbench.plots.embed import figure_div
from workbench.report.page import answer_cell, e, flip_cells, kv_table, num, page
from workbench.report.schema import diagnosis_to_json, table
from workbench.runstore import Manifest
from workbench.tasks import Example


class _Figures:
    """Numbered figure divs of one page (plotly.js itself goes once into <head>)."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig, caption: str = "") -> str:
        self.count += 1
        return figure_div(fig, f"fig-{self.count}", caption)


def _example(doc: dict) -> str:
    ex, ctx = doc["example"], doc["context"]
    parts = []
    if ex.get("system"):
        parts.append(f'<p><b>System:</b> <span class="text">{e(ex["system"])}</span></p>')
    for i, passage in enumerate(ex["passages"], 1):
        parts.append(f'<div class="passage"><span class="tag">passage {i}</span><span class="text">{e(passage)}</span></div>')
    parts.append(f'<p><b>Question:</b> <span class="text">{e(ex["question"])}</span></p>')
    parts.append(f'<p><b>Gold:</b> <span class="text">{e(" | ".join(ex.get("gold") or []) or "(none)")}</span></p>')
    err = ctx.get("layer0_error") or {}
    parts.append(f'<p class="note">{num(ctx.get("n_tokens"))} tokens, {num(ctx.get("n_reused"))} reused (spliced '
                 f'from isolated passage caches); layer-0 splice vs dense: max |dK| {num(err.get("k"))}, max |dV| '
                 f'{num(err.get("v"))}; keys moved by {e(ctx.get("rerotation", "delta"))} re-rotation{_floor(ctx)}.</p>')
    return "".join(parts)


def _floor(ctx: dict) -> str:
    """The RoPE rounding floor, so that nobody reads rounding as splice error."""
    floor = [v for v in ctx.get("rope_floor") or [] if v is not None]
    if not floor:
        return ""
    return (f" (its rounding alone moves keys by up to {num(max(floor))} relative to dense, largest per layer; "
            f"deviation below that is rounding, not splice error)")


def _answers(doc: dict, example: Example) -> str:
    a, f = doc["answers"], doc["flips"]

    def cell(text, n_tokens) -> str:  # the answer, with what it recites of the passages outside the evidence
        return answer_cell(text, n_tokens, recited_note(example, text))

    head = ("<tr><th>answer of</th><th>budget</th><th>rows recomputed</th><th>answer</th><th>flip vs dense</th>"
            "<th>token ids vs dense</th><th>F1 to dense</th><th>first token = dense's</th>"
            "<th>log p(dense answer) per token</th><th>EM</th><th>F1</th></tr>")
    dense, spliced = a["dense"], a["spliced"]
    rows = [(f'<tr class="ref"><td>dense (reference)</td><td>–</td><td>all</td>'
             f'{cell(dense["text"], len(dense["token_ids"]))}'
             f'<td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>{num(dense["em"])}</td><td>{num(dense["f1"])}</td></tr>'),
            (f'<tr class="ref"><td>spliced (no repair)</td><td>–</td><td>0</td>'
             f'{cell(spliced["text"], len(spliced["token_ids"]))}{flip_cells(spliced["flip"], spliced["flip_strict"])}'
             f'<td>–</td><td>–</td><td>–</td><td>{num(spliced["em"])}</td><td>{num(spliced["f1"])}</td></tr>')]
    rows += [f'<tr><td>{e(_label(r))}</td><td>{num(r.get("budget"))}</td><td>{num(r.get("n_recomputed"))}</td>'
             f'{cell(r.get("answer"), r.get("answer_tokens"))}{flip_cells(r.get("flip"), r.get("flip_strict"))}'
             f'<td>{num(r.get("f1_to_dense"))}</td><td>{_yes(r.get("first_token_agree"))}</td>'
             f'<td>{num(r.get("dense_logprob_mean"), 4)}</td><td>{num(r.get("em"))}</td><td>{num(r.get("f1"))}</td></tr>'
             for r in a["repairs"]]
    summary = (f'<p>Spliced answer: <b>{"flips" if f["spliced"] else "matches dense"}</b>. Repairs that flip: '
               f'<b>{f["n_flipped"]}</b> of {f["n_repairs"]} ({f["n_flipped_strict"]} differ in token ids).</p>')
    return summary + f'<table class="grid">{head}{"".join(rows)}</table>'


def _label(repair: dict) -> str:
    """A repair's selector, with its draw for a drawn control (`random, draw 2`)."""
    draw = repair.get("draw")
    return repair.get("selector") if draw is None else f"{repair.get('selector')}, draw {draw}"


def _yes(value) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _not_kept(d: Diagnosis, names: tuple[str, ...], what: str) -> str | None:
    """The note for a kept record that lacks any of `names` (keep.py keeps the outcomes), else None."""
    if any(name not in d.tables for name in names):
        return (f'<p class="note">{what} were not kept in this record (it keeps the outcomes); the explorer '
                'can rebuild them.</p>')
    return None


def _token_signals(d: Diagnosis, figs: _Figures) -> str:
    signals = table(d, "token_signals")
    if signals.empty or table(d, "tokens").empty:
        return (_not_kept(d, ("token_signals", "tokens"), "Token signals")
                or '<p class="note">No token signals in this diagnosis.</p>')
    return "".join(figs.div(figures.strip_figure(d, signal=str(name), reused_only=True))
                   for name in dict.fromkeys(signals["signal"]))


def _picks(d: Diagnosis, figs: _Figures) -> str:
    sel = table(d, "selections")
    if sel.empty or table(d, "tokens").empty:
        return (_not_kept(d, ("selections", "tokens"), "Selections")
                or '<p class="note">No selections in this diagnosis.</p>')
    out = []
    if figures.chosen_selectors(d):
        out += [figs.div(figures.picks_figure(d, budget),
                         caption="Red: the row is recomputed. The last line is the share of selectors that pick the "
                                 "token. The references (reuse all, full recompute) are left out.")
                for budget in figures.budgets(d)]
    head = ("<tr><th>selector</th><th>unit</th><th>budget</th><th>rows requested</th><th>rows recomputed</th>"
            "<th>units</th><th>budget matched</th><th>skipped</th><th>attention saved (query-key pairs)</th></tr>")
    body = "".join(
        f'<tr><td>{e(r["selector"])}</td><td>{e(r.get("unit"))}</td><td>{num(r["budget"])}</td>'
        f'<td>{num(r.get("n_requested"))}</td><td>{num(r.get("n_recomputed"))}</td><td>{num(r.get("n_units"))}</td>'
        f'<td>{num(r.get("budget_matched"))}</td><td>{num(r.get("skipped"))}</td>'
        f'<td>{num(r.get("attention_saved"))}</td></tr>'
        for r in sel.to_dict(orient="records"))
    return "".join(out) + f'<details><summary>selection table</summary><table class="grid">{head}{body}</table></details>'


def _layers(d: Diagnosis, figs: _Figures) -> str:
    layer = table(d, "layer_signals")
    out = [figs.div(figures.layer_signal_figure(d, str(name))) for name in
           (dict.fromkeys(layer["signal"]) if not layer.empty else ())]
    if not out:
        out.append('<p class="note">No per-layer signals in this diagnosis.</p>')
    dev = table(d, "deviation")
    for kind in ("k", "v"):
        if not dev.empty and ((dev["kind"] == kind) & (dev["metric"] == "rel_l2")).any():
            out.append(figs.div(figures.deviation_figure(d, kind, "rel_l2"),
                                caption="Deviation of the spliced cache from the dense prefill, per layer and reused "
                                        "token, before any repair."))
    return "".join(out)


def _residual(d: Diagnosis, figs: _Figures) -> str:
    res = table(d, "residual")
    if res.empty:
        return '<p class="note">No residual deviation in this diagnosis.</p>'
    return "".join(figs.div(figures.residual_figure(d, float(budget), kind)) for budget in sorted(res["budget"].unique())
                   for kind in ("v", "k") if (res["kind"] == kind).any())


def _layer_effects(d: Diagnosis, figs: _Figures) -> str:
    """The section of the per-layer recompute effects; empty when the diagnosis has none."""
    effects = table(d, "layer_effects")
    if effects.empty:
        return ""
    views = [figures.layer_effects_view(d, float(budget), str(selector))
             for selector, budget in dict.fromkeys(zip(effects["selector"], effects["budget"]))]
    return "<h2>Where the repair recovers the answer, layer by layer</h2>" + "".join(
        figs.div(v, caption="The suffix rows' residual stream after each layer, against dense's, and the logit lens "
                            "of dense's first answer token on the last suffix row.") for v in views if v is not None)


def _costs(doc: dict) -> str:
    costs = doc["costs"]
    if not costs:
        return ""
    cols = list(costs[0])
    head = "".join(f"<th>{e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{e(r[c]) if isinstance(r[c], str) else num(r[c])}</td>" for c in cols)
                   + "</tr>" for r in costs)
    return f'<table class="grid"><tr>{head}</tr>{body}</table>'


def _meta(doc: dict) -> str:
    run = doc["run"]
    model = run.get("model", {})
    rows = [("model", e(model.get("name"))), ("source", e(model.get("source"))), ("family", e(model.get("family"))),
            ("shape", e(f"{model.get('n_layers')} layers, {model.get('n_heads')} heads, {model.get('n_kv_heads')} kv "
                        f"heads, head dim {model.get('head_dim')}")),
            ("dtype / device", e(f"{model.get('dtype')} / {model.get('device')}")),
            ("seed", e(run.get("seed"))), ("workbench", e(run.get("workbench_version")))]
    if model.get("fingerprint"):
        rows.append(("model fingerprint", e(model["fingerprint"])))
    rows.append((f"versions ({run.get('versions_source')})",
                 e(", ".join(f"{k} {v}" for k, v in (run.get("versions") or {}).items()))))
    if run.get("git_revision"):
        rows.append(("git revision", e(run["git_revision"])))
    if run.get("run"):
        r = run["run"]
        rows.append(("run", e(f"{r.get('kind')} of {r.get('dataset')} (n={r.get('n')}), status {r.get('status')}, "
                              f"{r.get('start')} to {r.get('end')}")))
    config = run.get("config", {})
    rows.append(("selectors", e(", ".join(map(str, config.get("selectors", []))))))
    rows.append(("budgets", e(", ".join(num(b) for b in config.get("budgets", [])))))
    rows.append(("settings", e(", ".join(f"{k}={v}" for k, v in config.items() if k not in ("selectors", "budgets", "seed")))))
    if run.get("timing"):
        rows.append(("timing", e(", ".join(f"{k} {num(v)}" for k, v in run["timing"].items()))))
    return kv_table(rows)


def diagnosis_to_html(diagnosis: Diagnosis, run_manifest: Manifest | None = None) -> str:
    """One standalone HTML page (plotly.js embedded once, no network) for one Diagnosis."""
    doc = diagnosis_to_json(diagnosis, run_manifest)
    figs = _Figures()
    sections = [
        f'<h1>KV repair report: example <span class="text">{e(diagnosis.example_id)}</span></h1>',
        "<h2>Example</h2>", _example(doc),
        "<h2>Answers</h2>", _answers(doc, diagnosis.example),
        "<h2>Token signals</h2>",
        ('<p class="note">Each signal\'s score per reused token (hover for the value and the whole token). Tokens '
         'are shown as the model reads them.</p>'), _token_signals(diagnosis, figs),
        "<h2>Selectors' picks at each budget</h2>", _picks(diagnosis, figs),
        "<h2>Layer × token heatmaps</h2>", _layers(diagnosis, figs),
        "<h2>Deviation left after repair</h2>", _residual(diagnosis, figs),
        _layer_effects(diagnosis, figs),
        "<h2>Costs</h2>", _costs(doc),
        "<h2>Attribution check</h2>", f'<p class="text">{e(doc["attribution"]["summary"])}</p>',
        "<h2>Run</h2>", _meta(doc),
    ]
    return page(f"kvwb report: {e(diagnosis.example_id)}", "\n".join(sections), plotly=figs.count > 0)
