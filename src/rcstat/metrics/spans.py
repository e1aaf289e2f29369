"""Example-level and character-level metrics of unsupported-span detection.

The definitions of the field's RAGTruth evaluations (LettuceDetect, Kovács & Recski 2025):

* **example level**: precision, recall and F1 of the hallucinated class, a response being
  predicted hallucinated when the detector flags it;
* **character level**: with ``P_i`` the characters of response ``i`` inside a predicted span
  and ``T_i`` those inside a labelled span, ``precision = Σ|P_i ∩ T_i| / Σ|P_i|``,
  ``recall = Σ|P_i ∩ T_i| / Σ|T_i|`` and their harmonic mean (sums over every response, faithful
  ones included: a span predicted in a faithful response costs precision). Overlapping spans
  of one response count their characters once.

Intervals resample whole groups (:func:`group_bootstrap`), as
:mod:`~rcstat.metrics.bootstrap` does for AUROC.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from rcstat.metrics.bootstrap import check_level, group_members, percentile_interval, resample
from rcstat.metrics.inputs import as_labels

__all__ = [
    "PRF",
    "char_overlap",
    "char_prf",
    "example_prf",
    "group_bootstrap",
    "prf",
]


@dataclass(frozen=True)
class PRF:
    """Precision, recall and F1 (NaN where a denominator is 0)."""

    precision: float
    recall: float
    f1: float


def prf(hits: float, predicted: float, actual: float) -> PRF:
    """``hits / predicted``, ``hits / actual`` and their harmonic mean.

    >>> prf(3, 4, 6)
    PRF(precision=0.75, recall=0.5, f1=0.6)
    """
    precision = hits / predicted if predicted else float("nan")
    recall = hits / actual if actual else float("nan")
    if predicted and actual and precision + recall > 0:
        f1 = 2 * precision * recall / (precision + recall)
    elif predicted and actual:
        f1 = 0.0
    else:
        f1 = float("nan")
    return PRF(precision, recall, f1)


def example_prf(flagged: Sequence[bool] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> PRF:
    """Example-level precision, recall and F1 of the hallucinated class.

    >>> example_prf([True, True, False, False], [True, False, True, False])
    PRF(precision=0.5, recall=0.5, f1=0.5)
    """
    f = as_labels(flagged, "flagged")
    y = as_labels(labels)
    if f.shape != y.shape:
        raise ValueError(f"flagged and labels differ in length: {f.size} and {y.size}")
    return prf(float((f & y).sum()), float(f.sum()), float(y.sum()))


def char_overlap(
    predicted: Sequence[tuple[int, int]], labelled: Sequence[tuple[int, int]]
) -> tuple[int, int, int]:
    """``(|P ∩ T|, |P|, |T|)`` in characters for one response's predicted and labelled
    ``[start, end)`` spans (overlapping spans counted once).

    >>> char_overlap([(0, 10), (5, 12)], [(8, 20)])
    (4, 12, 12)
    """
    p, t = _chars(predicted, "predicted"), _chars(labelled, "labelled")
    return len(p & t), len(p), len(t)


def char_prf(
    predicted: Sequence[Sequence[tuple[int, int]]], labelled: Sequence[Sequence[tuple[int, int]]]
) -> PRF:
    """Character-level precision, recall and F1 over many responses (module notes).

    >>> char_prf([[(0, 4)], []], [[(2, 6)], [(0, 3)]])
    PRF(precision=0.5, recall=0.2857142857142857, f1=0.36363636363636365)
    """
    if len(predicted) != len(labelled):
        raise ValueError(
            f"predicted and labelled differ in length: {len(predicted)}, {len(labelled)}"
        )
    counts = np.array([char_overlap(p, t) for p, t in zip(predicted, labelled, strict=True)])
    totals = counts.sum(axis=0) if len(counts) else np.zeros(3)
    return prf(float(totals[0]), float(totals[1]), float(totals[2]))


def group_bootstrap(
    statistic: Callable[[np.ndarray], float],
    n: int,
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of ``statistic(index)`` over resamples of ``n`` examples, whole
    ``groups`` drawn with replacement (single examples without groups). Resamples where the
    statistic is NaN (e.g. no predicted span) are skipped; ``ValueError`` when more than half
    are.

    >>> values = np.arange(10.0)
    >>> group_bootstrap(lambda i: values[i].mean(), 10, n_resamples=200) < (9.0, 9.0)
    True
    """
    check_level(level)
    if n < 2:  # every resample of one example is that example: an interval of width 0
        raise ValueError(f"group_bootstrap needs at least 2 examples, got {n}")
    rng = np.random.default_rng(seed)
    members = group_members(groups, n)
    values = []
    for _ in range(n_resamples):
        value = float(statistic(resample(rng, members, n)))
        if not np.isnan(value):
            values.append(value)
    if len(values) < n_resamples / 2:
        raise ValueError(
            f"{n_resamples - len(values)} of {n_resamples} resamples gave no value (more than "
            "half): too few examples for an interval"
        )
    return percentile_interval(np.asarray(values), level)


def _chars(spans: Sequence[tuple[int, int]], what: str) -> set[int]:
    out: set[int] = set()
    for start, end in spans:
        if not 0 <= start <= end:
            raise ValueError(f"{what} span [{start}, {end}) is not a range of offsets")
        out.update(range(start, end))
    return out
