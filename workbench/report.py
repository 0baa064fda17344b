"""Per-example saliency reports: one standalone HTML file (or JSON document) per Diagnosis.

    kvwb report runs/NAME --example ID --out FILE.html     (or FILE.json)
    kvwb report runs/NAME --all --out DIR                  DIR/index.html + one .html and .json per example
    kvwb report DIAGNOSIS_FOLDER --out FILE.html           a folder written by `kvwb diagnose --out`

From Python: `diagnosis_to_html(d)`, `diagnosis_to_json(d)`, `write_report(d, path)`.

The HTML opens offline: plotly.js is embedded once in a <script> in <head> (no CDN, no
network), every figure is drawn by the builders of `workbench.plots`, and every string that
comes from the user or the model (passages, question, gold, answers, tokens, ids, selector
names) is HTML-escaped; figure JSON is emitted with every '<' written as \\u003c, so no string
can close the <script> that holds it.

JSON schema (``schema_version`` 1; NaN and infinities are written as null)
------------------------------------------------------------------------
    schema_version   int, 1
    kind             "kvwb.diagnosis_report"
    example          {id, passages: [str], question, gold: [str], system: str|null, meta: {}}
    run              {model: {name, source, family, n_layers, n_heads, n_kv_heads, head_dim, dtype,
                      device, fingerprint?}, workbench_version, versions: {package: version},
                      versions_source: "run manifest" | "diagnosis", seed, config: {diagnose() keywords},
                      git_revision: str|null, run: {kind, dataset, n, status, start, end}|null,
                      timing: {context_s, signals_s, repairs_s, n_repairs, total_s}}
    answers          {dense:   {text, token_ids, stopped, em, f1},
                      spliced: {text, token_ids, stopped, em, f1, flip, flip_strict},
                      repairs: [{selector, layout, budget, n_reused, n_recomputed, answer, flip,
                                 flip_strict, em, f1, dense_logprob, seconds}]}
                     flip: the answer differs from dense after SQuAD normalization;
                     flip_strict: the generated token ids differ
    flips            {spliced, spliced_strict, n_repairs, n_flipped, n_flipped_strict,
                      flipped: [{selector, budget}]}
    context          {n_tokens, n_reused, layer0_error: {k, v},
                      segments: [{name, kind, start, end}]                 (end exclusive),
                      tokens: [{position, token, segment, passage, reused}]}
    token_signals    {signal: {positions: [int], values: [float|null]}}   one score per reused token
    picks            [{selector, layout, budget, n_requested, n_recomputed, n_units, skipped,
                       budget_matched, positions: [int]}]                  absolute positions recomputed
    layer_signals    {signal: {layers: [int], positions: [int], values: [[float|null]]}}
                     values[i][j]: layer layers[i], token positions[j]
    deviation        {"KIND/METRIC": {layers, positions, values}}          splice vs dense per layer and
                     token; KIND k (post-RoPE keys) or v, METRIC l2, rel_l2 or cosine
    residual         [{selector, layout, budget, kind, layers: [int], values: [float|null]}]
                     relative L2 vs dense over the reused rows, per layer, left after the repair
    costs            [{selector, forward_passes, backward_passes, decode_steps, layer_tokens,
                       needs_dense, seconds}]
    attribution      {summary: str, correlations: {kind: {rho, p_value, n}},
                      sample: [{position, segment, kind, estimate, actual}]}
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import pandas as pd

from workbench.diagnosis import Diagnosis
from workbench.errors import WorkbenchError

SCHEMA_VERSION = 1
KIND = "kvwb.diagnosis_report"
SUFFIXES = (".html", ".json")
_REFERENCE_SELECTORS = ("none", "full")  # left out of the picks matrix: nothing / everything
_LOG_SIGNALS = ("grad", "gated")  # per-layer signals drawn on a log10 scale
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
RUN_COMMAND = "kvwb run --dataset DATA --out {run}"


# --------------------------------------------------------------------------- JSON


def _clean(value):
    """A JSON-safe copy: numpy/pandas scalars to Python, NaN/inf/NA to None, tuples to lists."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray, pd.Series, pd.Index)):
        return [_clean(v) for v in value]
    if value is pd.NA or value is pd.NaT:
        return None
    return str(value)


def _table(diagnosis: Diagnosis, name: str) -> pd.DataFrame:
    table = diagnosis.tables.get(name)
    return table if table is not None else pd.DataFrame()


def _records(table: pd.DataFrame, columns=None) -> list[dict]:
    if table.empty:
        return []
    if columns is not None:
        table = table[[c for c in columns if c in table.columns]]
    return [_clean(row) for row in table.to_dict(orient="records")]


def _matrix(rows: pd.DataFrame) -> dict:
    """layer, position, value rows -> {layers, positions, values[layer][position]}."""
    wide = rows.pivot_table(index="layer", columns="position", values="value", aggfunc="mean")
    return {"layers": _clean(list(wide.index)), "positions": _clean(list(wide.columns)),
            "values": _clean(wide.to_numpy().tolist())}


def _normalized_flip(a: str, b: str) -> bool:
    from workbench.tasks import normalize_answer

    return normalize_answer(a) != normalize_answer(b)


def _answers(diagnosis: Diagnosis) -> dict:
    answers = diagnosis.info.get("answers", {})
    dense = dict(answers.get("dense", {}))
    spliced = dict(answers.get("spliced", {}))
    if dense and spliced:
        spliced["flip"] = _normalized_flip(spliced.get("text", ""), dense.get("text", ""))
        spliced["flip_strict"] = list(spliced.get("token_ids", [])) != list(dense.get("token_ids", []))
    repairs = _records(_table(diagnosis, "outcomes"),
                       ["selector", "layout", "budget", "n_reused", "n_recomputed", "answer", "flip",
                        "flip_strict", "em", "f1", "dense_logprob", "seconds"])
    return {"dense": _clean(dense), "spliced": _clean(spliced), "repairs": repairs}


def _flips(answers: dict) -> dict:
    repairs = answers["repairs"]
    return {"spliced": answers["spliced"].get("flip"), "spliced_strict": answers["spliced"].get("flip_strict"),
            "n_repairs": len(repairs), "n_flipped": sum(bool(r.get("flip")) for r in repairs),
            "n_flipped_strict": sum(bool(r.get("flip_strict")) for r in repairs),
            "flipped": [{"selector": r["selector"], "budget": r["budget"]} for r in repairs if r.get("flip")]}


def _run_meta(diagnosis: Diagnosis, run_manifest: dict | None) -> dict:
    info = diagnosis.info
    config = info.get("config", {})
    model = dict(info.get("model", {}))
    manifest = run_manifest or {}
    if manifest.get("model", {}).get("fingerprint") is not None:
        model["fingerprint"] = manifest["model"]["fingerprint"]
    versions = manifest.get("versions")
    args = manifest.get("args") or {}
    run = None
    if manifest:
        run = {"kind": manifest.get("kind"), "dataset": args.get("dataset"), "n": args.get("n"),
               "status": manifest.get("status"), "start": manifest.get("start"), "end": manifest.get("end")}
    return _clean({
        "model": model,
        "workbench_version": info.get("workbench_version"),
        "versions": versions or {"kv-repair-workbench": info.get("workbench_version")},
        "versions_source": "run manifest" if versions else "diagnosis",
        "seed": config.get("seed", args.get("seed")),
        "config": config,
        "git_revision": manifest.get("git_revision"),
        "run": run,
        "timing": info.get("timing", {}),
    })


def diagnosis_to_json(diagnosis: Diagnosis, run_manifest: dict | None = None) -> dict:
    """The report's data as a JSON-safe dict (schema in this module's docstring)."""
    info = diagnosis.info
    answers = _answers(diagnosis)
    token_signals = {}
    signals = _table(diagnosis, "token_signals")
    for name, rows in (signals.groupby("signal", sort=False) if not signals.empty else ()):
        rows = rows.sort_values("position")
        token_signals[str(name)] = {"positions": _clean(rows["position"].tolist()),
                                    "values": _clean(rows["value"].tolist())}
    layer = _table(diagnosis, "layer_signals")
    layer_signals = {str(name): _matrix(rows) for name, rows in layer.groupby("signal", sort=False)} \
        if not layer.empty else {}
    dev = _table(diagnosis, "deviation")
    deviation = {f"{kind}/{metric}": _matrix(rows) for (kind, metric), rows in
                 dev.groupby(["kind", "metric"], sort=True)} if not dev.empty else {}
    residual = []
    res = _table(diagnosis, "residual")
    if not res.empty:
        for (selector, layout, budget, kind), rows in res.groupby(["selector", "layout", "budget", "kind"],
                                                                   sort=False):
            rows = rows.sort_values("layer")
            residual.append(_clean({"selector": selector, "layout": layout, "budget": budget, "kind": kind,
                                    "layers": rows["layer"].tolist(), "values": rows["value"].tolist()}))
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "example": diagnosis.example.to_dict(),
        "run": _run_meta(diagnosis, run_manifest),
        "answers": answers,
        "flips": _flips(answers),
        "context": {"n_tokens": info.get("n_tokens"), "n_reused": info.get("n_reused"),
                    "layer0_error": info.get("layer0_error"), "segments": info.get("segments", []),
                    "tokens": _records(_table(diagnosis, "tokens"),
                                       ["position", "token", "segment", "passage", "reused"])},
        "token_signals": token_signals,
        "picks": _records(_table(diagnosis, "selections")),
        "layer_signals": layer_signals,
        "deviation": deviation,
        "residual": residual,
        "costs": _records(_table(diagnosis, "costs")),
        "attribution": {"summary": info.get("attribution_summary"),
                        "correlations": info.get("attribution_correlations", {}),
                        "sample": _records(_table(diagnosis, "attribution"))},
    }
    return _clean(doc)


def _dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- HTML


def _e(value) -> str:
    """Escaped display text; control characters shown as \\xNN."""
    text = "" if value is None else str(value)
    return html.escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{float(value):.{digits}g}"


def _plotlyjs() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


class _Figures:
    """Figure divs for one page; plotly.js itself goes once into <head>."""

    def __init__(self) -> None:
        self.count = 0

    def div(self, fig, caption: str = "") -> str:
        import plotly.io as pio

        self.count += 1
        div_id = f"fig-{self.count}"
        # plotly escapes '<', '>' and '/' already; do it here as well so that no string in the
        # figure can end the <script> whatever plotly's version does.
        payload = (pio.to_json(fig, validate=False).replace("<", "\\u003c").replace(">", "\\u003e")
                   .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
        height = fig.layout.height or 420
        cap = f'<p class="caption">{caption}</p>' if caption else ""
        return (f'<figure><div id="{div_id}" class="plotly-graph-div" style="height:{int(height)}px; '
                f'width:100%;"></div>{cap}<script type="text/javascript">(function() {{ var fig = {payload}; '
                f'Plotly.newPlot("{div_id}", fig.data, fig.layout, {{"responsive": true, "displaylogo": false}}); '
                f'}})();</script></figure>')


def _kv_table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _flip_cell(flip, strict) -> str:
    if flip is None:
        return "<td>–</td><td>–</td>"
    flip_html = '<td class="flip">flip</td>' if flip else '<td class="same">same</td>'
    strict_html = '<td class="flip">differs</td>' if strict else '<td class="same">same</td>'
    return flip_html + strict_html


def _answers_html(doc: dict) -> str:
    a = doc["answers"]
    head = ("<tr><th>answer of</th><th>budget</th><th>rows recomputed</th><th>answer</th>"
            "<th>flip vs dense</th><th>token ids vs dense</th><th>EM</th><th>F1</th>"
            "<th>log p(dense answer)</th></tr>")
    rows = []
    dense, spliced = a["dense"], a["spliced"]
    if dense:
        rows.append(f'<tr class="ref"><td>dense (reference)</td><td>–</td><td>all</td>'
                    f'<td class="answer">{_e(dense.get("text"))}</td><td>–</td><td>–</td>'
                    f'<td>{_num(dense.get("em"))}</td><td>{_num(dense.get("f1"))}</td><td>–</td></tr>')
    if spliced:
        rows.append(f'<tr class="ref"><td>spliced (no repair)</td><td>–</td><td>0</td>'
                    f'<td class="answer">{_e(spliced.get("text"))}</td>'
                    f'{_flip_cell(spliced.get("flip"), spliced.get("flip_strict"))}'
                    f'<td>{_num(spliced.get("em"))}</td><td>{_num(spliced.get("f1"))}</td><td>–</td></tr>')
    for r in a["repairs"]:
        rows.append(f'<tr><td>{_e(r.get("selector"))}</td><td>{_num(r.get("budget"))}</td>'
                    f'<td>{_num(r.get("n_recomputed"))}</td><td class="answer">{_e(r.get("answer"))}</td>'
                    f'{_flip_cell(r.get("flip"), r.get("flip_strict"))}<td>{_num(r.get("em"))}</td>'
                    f'<td>{_num(r.get("f1"))}</td><td>{_num(r.get("dense_logprob"), 4)}</td></tr>')
    f = doc["flips"]
    summary = (f'<p>Spliced answer: <b>{"flips" if f["spliced"] else "matches dense"}</b>. '
               f'Repairs that flip: <b>{f["n_flipped"]}</b> of {f["n_repairs"]} '
               f'({f["n_flipped_strict"]} differ in token ids).</p>')
    return summary + f'<table class="grid">{head}{"".join(rows)}</table>'


def _meta_html(doc: dict) -> str:
    run = doc["run"]
    model = run.get("model", {})
    rows = [("model", _e(model.get("name"))), ("source", _e(model.get("source"))),
            ("family", _e(model.get("family"))),
            ("shape", _e(f"{model.get('n_layers')} layers, {model.get('n_heads')} heads, "
                         f"{model.get('n_kv_heads')} kv heads, head dim {model.get('head_dim')}")),
            ("dtype / device", _e(f"{model.get('dtype')} / {model.get('device')}")),
            ("seed", _e(run.get("seed"))), ("workbench", _e(run.get("workbench_version")))]
    if model.get("fingerprint"):
        rows.append(("model fingerprint", _e(model["fingerprint"])))
    versions = ", ".join(f"{k} {v}" for k, v in (run.get("versions") or {}).items())
    rows.append((f"versions ({run.get('versions_source')})", _e(versions)))
    if run.get("git_revision"):
        rows.append(("git revision", _e(run["git_revision"])))
    if run.get("run"):
        r = run["run"]
        rows.append(("run", _e(f"{r.get('kind')} of {r.get('dataset')} (n={r.get('n')}), status {r.get('status')}, "
                               f"{r.get('start')} to {r.get('end')}")))
    config = run.get("config", {})
    rows.append(("selectors", _e(", ".join(map(str, config.get("selectors", []))))))
    rows.append(("budgets", _e(", ".join(_num(b) for b in config.get("budgets", [])))))
    others = {k: v for k, v in config.items() if k not in ("selectors", "budgets", "seed")}
    rows.append(("settings", _e(", ".join(f"{k}={v}" for k, v in others.items()))))
    timing = run.get("timing") or {}
    if timing:
        rows.append(("timing", _e(", ".join(f"{k} {_num(v)}" for k, v in timing.items()))))
    return _kv_table(rows)


def _example_html(doc: dict) -> str:
    ex = doc["example"]
    parts = []
    if ex.get("system"):
        parts.append(f'<p><b>System:</b> <span class="text">{_e(ex["system"])}</span></p>')
    for i, passage in enumerate(ex["passages"], 1):
        parts.append(f'<div class="passage"><span class="tag">passage {i}</span>'
                     f'<span class="text">{_e(passage)}</span></div>')
    parts.append(f'<p><b>Question:</b> <span class="text">{_e(ex["question"])}</span></p>')
    gold = " | ".join(ex.get("gold") or []) or "(none)"
    parts.append(f'<p><b>Gold:</b> <span class="text">{_e(gold)}</span></p>')
    ctx = doc["context"]
    err = ctx.get("layer0_error") or {}
    parts.append(f'<p class="note">{_num(ctx.get("n_tokens"))} tokens, {_num(ctx.get("n_reused"))} reused '
                 f'(spliced from isolated passage caches); layer-0 splice vs dense: max |dK| '
                 f'{_num(err.get("k"))}, max |dV| {_num(err.get("v"))}.</p>')
    return "".join(parts)


def _escaped_tokens(tokens: pd.DataFrame) -> pd.DataFrame:
    """The tokens table as the figure builders want it (they escape token text themselves)."""
    out = tokens.copy()
    out["segment"] = out["segment"].astype(str)
    out["token"] = out["token"].astype(str).map(lambda t: _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", t))
    return out


def _signal_figures(diagnosis: Diagnosis, tokens: pd.DataFrame, figs: _Figures) -> str:
    from workbench.plots import token_strip

    table = _table(diagnosis, "token_signals")
    if table.empty or tokens.empty:
        return '<p class="note">No token signals in this diagnosis.</p>'
    out = []
    for name, rows in table.groupby("signal", sort=False):
        values = rows.set_index("position")["value"]
        out.append(figs.div(token_strip(tokens, values, title=_e(name), reused_only=True)))
    return "".join(out)


def _picks_figures(diagnosis: Diagnosis, tokens: pd.DataFrame, figs: _Figures) -> str:
    from workbench.plots import picks_matrix

    sel = _table(diagnosis, "selections")
    if sel.empty or tokens.empty:
        return '<p class="note">No selections in this diagnosis.</p>'
    out = []
    for budget, rows in sel.groupby("budget", sort=True):
        picks = {_e(r["selector"]): [int(p) for p in r["positions"]] for _, r in rows.iterrows()
                 if r["selector"] not in _REFERENCE_SELECTORS}
        if not picks:
            continue
        out.append(figs.div(picks_matrix(tokens, picks, title=f"rows each selector recomputes at b = {budget:g}"),
                            caption="Red: the row is recomputed. The last line is the share of selectors that "
                                    "pick the token. Reuse-all (none) and full recompute are left out."))
    head = ("<tr><th>selector</th><th>layout</th><th>budget</th><th>rows requested</th>"
            "<th>rows recomputed</th><th>units</th><th>budget matched</th><th>skipped</th></tr>")
    body = "".join(
        f'<tr><td>{_e(r["selector"])}</td><td>{_e(r.get("layout"))}</td><td>{_num(r["budget"])}</td>'
        f'<td>{_num(r.get("n_requested"))}</td><td>{_num(r.get("n_recomputed"))}</td>'
        f'<td>{_num(r.get("n_units"))}</td>'
        f'<td>{_num(r.get("budget_matched"))}</td><td>{_num(r.get("skipped"))}</td></tr>'
        for r in sel.to_dict(orient="records"))
    return "".join(out) + f'<details><summary>selection table</summary><table class="grid">{head}{body}</table></details>'


def _layer_figures(diagnosis: Diagnosis, tokens: pd.DataFrame, figs: _Figures) -> str:
    from workbench.plots import layer_heatmap

    out = []
    layer = _table(diagnosis, "layer_signals")
    if not layer.empty:
        for name, rows in layer.groupby("signal", sort=False):
            log = str(name).startswith(_LOG_SIGNALS)
            out.append(figs.div(layer_heatmap(rows, tokens, title=_e(name) + (" (log10)" if log else ""), log=log)))
    else:
        out.append('<p class="note">No per-layer signals in this diagnosis.</p>')
    dev = _table(diagnosis, "deviation")
    if not dev.empty:
        for kind in ("k", "v"):
            rows = dev[(dev["kind"] == kind) & (dev["metric"] == "rel_l2")]
            if rows.empty:
                continue
            what = "keys (post-RoPE)" if kind == "k" else "values"
            out.append(figs.div(layer_heatmap(rows, tokens, title=f"splice vs dense: relative L2 of {what}"),
                                caption="Deviation of the spliced cache from the dense prefill, per layer and "
                                        "reused token, before any repair."))
    return "".join(out)


def _residual_figures(diagnosis: Diagnosis, figs: _Figures) -> str:
    from workbench.plots import residual_by_layer

    res = _table(diagnosis, "residual")
    if res.empty:
        return '<p class="note">No residual deviation in this diagnosis.</p>'
    res = res.copy()
    res["selector"] = res["selector"].astype(str).map(_e)
    out = []
    for budget in sorted(res["budget"].unique()):
        for kind in ("v", "k"):
            if (res["kind"] == kind).any():
                out.append(figs.div(residual_by_layer(res, float(budget), kind=kind)))
    return "".join(out)


def _costs_html(doc: dict) -> str:
    costs = doc["costs"]
    if not costs:
        return ""
    cols = list(costs[0])
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e(r[c]) if isinstance(r[c], str) else _num(r[c])}</td>" for c in cols)
                   + "</tr>" for r in costs)
    return f'<table class="grid"><tr>{head}</tr>{body}</table>'


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
table.grid td, table.grid th { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
table.kv th { text-align: left; padding: 2px 12px 2px 0; font-weight: 600; vertical-align: top; }
td.flip { background: #f8d7d3; color: #8b1a10; font-weight: 600; }
td.same { color: #2d6a2d; }
tr.ref td { background: #f6f8fa; }
.text, td.answer { white-space: pre-wrap; font-family: ui-monospace, monospace; }
.passage { margin: 0.4em 0; padding: 0.4em; background: #f6f8fa; border-left: 3px solid #9ab; }
.tag { font-size: 0.8em; color: #666; margin-right: 0.6em; }
.note, .caption { color: #555; font-size: 0.9em; }
figure { margin: 1em 0; }
"""


def _page(title: str, body: str, plotly: bool) -> str:
    script = ""
    if plotly:
        script = ("<script type=\"text/javascript\">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
                  f'<script type="text/javascript">{_plotlyjs()}</script>\n')
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{title}</title>\n<style>{_CSS}</style>\n{script}</head>\n<body>\n{body}\n</body>\n</html>\n")


def diagnosis_to_html(diagnosis: Diagnosis, run_manifest: dict | None = None) -> str:
    """One standalone HTML page (plotly.js embedded once, no network) for one Diagnosis."""
    doc = diagnosis_to_json(diagnosis, run_manifest)
    tokens = _table(diagnosis, "tokens")
    tokens = _escaped_tokens(tokens) if not tokens.empty else tokens
    figs = _Figures()
    attribution = doc["attribution"]["summary"]
    sections = [
        f'<h1>KV repair report: example <span class="text">{_e(diagnosis.example.id)}</span></h1>',
        "<h2>Example</h2>", _example_html(doc),
        "<h2>Answers</h2>", _answers_html(doc),
        "<h2>Token signals</h2>",
        '<p class="note">Each signal\'s score per reused token (hover for the value). Tokens are shown '
        'as the model reads them.</p>',
        _signal_figures(diagnosis, tokens, figs),
        "<h2>Selectors' picks at each budget</h2>", _picks_figures(diagnosis, tokens, figs),
        "<h2>Layer × token heatmaps</h2>", _layer_figures(diagnosis, tokens, figs),
        "<h2>Deviation left after repair</h2>", _residual_figures(diagnosis, figs),
        "<h2>Costs</h2>", _costs_html(doc),
        "<h2>Attribution check</h2>", f'<p class="text">{_e(attribution)}</p>',
        "<h2>Run</h2>", _meta_html(doc),
    ]
    return _page(f"kvwb report: {_e(diagnosis.example.id)}", "\n".join(sections), plotly=figs.count > 0)


# --------------------------------------------------------------------------- writing


def _check_out(out: str | Path, force: bool, folder: bool = False) -> Path:
    """An output path that may be written: the right suffix, not existing unless force, a writable parent."""
    out = Path(out)
    suffix = out.suffix.lower()
    if not folder and suffix not in SUFFIXES:
        raise WorkbenchError(f"{out}: the report format follows the suffix; use .html or .json, "
                             f"not {suffix or 'no suffix'!r}")
    if folder and suffix in SUFFIXES:
        raise WorkbenchError(f"--all writes a folder (index.html plus one report per example); "
                             f"--out {out} looks like a file name")
    if out.exists() and not force:
        raise WorkbenchError(f"{out} exists; pass --force (force=True) to replace it")
    if out.exists() and out.is_dir() != folder:
        raise WorkbenchError(f"{out} exists and is a {'folder' if out.is_dir() else 'file'}; "
                             f"choose another --out")
    parent = out.parent
    existing = next((p for p in (parent, *parent.parents) if p.exists()), Path.cwd())
    if not existing.is_dir():
        raise WorkbenchError(f"cannot write {out}: {existing} is not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbenchError(f"cannot create the folder {parent}: {err.strerror or err}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WorkbenchError(f"cannot write to {parent}: permission denied")
    return out


def _shareable(path: str | Path, folder: bool = False) -> None:
    """Give a temporary file (0600) or folder (0700) the usual permissions before it is renamed."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, (0o777 if folder else 0o666) & ~mask)


def _write_atomic(path: Path, text: str, force: bool) -> None:
    """Write `text` to a temporary file next to `path`, then rename it into place."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise WorkbenchError(f"cannot write to {path.parent}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        _shareable(tmp)
        if path.exists() and not force:
            raise WorkbenchError(f"{path} appeared while the report was written; pass --force to replace it")
        os.replace(tmp, path)
    except OSError as err:
        raise WorkbenchError(f"could not write {path}: {err.strerror or err}; nothing was left behind") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def render_report(diagnosis: Diagnosis, fmt: str, run_manifest: dict | None = None) -> str:
    """The report as text: fmt "html" or "json"."""
    if fmt == "html":
        return diagnosis_to_html(diagnosis, run_manifest)
    if fmt == "json":
        return _dumps(diagnosis_to_json(diagnosis, run_manifest))
    raise WorkbenchError(f"unknown report format {fmt!r}; use html or json")


def write_report(diagnosis: Diagnosis, out: str | Path, force: bool = False,
                 run_manifest: dict | None = None) -> Path:
    """Write the report as .html or .json (by suffix) atomically; refuse an existing path unless force."""
    out = _check_out(out, force)
    _write_atomic(out, render_report(diagnosis, out.suffix.lower()[1:], run_manifest), force)
    return out


# --------------------------------------------------------------------------- runs


def _run_examples(run: Path, manifest: dict) -> tuple[list[str], dict[str, dict]]:
    """Example ids with a saved diagnosis (run order) and the failures recorded in the manifest."""
    from workbench.experiments.sweep import example_folder

    failures = {str(f.get("example_id")): f for f in manifest.get("failures", []) or []}
    ids: list[str] = []
    table = run / "examples.parquet"
    if table.is_file():
        try:
            ids = [str(i) for i in pd.read_parquet(table, columns=["example_id"])["example_id"]]
        except Exception:  # noqa: BLE001 - fall back on the folder listing
            ids = []
    diagnoses = run / "diagnoses"
    if diagnoses.is_dir():
        for folder in sorted(diagnoses.iterdir()):
            if (folder / "diagnosis.json").is_file() and unquote(folder.name) not in ids:
                ids.append(unquote(folder.name))
    ids = [i for i in ids if (example_folder(run, i) / "diagnosis.json").is_file()]
    return ids, failures


def _no_signals(run: Path, manifest: dict) -> WorkbenchError:
    kind = manifest.get("kind")
    what = f"a {kind!r} run" if kind and kind != "sweep" else f"status {manifest.get('status')!r}"
    return WorkbenchError(f"{run} holds no per-example diagnoses (signals) to report ({what}); make them with "
                          f"`{RUN_COMMAND.format(run=run)}` (or `kvwb diagnose --example DATASET#ID --out "
                          f"FOLDER` for one example)")


def _ids_hint(ids: list[str], n: int = 5) -> str:
    shown = ", ".join(repr(i) for i in ids[:n])
    return f"{shown}{', ...' if len(ids) > n else ''} ({len(ids)} in all)"


def _file_stems(ids: list[str]) -> dict[str, str]:
    """A file name stem per example id: URL-quoted, unique even on case-insensitive file systems."""
    stems, taken = {}, {"index"}
    for example_id in ids:
        stem = quote(example_id, safe="") or "example"
        if stem.startswith("."):
            stem = "_" + stem
        base, n = stem, 1
        while stem.lower() in taken:
            n += 1
            stem = f"{base}-{n}"
        taken.add(stem.lower())
        stems[example_id] = stem
    return stems


def _index_html(run: Path, manifest: dict, rows: list[dict], failures: dict[str, dict]) -> str:
    args = manifest.get("args") or {}
    model = (manifest.get("model") or {}).get("name")
    head = ("<tr><th>example</th><th>question</th><th>gold</th><th>dense answer</th><th>spliced answer</th>"
            "<th>splice flips</th><th>repairs that flip</th><th>files</th></tr>")
    body = []
    for r in rows:
        href = html.escape(quote(r["stem"] + ".html"), quote=True)
        jhref = html.escape(quote(r["stem"] + ".json"), quote=True)
        flip = '<td class="flip">flip</td>' if r["spliced_flip"] else '<td class="same">same</td>'
        body.append(f'<tr><td><a href="{href}">{_e(r["id"])}</a></td><td>{_e(r["question"])}</td>'
                    f'<td>{_e(r["gold"])}</td><td class="answer">{_e(r["dense"])}</td>'
                    f'<td class="answer">{_e(r["spliced"])}</td>{flip}<td>{r["n_flipped"]} / {r["n_repairs"]}</td>'
                    f'<td><a href="{href}">html</a> · <a href="{jhref}">json</a></td></tr>')
    failed = ""
    if failures:
        items = "".join(f"<li><b>{_e(i)}</b>: {_e(f.get('error'))}</li>" for i, f in failures.items())
        failed = f"<h2>Examples that failed in the run</h2><ul>{items}</ul>"
    meta = _kv_table([("run", _e(run.name)), ("model", _e(model)), ("dataset", _e(args.get("dataset"))),
                      ("selectors", _e(", ".join(map(str, args.get("selectors") or [])))),
                      ("budgets", _e(", ".join(map(str, args.get("budgets") or [])))),
                      ("seed", _e(args.get("seed"))), ("status", _e(manifest.get("status"))),
                      ("versions", _e(", ".join(f"{k} {v}" for k, v in (manifest.get("versions") or {}).items()))),
                      ("git revision", _e(manifest.get("git_revision")))])
    body_html = (f"<h1>KV repair reports: {_e(run.name)}</h1>{meta}<h2>Examples ({len(rows)})</h2>"
                 f'<table class="grid">{head}{"".join(body)}</table>{failed}')
    return _page(f"kvwb reports: {_e(run.name)}", body_html, plotly=False)


def report_run(run_folder: str | Path, example_id: str | None = None, all: bool = False,  # noqa: A002
               out: str | Path | None = None, force: bool = False) -> Path:
    """Reports from a `kvwb run` folder (or one `kvwb diagnose --out` folder).

    One example (`example_id`) -> one .html or .json file at `out`; `all=True` -> the folder `out`
    with index.html and, per example, ID.html and ID.json (IDs URL-quoted). Nothing is written
    unless every report renders: the folder is built under a temporary name and renamed.
    """
    from workbench.experiments.runstore import read_manifest
    from workbench.experiments.sweep import example_folder

    if out is None:
        raise WorkbenchError("give --out: FILE.html or FILE.json for one example, a folder with --all")
    if all and example_id is not None:
        raise WorkbenchError("give either --example ID or --all, not both")
    run = Path(run_folder)
    if not run.is_dir():
        raise WorkbenchError(f"{run} is not a folder; give a run folder written by `kvwb run ... --out RUN`")

    if (run / "diagnosis.json").is_file() and not (run / "manifest.json").is_file():  # one `kvwb diagnose` folder
        diagnosis = Diagnosis.load(run)
        if example_id is not None and example_id != diagnosis.example_id:
            raise WorkbenchError(f"{run} holds example {diagnosis.example_id!r}, not {example_id!r}")
        if all:
            raise WorkbenchError(f"{run} holds one diagnosis; --all needs a run folder (`kvwb run ... --out RUN`)")
        return write_report(diagnosis, out, force=force)

    manifest = read_manifest(run)
    ids, failures = _run_examples(run, manifest)
    if not ids:
        raise _no_signals(run, manifest)
    if not all:
        if example_id is None:
            raise WorkbenchError(f"give --example ID (one of {_ids_hint(ids)}) or --all")
        if example_id not in ids:
            if example_id in failures:
                raise WorkbenchError(f"example {example_id!r} failed in this run "
                                     f"({failures[example_id].get('error')}); it has no diagnosis to report")
            raise WorkbenchError(f"example {example_id!r} is not in {run}; examples there: {_ids_hint(ids)}")
        target = _check_out(out, force)
        diagnosis = Diagnosis.load(example_folder(run, example_id))
        return write_report(diagnosis, target, force=force, run_manifest=manifest)

    target = _check_out(out, force, folder=True)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as err:
        raise WorkbenchError(f"cannot write to {target.parent}: {err.strerror or err}") from None
    try:
        stems, rows = _file_stems(ids), []
        for example_id in ids:
            diagnosis = Diagnosis.load(example_folder(run, example_id))
            doc = diagnosis_to_json(diagnosis, manifest)
            (tmp / f"{stems[example_id]}.json").write_text(_dumps(doc), encoding="utf-8")
            (tmp / f"{stems[example_id]}.html").write_text(diagnosis_to_html(diagnosis, manifest), encoding="utf-8")
            ex, answers = doc["example"], doc["answers"]
            rows.append({"id": example_id, "stem": stems[example_id], "question": ex["question"],
                         "gold": " | ".join(ex["gold"]) or "(none)", "dense": answers["dense"].get("text"),
                         "spliced": answers["spliced"].get("text"), "spliced_flip": doc["flips"]["spliced"],
                         "n_flipped": doc["flips"]["n_flipped"], "n_repairs": doc["flips"]["n_repairs"]})
        (tmp / "index.html").write_text(_index_html(run, manifest, rows, failures), encoding="utf-8")
        _shareable(tmp, folder=True)
        if target.exists():
            if not force:
                raise WorkbenchError(f"{target} appeared while the reports were written; pass --force")
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}-old-", dir=target.parent))
            os.rename(target, old / target.name)
            os.rename(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    except OSError as err:
        raise WorkbenchError(f"could not write {target}: {err.strerror or err}; nothing was left behind") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- CLI


def add_report_arguments(parser) -> None:
    """Arguments of `kvwb report` (the integrator registers the subcommand with report_main)."""
    parser.add_argument("run", help="a run folder written by `kvwb run --out RUN` "
                                    "(or one folder written by `kvwb diagnose --out`)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--example", default=None, metavar="ID", help="the example to report")
    which.add_argument("--all", action="store_true", help="one report per example plus index.html into --out DIR")
    parser.add_argument("--out", required=True,
                        help="FILE.html (standalone, opens offline) or FILE.json; a folder with --all")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists")


def report_main(args) -> int:
    """Write a per-example report (HTML or JSON) or, with --all, one per example and an index."""
    out = report_run(args.run, example_id=args.example, all=args.all, out=args.out, force=args.force)
    print(f"wrote {out / 'index.html' if args.all else out}")
    return 0
