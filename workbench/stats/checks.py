"""Input checks shared by the tests and intervals, and the scipy keyword names of this release."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from scipy import stats as _st

from workbench.errors import WorkbenchError

# Bootstrap memory guard: at most this many resampled values are held at once.
BOOTSTRAP_BATCH_ELEMENTS = 2_000_000
# scipy >= 1.15 takes ``rng``; older releases (pyproject allows >= 1.12) take ``random_state``.
BOOTSTRAP_RNG_KW = "rng" if "rng" in inspect.signature(_st.bootstrap).parameters else "random_state"
PERMUTATION_RNG_KW = "rng" if "rng" in inspect.signature(_st.permutation_test).parameters else "random_state"


# --------------------------------------------------------------------------- validation


def to_1d(x: Any, name: str) -> np.ndarray:
    """Turn a list / numpy array / pandas Series into a non-empty 1-D numpy array."""
    if hasattr(x, "to_numpy"):  # pandas Series / Index / ExtensionArray
        x = x.to_numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise WorkbenchError(f"{name}: could not read as a 1-D array ({exc})") from exc
    if arr.ndim != 1:
        raise WorkbenchError(f"{name}: expected a 1-D sequence, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise WorkbenchError(f"{name}: is empty; need at least one paired example")
    return arr


def as_bool(x: Any, name: str) -> np.ndarray:
    """Validate per-example correct/incorrect outcomes: bools or the integers 0/1 only."""
    arr = to_1d(x, name)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iu":
        bad = ~np.isin(arr, (0, 1))
    elif arr.dtype == object:
        bad = np.array(
            [
                not (isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)))
                for v in arr
            ]
        )
    else:
        raise WorkbenchError(
            f"{name}: expected booleans or 0/1 integers, got dtype {arr.dtype}; "
            "threshold float scores into correct/incorrect first"
        )
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise WorkbenchError(
            f"{name}: expected booleans or 0/1 integers, got {arr[i]!r} at position {i}"
        )
    return arr.astype(bool)


def as_float(x: Any, name: str) -> np.ndarray:
    """Validate per-example scores: real, finite numbers."""
    arr = to_1d(x, name)
    if arr.dtype.kind not in "biuf" and arr.dtype != object:
        raise WorkbenchError(f"{name}: expected real numbers, got dtype {arr.dtype}")
    try:
        arr = arr.astype(float)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"{name}: expected real numbers ({exc})") from exc
    if not np.isfinite(arr).all():
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise WorkbenchError(
            f"{name}: non-finite value {arr[i]} at position {i}; drop incomplete pairs first"
        )
    return arr


def same_length(a: np.ndarray, b: np.ndarray, na: str, nb: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise WorkbenchError(
            f"{na} and {nb} must be paired per example, but have lengths {a.shape[0]} and {b.shape[0]}"
        )


def check_confidence(confidence: float) -> float:
    try:
        c = float(confidence)
    except (TypeError, ValueError) as exc:
        raise WorkbenchError(f"confidence must be a number in (0, 1), got {confidence!r}") from exc
    if not 0.0 < c < 1.0:  # also rejects nan
        raise WorkbenchError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return c


def check_count(v: Any, name: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise WorkbenchError(f"{name} must be a non-negative integer count, got {v!r}")
    if v < 0:
        raise WorkbenchError(f"{name} must be a non-negative integer count, got {v}")
    return int(v)
