"""Data layer: examples, data sets (synthetic and files), loaders and answer metrics."""

from workbench.tasks.example import Example
from workbench.tasks.metrics import (
    all_present, best_em_f1, contains_answer, exact_match, f1_score, is_flip, normalize_answer, score_answer,
)
from workbench.tasks.spec import (
    DatasetKind, check_dataset, check_example_spec, data_identity, dataset_fingerprint, dataset_kind, dataset_kinds, dataset_specs_help,
    load_dataset, load_example, parse_dataset_spec, register_dataset,
)
from workbench.tasks.synthetic import synthetic_examples

__all__ = [
    "DatasetKind",
    "Example",
    "all_present",
    "best_em_f1",
    "check_dataset",
    "check_example_spec",
    "contains_answer",
    "data_identity",
    "dataset_fingerprint",
    "dataset_kind",
    "dataset_kinds",
    "dataset_specs_help",
    "exact_match",
    "f1_score",
    "is_flip",
    "load_dataset",
    "load_example",
    "normalize_answer",
    "parse_dataset_spec",
    "register_dataset",
    "score_answer",
    "synthetic_examples",
]
