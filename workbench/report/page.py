"""The HTML page of a report: escaping, number formatting, small tables, the style sheet.

Every string from the user or the model goes through `e` (HTML-escaped, quotes included,
control characters shown as \\xNN); plotly.js is embedded once in <head> when the page has
figures (`workbench.plots.embed`), so a report opens offline.
"""

from __future__ import annotations

import html
import math

import numpy as np

from workbench.experiments.blank_answers import ENDED_AT_ONCE, no_token
from workbench.plots.embed import plotly_script
from workbench.plots.text import visible

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9em; margin: 0.5em 0; }
table.grid td, table.grid th { border: 1px solid #ddd; padding: 3px 6px; text-align: left; vertical-align: top; }
table.kv th { text-align: left; padding: 2px 12px 2px 0; font-weight: 600; vertical-align: top; }
td.flip { background: #f8d7d3; color: #8b1a10; font-weight: 600; }
td.same { color: #2d6a2d; }
tr.ref td { background: #f6f8fa; }
.text, td.answer { white-space: pre-wrap; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
.passage { margin: 0.4em 0; padding: 0.4em; background: #f6f8fa; border-left: 3px solid #9ab; }
.tag { font-size: 0.8em; color: #666; margin-right: 0.6em; }
.note, .caption { color: #555; font-size: 0.9em; }
figure { margin: 1em 0; }
"""


def e(value) -> str:
    """Escaped display text (quotes too); control characters shown as \\xNN; None as empty."""
    return html.escape(visible(value))


def num(value, digits: int = 3) -> str:
    """A number for a table cell: '–' when missing, yes/no for booleans."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{float(value):.{digits}g}"


def kv_table(rows: list[tuple[str, str]]) -> str:
    """A two-column table; keys are escaped here, values are HTML already."""
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def answer_cell(text, n_tokens, note: str = "") -> str:
    """An answer's cell: its text, or, for an answer of no token (`n_tokens` 0: an end of turn first),
    a note that it ended at once, so that the empty cell does not read as a value missing; `note`
    (plain text: what the answer recites) in italics under the text."""
    if no_token(n_tokens):
        return f'<td class="answer"><i>{ENDED_AT_ONCE}</i></td>'
    return f'<td class="answer">{e(text)}' + (f'<br><i>{e(note)}</i>' if note else "") + "</td>"


def flip_cells(flip, strict) -> str:
    """Two cells: the answer's flip against dense and whether its token ids differ."""
    if flip is None:
        return "<td>–</td><td>–</td>"
    flip_html = '<td class="flip">flip</td>' if flip else '<td class="same">same</td>'
    strict_html = '<td class="flip">differs</td>' if strict else '<td class="same">same</td>'
    return flip_html + strict_html


def page(title: str, body: str, plotly: bool) -> str:
    """A standalone page; `title` and `body` are HTML already, `plotly` embeds plotly.js."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{title}</title>\n<style>{CSS}</style>\n{plotly_script() if plotly else ''}</head>\n"
            f"<body>\n{body}\n</body>\n</html>\n")
