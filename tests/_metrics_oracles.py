"""Independent oracles for the tests of rcstat.metrics: AUROC by counting pairs, balanced
accuracy and the best threshold by looping over every rule in exact fractions, and small data
sets (hypothesis strategies with many ties, informative scores, grouped examples)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st


def pairwise_auroc(scores: list[float], labels: list[bool]) -> Fraction:
    """Count (positive, negative) pairs: 1 when the positive scores higher, ½ on a tie."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(Fraction(1) if p > q else Fraction(1, 2) if p == q else 0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def loop_balanced_accuracy(scores: list[float], labels: list[bool], t: float) -> Fraction:
    """(TPR + TNR) / 2 of ``score >= t``, one example at a time, in exact fractions."""
    tp = sum(1 for s, y in zip(scores, labels, strict=True) if y and s >= t)
    tn = sum(1 for s, y in zip(scores, labels, strict=True) if not y and s < t)
    positives = sum(labels)
    negatives = len(labels) - positives
    return (Fraction(tp, positives) + Fraction(tn, negatives)) / 2


def brute_best(scores: list[float], labels: list[bool]) -> tuple[Fraction, float]:
    """(best balanced accuracy over every rule, smallest documented candidate reaching it).

    The maximum is taken over every distinct rule: ``score >= u`` for each unique score
    ``u`` and "flag nothing" (``inf``). The candidates are the documented ones: lowest
    score, midpoints, a value above the highest score.
    """
    unique = sorted(set(scores))
    best = max(loop_balanced_accuracy(scores, labels, t) for t in [*unique, float("inf")])
    mids = [(a + b) / 2 for a, b in itertools.pairwise(unique)]
    candidates = [unique[0], *mids, float("inf")]
    winner = min(t for t in candidates if loop_balanced_accuracy(scores, labels, t) == best)
    return best, winner


@st.composite
def scored_data(draw: st.DrawFn, max_size: int = 20) -> tuple[list[float], list[bool]]:
    """Small data sets with both classes and many ties (integers mixed with floats)."""
    n = draw(st.integers(2, max_size))
    value = st.one_of(
        st.integers(-3, 3).map(float),
        # on a grid: no two scores are adjacent floats, midpoints are the oracle's
        st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 3)),
    )
    scores = draw(st.lists(value, min_size=n, max_size=n))
    labels = [True, False, *draw(st.lists(st.booleans(), min_size=n - 2, max_size=n - 2))]
    return scores, labels


def separated(n: int = 120, seed: int = 0, shift: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Noisy but informative scores: positives shifted up by ``shift``."""
    rng = np.random.default_rng(seed)
    labels = rng.random(n) < 0.4
    labels[:2] = [True, False]
    return rng.normal(size=n) + shift * labels, labels


def grouped(n_groups: int = 7, per_group: int = 6, seed: int = 1) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"doc{i}" for i in range(n_groups)], per_group)
    labels = np.tile([True, False], n_groups * per_group // 2)
    scores = rng.normal(size=labels.size) + labels
    return scores, labels, groups


def recorder() -> tuple[list[Counter[int]], Callable[[np.ndarray, np.ndarray], float]]:
    """A metric that records the example ids (= the scores) of every resample it sees."""
    seen: list[Counter[int]] = []

    def metric(scores: np.ndarray, labels: np.ndarray) -> float:
        seen.append(Counter(scores.astype(int).tolist()))
        return float(labels.mean())

    return seen, metric
