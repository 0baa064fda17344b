"""Marks that figures share: reference lines named in the legend (never a text annotation on
the plotting area, where it lands on data or tick labels), and dodged positions.

    reference_line(fig, 0.25, "floor (fact masked) 0.250", "#9e9e9e")
    offsets = dodge(["random", "bcr"], spread=0.6)      # {"random": -0.3, "bcr": 0.3}
"""

from __future__ import annotations

import plotly.graph_objects as go


def reference_line(fig: go.Figure, y: float, name: str, color: str, dash: str = "dash", row=None, col=None) -> None:
    """A horizontal line across the plot, over the grid and the data (under the grid the zero line
    hid a line at 0; plotly.js draws no "between" line across an axis's domain), named in the legend
    (its value in hover)."""
    fig.add_hline(y=y, line={"dash": dash, "color": color, "width": 1.5}, layer="above", name=name,
                  showlegend=True, row=row, col=col)


def dodge(labels, spread: float) -> dict[str, float]:
    """An x offset per label, evenly spaced over `spread` and centred on 0, in the order given:
    points of different selectors at the same x no longer hide each other."""
    labels = list(dict.fromkeys(labels))
    if len(labels) < 2:
        return {label: 0.0 for label in labels}
    step = spread / (len(labels) - 1)
    return {label: (i - (len(labels) - 1) / 2) * step for i, label in enumerate(labels)}
