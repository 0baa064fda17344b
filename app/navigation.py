"""The pages of the app: file (relative to app/), title, icon and URL path. Home.py registers
them with `st.navigation`; pages link to each other through `PAGES[name].path`."""

from __future__ import annotations

from typing import NamedTuple


class Page(NamedTuple):
    path: str
    title: str
    icon: str
    url: str


PAGES = {
    "runs": Page("views/runs.py", "Runs", ":material/folder_open:", "runs"),
    "explorer": Page("views/explorer.py", "Example explorer", ":material/token:", "explorer"),
    "curves": Page("views/curves.py", "Budget curves", ":material/show_chart:", "budget-curves"),
    "flips": Page("views/flips.py", "Decision flips", ":material/swap_horiz:", "flips"),
    "unit": Page("views/unit_curve.py", "Unit of choice", ":material/grid_view:", "unit-of-choice"),
    "fidelity": Page("views/fidelity.py", "Fidelity vs consumability", ":material/compare:", "fidelity"),
    "pipeline": Page("views/pipeline.py", "Multi-agent reuse", ":material/hub:", "multi-agent"),
    "live": Page("views/live.py", "Live", ":material/bolt:", "live"),
}
