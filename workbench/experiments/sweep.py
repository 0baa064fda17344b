"""`run_sweep`: diagnose every example of a data set into a resumable run folder.

The per-example step is `diagnose(model, example, config.diagnose)`, a plain function whose
result the run store saves atomically before the next example begins (layout in
`workbench.runstore.writers`). Killing a run and starting the same command again goes on where
it stopped; on a finished run it recomputes nothing. An example that raises is recorded in
the manifest and the run goes on. The run's identity (model weights, dtype, device, data set
and its file's hash, every diagnose setting) must match to resume; a resume on other code or
packages is warned about and its examples recorded under a new segment of the manifest, each
example keeping the environment (this process's) that computed it (`runstore.segments`).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm.auto import tqdm

from workbench.diagnosis import DiagnoseConfig, diagnose
from workbench.diagnosis.record import hook_record
from workbench.errors import WorkbenchError
from workbench.models import LoadedModel, model_identity
from workbench.runstore import SweepStore, check_out, run_lock
from workbench.selectors import default_selectors, selector_code, signal_code
from workbench.tasks import data_identity, load_dataset

SWEEP_DIAGNOSE = DiagnoseConfig(selectors=default_selectors(), attribution=False)


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: the data set, how many examples, and the DiagnoseConfig run on each."""

    dataset: str = "synthetic"
    n: int = 40
    diagnose: DiagnoseConfig = SWEEP_DIAGNOSE
    dataset_options: dict = field(default_factory=dict)  # the loader's options (target_words, max_passages, ...)

    def checked(self) -> SweepConfig:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise WorkbenchError(f"n must be an integer >= 1, got {self.n!r}")
        if not isinstance(self.dataset_options, dict):
            raise WorkbenchError(f"dataset_options must be a dict, got {type(self.dataset_options).__name__}")
        return replace(self, diagnose=self.diagnose.checked())

    def load_examples(self, model: LoadedModel) -> list:
        """The examples this sweep diagnoses, laid out for `model` (its tokenizer and context)."""
        return load_dataset(self.dataset, n=self.n, tokenizer=model.tokenizer, max_positions=model.max_positions,
                            **self.dataset_options)  # raises if n exceeds a file

    def identity(self) -> dict:
        """Everything about the data and the computation a resumed run must share."""
        return {**data_identity(self.dataset, self.dataset_options), "n": self.n, "diagnose": self.diagnose.to_dict(),
                "selector_code": selector_code(self.diagnose.selectors),  # a plugin's selector is not a built-in's
                "signal_code": signal_code(self.diagnose.selectors)}


def run_sweep(model: LoadedModel, config: SweepConfig, out: str | Path, progress: bool = True,
              hooks=None, preregistration: str | Path | None = None) -> SweepStore:
    """Diagnose every example of `config.dataset` into `out`, resuming a compatible run there.

    `hooks` (as `diagnose` takes them) run on every example; the manifest's args record them
    ("hooks": each point's functions by qualified name), so a hooked run and an unhooked one never
    resume each other. Returns the store (its manifest says how the run ended). Raises if every
    example failed, with the first example's error. `preregistration` (a file as
    `experiments.families` reads it) is copied beside the manifest before the first example.
    """
    config = config.checked()
    examples = config.load_examples(model)
    out = check_out(out, kind="sweep", resume=True)
    order = [e.id for e in examples]
    hooked = hook_record(hooks)
    identity = {**config.identity(), **({"hooks": hooked} if hooked else {})}
    with run_lock(out):
        store = SweepStore.open(out, model_identity(model), identity)
        place_preregistration_of(config, out, store, preregistration)
        bar = tqdm(examples, desc="examples", unit="example", disable=not progress,
                   initial=0, total=len(examples))
        try:
            for example in bar:
                if store.done(example.id):
                    continue
                bar.set_postfix_str(f"example {example.id}")
                try:
                    diagnosis = diagnose(model, example, config.diagnose, progress=False, hooks=hooks)
                except Exception as err:  # noqa: BLE001 - one bad example must not end the run
                    store.fail(example.id, f"{type(err).__name__}: {err}", traceback.format_exc(limit=3))
                    continue
                store.save(diagnosis, order)
        except BaseException as err:  # Ctrl-C, SIGTERM or a store that cannot be written: the manifest says so
            store.interrupted(order, err)
            raise
        store.finish("complete", order)
    check_some_done(store, len(examples))
    return store


def place_preregistration_of(config: SweepConfig, out: Path, store: SweepStore, preregistration) -> None:
    """Copy `preregistration` (None: nothing) beside the run's manifest, checked against its selectors,
    budgets and the examples it already holds (`families.place_preregistration`)."""
    if preregistration is not None:
        from workbench.experiments.families import place_preregistration

        place_preregistration(preregistration, out, store.n_done, config.diagnose.selectors, config.diagnose.budgets)


def check_some_done(store: SweepStore, n_examples: int) -> None:
    """Raise with the first real cause when every example of a run failed (any executor)."""
    if store.n_done == 0 and store.failures:
        first = next(iter(store.failures.values()))
        raise WorkbenchError(f"every example failed ({len(store.failures)} of {n_examples}); the first, "
                             f"{first['example_id']!r}: {first['error']}")
