"""Figures in HTML that opens offline: plotly.js once, each figure as a div and its data.

Figure JSON goes inside a <script>, so every '<' and '>' (and the JavaScript line breaks
U+2028/U+2029) is written as a \\u escape: no string in a figure can close the script.

    html = plotly_script() + figure_div(fig, "fig-1") + figure_div(other, "fig-2")
"""

from __future__ import annotations

import plotly.io as pio
from plotly.offline import get_plotlyjs

CONFIG = '{"responsive": true, "displaylogo": false}'


def figure_json(fig) -> str:
    """The figure as JSON that is safe inside a <script> element."""
    return (pio.to_json(fig, validate=False).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def plotly_script() -> str:
    """plotly.js itself, embedded (no CDN, no network), once per page."""
    return ("<script type=\"text/javascript\">window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n"
            f'<script type="text/javascript">{get_plotlyjs()}</script>\n')


def figure_div(fig, div_id: str, caption: str = "") -> str:
    """A <figure> that draws `fig` with the page's plotly.js; `caption` is HTML (escape it first)."""
    height = int(fig.layout.height or 420)
    cap = f'<p class="caption">{caption}</p>' if caption else ""
    return (f'<figure><div id="{div_id}" class="plotly-graph-div" style="height:{height}px; width:100%;"></div>'
            f'{cap}<script type="text/javascript">(function() {{ var fig = {figure_json(fig)}; '
            f'Plotly.newPlot("{div_id}", fig.data, fig.layout, {CONFIG}); }})();</script></figure>')
