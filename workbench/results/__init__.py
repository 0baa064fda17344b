"""RESULTS' tables and figures regenerated from the committed records (`kvwb results`).

`registry` maps a NAME to the function that builds it from the records (`records.Records`, each
record restored once); `studies`, `retrieval`, `study_10_12`, `study_10_12w`, `study_10_14` and `provenance`
register RESULTS' tables; `check` compares the tables a document marks
(`<!-- kvwb-results: NAME -->`, `markdown`) cell by cell at the precision printed (`cells`) and
writes every table and figure to a folder.
"""

from workbench.results import (  # noqa: F401  (they register the tables)
    provenance, retrieval, studies, study_10_12, study_10_12w, study_10_14,
)
from workbench.results.check import CheckReport, check_document, write_all
from workbench.results.records import Records
from workbench.results.registry import FIGURES, TABLES, register_figure, register_table

__all__ = ["CheckReport", "FIGURES", "Records", "TABLES", "check_document", "register_figure", "register_table",
           "write_all"]
