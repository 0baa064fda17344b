"""The index page of a folder of reports (`kvwb report RUN --all`): one row per example."""

from __future__ import annotations

import html
from pathlib import Path
from urllib.parse import quote

from workbench.report.page import answer_cell, e, kv_table, page
from workbench.runstore import Manifest


def _href(name: str) -> str:
    """A link to a file of the folder: URL-quoted (names hold '%'), then escaped for the attribute."""
    return html.escape(quote(name), quote=True)


def index_html(run: Path, manifest: Manifest, rows: list[dict], failures: dict[str, dict]) -> str:
    """The index: the run's facts, then per example its question, answers, flips and files.

    rows: {id, stem, question, gold, dense, spliced, spliced_flip, n_flipped, n_repairs[, dense_tokens,
    spliced_tokens]}: an answer of no token says it ended at once."""
    head = ("<tr><th>example</th><th>question</th><th>gold</th><th>dense answer</th><th>spliced answer</th>"
            "<th>splice flips</th><th>repairs that flip</th><th>files</th></tr>")
    body = []
    for r in rows:
        page_link, json_link = _href(r["stem"] + ".html"), _href(r["stem"] + ".json")
        flip = '<td class="flip">flip</td>' if r["spliced_flip"] else '<td class="same">same</td>'
        body.append(f'<tr><td class="text"><a href="{page_link}">{e(r["id"])}</a></td><td>{e(r["question"])}</td>'
                    f'<td>{e(r["gold"])}</td>{answer_cell(r["dense"], r.get("dense_tokens"))}'
                    f'{answer_cell(r["spliced"], r.get("spliced_tokens"))}{flip}<td>{r["n_flipped"]} / {r["n_repairs"]}</td>'
                    f'<td><a href="{page_link}">html</a> · <a href="{json_link}">json</a></td></tr>')
    failed = ""
    if failures:
        items = "".join(f"<li><b>{e(i)}</b>: {e(f.get('error'))}</li>" for i, f in failures.items())
        failed = f"<h2>Examples that failed in the run</h2><ul>{items}</ul>"
    meta = kv_table([("run", e(run.name)), ("model", e(manifest.model_name)), ("dataset", e(manifest.dataset)),
                     ("selectors", e(", ".join(manifest.selectors))),
                     ("budgets", e(", ".join(map(str, manifest.budgets)))),
                     ("seed", e(manifest.seed)), ("status", e(manifest.status)),
                     ("versions", e(", ".join(f"{k} {v}" for k, v in (manifest.versions or {}).items()))),
                     ("git revision", e(manifest.git_revision))])
    body_html = (f"<h1>KV repair reports: {e(run.name)}</h1>{meta}<h2>Examples ({len(rows)})</h2>"
                 f'<table class="grid">{head}{"".join(body)}</table>{failed}')
    return page(f"kvwb reports: {e(run.name)}", body_html, plotly=False)
