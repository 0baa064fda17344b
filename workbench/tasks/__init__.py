"""Data layer: examples, data sets (synthetic and files), loaders and answer metrics."""

from workbench.tasks.example import Example
from workbench.tasks.metrics import (
    all_present, best_em_f1, contains_answer, exact_match, f1_score, is_flip, normalize_answer, score_answer,
)
from workbench.tasks.spec import (
    DATASET_KINDS, check_dataset, dataset_fingerprint, load_dataset, load_example, parse_dataset_spec,
)
from workbench.tasks.synthetic import synthetic_examples

__all__ = [
    "DATASET_KINDS",
    "Example",
    "all_present",
    "best_em_f1",
    "check_dataset",
    "contains_answer",
    "dataset_fingerprint",
    "exact_match",
    "f1_score",
    "is_flip",
    "load_dataset",
    "load_example",
    "normalize_answer",
    "parse_dataset_spec",
    "score_answer",
    "synthetic_examples",
]
