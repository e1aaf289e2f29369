"""Validation of a detector's inputs, shared by every metric of :mod:`rcstat.metrics`.

Each public metric calls :func:`validate` once; the helpers raise ``ValueError``\\ s that name
the argument and the problem (the first offending index, the shapes that disagree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["as_groups", "as_labels", "both_classes", "check_finite", "one_class", "validate"]


def as_labels(labels: Any, name: str = "labels") -> np.ndarray:
    """Boolean copy of ``labels`` (bool or 0/1 integers), else a ``ValueError``."""
    array = np.asarray(labels)
    if array.dtype == np.bool_:
        return array.astype(bool, copy=True)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{name} must be booleans (True = hallucinated) or 0/1 integers, "
            f"got dtype {array.dtype}"
        )
    bad = (array != 0) & (array != 1)
    if bool(bad.any()):
        first = int(np.flatnonzero(bad.ravel())[0])
        value = array.ravel()[first].item()
        raise ValueError(
            f"{name} must be booleans (True = hallucinated) or 0/1 integers, "
            f"got {int(bad.sum())} other values, the first {value!r} at index {first}"
        )
    return array.astype(bool)


def check_finite(scores: np.ndarray, name: str = "scores") -> None:
    """``ValueError`` naming ``name`` when ``scores`` holds a NaN or an infinity."""
    bad = ~np.isfinite(scores)
    if bool(bad.any()):
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite values (NaN or inf), the first at index "
            f"{first}"
        )


def one_class(labels: np.ndarray, what: str) -> str | None:
    """Why ``what`` is undefined when ``labels`` hold a single class, else ``None``."""
    positives = int(labels.sum())
    if positives not in (0, labels.size):
        return None
    value = "True" if positives else "False"
    return f"{what} needs both classes: all {labels.size} labels are {value}"


def both_classes(labels: np.ndarray, what: str) -> None:
    """``ValueError`` (:func:`one_class`'s message) when ``labels`` hold a single class."""
    message = one_class(labels, what)
    if message is not None:
        raise ValueError(message)


def validate(
    scores: Any, labels: Any, *, needs: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores as float64, labels as bool)``, both 1-D and of one length.

    ``needs`` names the quantity that needs both classes (``"AUROC"``); ``None`` skips that
    check.
    """
    s = np.asarray(scores, dtype=np.float64)
    raw = np.asarray(labels)
    if s.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {s.shape}")
    if raw.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {raw.shape}")
    if s.size != raw.size:
        raise ValueError(f"scores has {s.size} entries but labels has {raw.size}")
    if s.size == 0:
        raise ValueError("scores and labels are empty")
    y = as_labels(raw)
    check_finite(s)
    if needs is not None:
        both_classes(y, needs)
    return s, y


def as_groups(groups: Any, n: int) -> np.ndarray:
    """``groups`` as a 1-D array of ``n`` entries, else a ``ValueError``."""
    g = np.asarray(groups)
    if g.ndim != 1:
        raise ValueError(f"groups must be one-dimensional, got shape {g.shape}")
    if g.size != n:
        raise ValueError(f"groups has {g.size} entries but scores has {n}")
    return g
