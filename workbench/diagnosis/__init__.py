"""One example diagnosed: the config in, the typed record out.

    from workbench.diagnosis import DiagnoseConfig, diagnose
    d = diagnose(model, example, DiagnoseConfig(selectors=("cadence-grad", "bcr:grow"), budgets=(0.2,)))
    d.summary(); d.show(); d.save("runs/one")
"""

from workbench.diagnosis.config import DEFAULT_BUDGETS, DiagnoseConfig, check_budgets
from workbench.diagnosis.record import (
    AnswerRecord, Answers, AttributionSummary, ContextSummary, Diagnosis, Timing, register_renderer,
)
from workbench.diagnosis.run import diagnose

__all__ = [
    "DEFAULT_BUDGETS", "AnswerRecord", "Answers", "AttributionSummary", "ContextSummary", "DiagnoseConfig",
    "Diagnosis", "Timing", "check_budgets", "diagnose", "register_renderer",
]
