"""Reports of results: per-example pages and JSON documents, a run's folder of them, and the
markdown tables the CLI prints.

    kvwb report runs/NAME --example ID --out FILE.html     (or FILE.json)
    kvwb report runs/NAME --all --out DIR                  DIR/index.html + one .html and .json per example
    kvwb report DIAGNOSIS_FOLDER --out FILE.html           a folder written by `kvwb diagnose --out`

From Python: `diagnosis_to_html(d)`, `diagnosis_to_json(d)`, `write_report(d, path)`,
`report_run(folder, ...)`. The HTML opens offline (plotly.js embedded once, no network),
every string from the user or the model is HTML-escaped, and every figure is drawn by the
builders of `workbench.plots.diagnosis`. The JSON schema (version 2) is described field by
field in docs/REPORT_SCHEMA.md.
"""

from workbench.report.html import diagnosis_to_html
from workbench.report.markdown import (
    contrasts_markdown,
    curve_summary_markdown,
    markdown_table,
    sweep_summary_markdown,
)
from workbench.report.runs import render_report, report_run, write_report
from workbench.report.schema import SCHEMA_VERSION, diagnosis_to_json

__all__ = [
    "SCHEMA_VERSION", "contrasts_markdown", "curve_summary_markdown", "diagnosis_to_html", "diagnosis_to_json", "markdown_table",
    "render_report", "report_run", "sweep_summary_markdown", "write_report",
]
