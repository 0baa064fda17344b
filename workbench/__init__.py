"""KV Repair Workbench: splice isolated KV caches, compare with the dense prefill, repair rows.

The public API is deliberately short:

    import workbench as wb
    model = wb.load_model("smollm2-135m")
    example = wb.load_example("synthetic#3")
    ctx = wb.build_context(model, example)
    fixed = ctx.repair(ctx.reused_positions[:40])
    ctx.answer(ctx.dense), ctx.answer(ctx.spliced), ctx.answer(fixed)
    d = wb.diagnose(model, example, selectors=("cacheblend", "cadence-grad"), budgets=(0.2,))
"""

from workbench import threads  # noqa: F401  (first: OpenMP settings must precede `import torch`)
from workbench.context import Context, build_context
from workbench.diagnosis import DiagnoseConfig, Diagnosis, diagnose
from workbench.errors import WorkbenchError
from workbench.kv import KVCache
from workbench.layout import Layout, PromptFormat
from workbench.models import LoadedModel, load_model, wrap_model
from workbench.tasks import Example, load_dataset, load_example
from workbench.version import __version__
threads.apply_thread_count()
from workbench import plots  # noqa: E402,F401  (registers how a Diagnosis draws itself in Jupyter)

__all__ = [
    "Context", "DiagnoseConfig", "Diagnosis", "Example", "KVCache", "Layout", "LoadedModel", "PromptFormat",
    "WorkbenchError", "build_context", "diagnose", "load_dataset", "load_example", "load_model", "wrap_model", "__version__",
]
