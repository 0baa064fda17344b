"""Data layer: examples, data sets (synthetic and files), loaders and answer metrics."""

from workbench.tasks.example import Example
from workbench.tasks.metrics import best_em_f1, contains_answer, exact_match, f1_score, is_flip, normalize_answer
from workbench.tasks.spec import DATASET_KINDS, dataset_fingerprint, load_dataset, load_example, parse_dataset_spec
from workbench.tasks.synthetic import synthetic_examples

__all__ = [
    "DATASET_KINDS",
    "Example",
    "best_em_f1",
    "contains_answer",
    "dataset_fingerprint",
    "exact_match",
    "f1_score",
    "is_flip",
    "load_dataset",
    "load_example",
    "normalize_answer",
    "parse_dataset_spec",
    "synthetic_examples",
]
