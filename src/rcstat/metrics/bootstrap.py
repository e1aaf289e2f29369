"""Percentile bootstrap intervals of a detector's metrics, with whole groups resampled.

**Cluster bootstrap**: with ``groups``, a resample draws whole groups with replacement (a
group drawn twice contributes all its examples twice), so that examples of one group, which
are not independent, stay together. Intervals are percentile intervals; resamples with a
single class (where AUROC and balanced accuracy are undefined) are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from rcstat.metrics.inputs import as_groups, validate

__all__ = [
    "Metric",
    "bootstrap_interval",
    "bootstrap_values",
    "check_level",
    "group_members",
    "percentile_interval",
    "resample",
]

Metric = Callable[[np.ndarray, np.ndarray], float]
"""``metric(scores, labels) -> float`` on float64 scores and boolean labels."""


def bootstrap_values(
    metrics: Sequence[Metric],
    scores: np.ndarray,
    labels: np.ndarray,
    groups: Any,
    n_resamples: int,
    seed: int,
) -> tuple[np.ndarray, int]:
    """Every metric on the same resamples of validated data.

    Parameters
    ----------
    metrics
        The metrics, each ``metric(scores, labels) -> float``.
    scores, labels
        ``[n]`` float64 scores and booleans, as :func:`~rcstat.metrics.inputs.validate`
        returns them.
    groups
        ``[n]`` group of every example (resample whole groups) or ``None`` (single examples).
    n_resamples, seed
        Resamples drawn (at least 1) and the seed of ``numpy.random.default_rng``.

    Returns
    -------
    tuple[numpy.ndarray, int]
        ``[kept, len(metrics)]`` values over the resamples that hold both classes, and the
        number of resamples skipped for holding one class; ``ValueError`` when more than half
        are.
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer):
        raise ValueError(f"n_resamples must be an integer, got {n_resamples!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    members = group_members(groups, scores.size)
    values: list[list[float]] = []
    skipped = 0
    for _ in range(n_resamples):
        index = resample(rng, members, scores.size)
        y = labels[index]
        positives = int(y.sum())
        if positives in (0, y.size):
            skipped += 1
            continue
        values.append([float(metric(scores[index], y)) for metric in metrics])
    if skipped > n_resamples / 2:
        raise ValueError(
            f"{skipped} of {n_resamples} bootstrap resamples had a single class (more than "
            "half): too few positives, negatives or groups for a bootstrap interval"
        )
    return np.asarray(values, dtype=np.float64).reshape(-1, len(metrics)), skipped


def group_members(groups: Any, n: int) -> list[np.ndarray] | None:
    """The indices of each group of ``n`` examples (groups in sorted order, indices
    ascending), or None without ``groups`` (every example is its own group). ``ValueError``
    for a single group: every resample of it is the data itself, an interval of width 0."""
    if groups is None:
        return None
    unique, inverse = np.unique(as_groups(groups, n), return_inverse=True)
    if unique.size == 1:
        raise ValueError("a bootstrap over groups needs at least 2 groups, got 1")
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse))[:-1]
    return np.split(order, bounds)


def resample(rng: np.random.Generator, members: list[np.ndarray] | None, n: int) -> np.ndarray:
    """The indices of one bootstrap resample of ``n`` examples: ``n`` drawn with replacement,
    or, with ``members`` (:func:`group_members`), as many whole groups as there are, each
    drawn contributing all its examples."""
    if members is None:
        return rng.integers(0, n, size=n)
    drawn = rng.integers(0, len(members), size=len(members))
    return np.concatenate([members[k] for k in drawn])


def percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    """The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``values``."""
    alpha = (1.0 - level) / 2
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


def check_level(level: float) -> None:
    """``ValueError`` unless ``0 < level < 1``."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def bootstrap_interval(
    metric: Metric,
    scores: Any,
    labels: Any,
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric(scores, labels)``.

    Parameters
    ----------
    metric
        ``metric(scores, labels) -> float``, e.g. :func:`~rcstat.metrics.ranking.auroc`;
        called with float64 scores and boolean labels of each resample.
    scores
        ``[n]`` detector scores, higher = more likely hallucinated.
    labels
        ``[n]`` booleans (or 0/1), ``True`` = hallucinated; both classes must be present.
    groups
        ``[n]`` group of every example; when given, resample whole groups (cluster
        bootstrap), else single examples.
    n_resamples
        Number of resamples drawn (at least 1).
    seed
        Seed of ``numpy.random.default_rng``.
    level
        Coverage in ``(0, 1)``.

    Returns
    -------
    tuple[float, float]
        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the metric over the
        resamples that hold both classes.

    Notes
    -----
    A resample has as many examples (or groups) as the data, drawn with replacement.
    Resamples with a single class are skipped; if more than half are, ``ValueError``.

    Examples
    --------
    >>> from rcstat.metrics.ranking import auroc
    >>> bootstrap_interval(auroc, [0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], n_resamples=50)
    (1.0, 1.0)
    """
    check_level(level)
    s, y = validate(scores, labels, needs="a bootstrap interval")
    values, _ = bootstrap_values([metric], s, y, groups, n_resamples, seed)
    return percentile_interval(values[:, 0], level)
