"""Checks of the probe's inputs: features, labels, groups, names and the search grid.

Each raises a ``ValueError`` that names the argument and the first offending entry.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

__all__ = ["check_data", "check_grid", "check_matrix", "check_names"]


def check_matrix(X: Any) -> np.ndarray:
    """``X`` as a finite 2-D float64 array; names the first non-finite entry."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        hint = " (one sample: X.reshape(1, -1))" if X.ndim == 1 else ""
        raise ValueError(f"X must be 2-D [n_samples, n_features], got shape {X.shape}{hint}")
    bad = ~np.isfinite(X)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"X has a non-finite value ({X[row, col]}) at row {row}, column {col}")
    return X


def check_data(X: Any, y: Any, groups: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``X [n, f]`` float64, ``y [n]`` bool and integer group ids ``[n]``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [n_samples, n_features], got shape {X.shape}")
    y_arr = np.asarray(y)
    if y_arr.ndim != 1:
        raise ValueError(f"y must be 1-D [n_samples], got shape {y_arr.shape}")
    groups_list = list(groups)
    n = X.shape[0]
    if y_arr.shape[0] != n or len(groups_list) != n:
        raise ValueError(
            f"X, y and groups must have the same length, got {n}, {y_arr.shape[0]} and "
            f"{len(groups_list)}"
        )
    if n == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty (shape {X.shape})")
    X = check_matrix(X)
    if y_arr.dtype != np.bool_:
        if not (np.issubdtype(y_arr.dtype, np.number) and np.isin(y_arr, (0, 1)).all()):
            raise ValueError(f"y must be bool (True = hallucinated) or 0/1, got {y_arr.dtype}")
        y_arr = y_arr.astype(bool)
    n_pos = int(y_arr.sum())
    if n_pos == 0 or n_pos == n:
        raise ValueError(
            f"y holds a single class ({'all True' if n_pos else 'all False'}); "
            "a probe needs hallucinated and supported samples"
        )
    ids: dict[Hashable, int] = {}
    group_ids = np.empty(n, dtype=np.int64)
    for i, g in enumerate(groups_list):
        try:
            group_ids[i] = ids.setdefault(g, len(ids))
        except TypeError as e:
            raise ValueError(f"groups[{i}] is not hashable ({type(g).__name__})") from e
    return X, y_arr, group_ids


def check_names(feature_names: Any, n_features: int) -> list[str]:
    """``feature_names`` as ``n_features`` unique strings."""
    if isinstance(feature_names, str):
        raise ValueError("feature_names must be a sequence of names, got one string")
    names = [str(n) for n in feature_names]
    if len(names) != n_features:
        raise ValueError(f"feature_names has {len(names)} names, X has {n_features} columns")
    if len(set(names)) != len(names):
        dup = next(n for n, count in Counter(names).items() if count > 1)
        raise ValueError(f"feature_names must be unique, {dup!r} repeats")
    return names


def check_grid(
    max_features: Sequence[int | None], Cs: Sequence[float], n_features: int
) -> tuple[list[int], list[float]]:
    """Sorted unique ``m`` (clipped to ``n_features``, None = all) and sorted unique ``C``."""
    ms: set[int] = set()
    for m in list(max_features):
        if m is None:
            ms.add(n_features)
            continue
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise ValueError(f"max_features entries must be integers >= 1 or None, got {m!r}")
        ms.add(min(int(m), n_features))
    if not ms:
        raise ValueError("max_features is empty")
    cs: set[float] = set()
    for C in list(Cs):
        if not (isinstance(C, int | float | np.number) and math.isfinite(C) and C > 0):
            raise ValueError(f"Cs entries must be finite numbers > 0, got {C!r}")
        cs.add(float(C))
    if not cs:
        raise ValueError("Cs is empty")
    return sorted(ms), sorted(cs)
