"""Paired comparisons of two methods over the same examples: the difference, its bootstrap
interval and how often each method wins.

Benchmarks score every method on the same examples, so the question "is rcstat better than
the best baseline here?" is a paired one: each example gives a pair ``(a_i, b_i)``. The
difference is the (weighted) mean of ``a_i - b_i`` — with the units of each example as weights
it is the pooled difference of unit accuracies — and its interval comes from resampling whole
examples with replacement (percentile bootstrap, :func:`scipy.stats.bootstrap` with
``paired=True``). Wins, ties and losses count the examples where ``a`` is better, equal or
worse (``higher_is_better`` says which way).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import bootstrap

__all__ = ["PairedDifference", "paired_difference"]


@dataclass(frozen=True)
class PairedDifference:
    """``a − b`` over paired examples.

    Attributes
    ----------
    difference : float
        ``Σ w_i (a_i − b_i) / Σ w_i``.
    low, high : float
        The percentile bootstrap interval at ``level`` (NaN with fewer than 2 examples).
    wins, ties, losses : int
        Examples where ``a`` is better than, equal to or worse than ``b``.
    examples : int
        The number of pairs.
    level : float
        The interval's confidence level.
    """

    difference: float
    low: float
    high: float
    wins: int
    ties: int
    losses: int
    examples: int
    level: float

    @property
    def win_share(self) -> float:
        """The share of examples where ``a`` is better (ties count as not winning)."""
        return self.wins / self.examples if self.examples else float("nan")

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies entirely on one side of 0."""
        return bool(self.low > 0 or self.high < 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "win_share": self.win_share, "excludes_zero": self.excludes_zero}


def _seeded(seed: int) -> dict[str, Any]:
    """The seed argument of :func:`scipy.stats.bootstrap` (``rng`` from SciPy 1.15 on,
    ``random_state`` before)."""
    generator = np.random.default_rng(seed)
    if "rng" in inspect.signature(bootstrap).parameters:
        return {"rng": generator}
    return {"random_state": generator}


def _weighted_difference(a: np.ndarray, b: np.ndarray, w: np.ndarray, axis: int = -1) -> Any:
    return ((a - b) * w).sum(axis=axis) / w.sum(axis=axis)


def paired_difference(
    a: Any,
    b: Any,
    *,
    weights: Any = None,
    higher_is_better: bool = True,
    n_resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """Compare method ``a`` with method ``b`` on the same examples.

    Parameters
    ----------
    a, b : array-like of float
        Per-example scores of the two methods (same length, same order, finite).
    weights : array-like of float, optional
        Per-example weights (e.g. the number of units an accuracy is over), positive.
    higher_is_better : bool
        Whether a larger score is better (accuracy) or worse (an error such as VER).
    n_resamples, level, seed
        The bootstrap's resamples, confidence level and random seed.

    Raises
    ------
    ValueError
        Different lengths, no pair, a non-finite score or a non-positive weight.

    Examples
    --------
    >>> result = paired_difference([1.0, 0.5, 1.0], [0.5, 0.5, 0.0], weights=[2, 1, 1])
    >>> result.difference, result.wins, result.ties, result.losses
    (0.5, 2, 1, 0)
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or w.shape != x.shape:
        raise ValueError(
            f"paired scores need equal 1-D lengths, got {x.shape}, {y.shape} and weights {w.shape}"
        )
    if not len(x):
        raise ValueError("no pair to compare")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("paired scores must be finite (a NaN or inf score was given)")
    if not (np.isfinite(w).all() and (w > 0).all()):
        raise ValueError("weights must be finite and positive")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    better = (x > y) if higher_is_better else (x < y)
    ties = np.isclose(x, y, rtol=0.0, atol=1e-12)
    difference = float(_weighted_difference(x, y, w))
    low = high = float("nan")
    if len(x) >= 2:
        if np.allclose(x - y, (x - y)[0], rtol=0.0, atol=1e-15):
            low = high = difference  # every resample gives the same difference
        else:
            found = bootstrap(
                (x, y, w),
                _weighted_difference,
                paired=True,
                vectorized=True,
                n_resamples=n_resamples,
                confidence_level=level,
                method="percentile",
                **_seeded(seed),
            )
            low, high = (float(v) for v in found.confidence_interval)
    return PairedDifference(
        difference,
        low,
        high,
        int((better & ~ties).sum()),
        int(ties.sum()),
        int((~better & ~ties).sum()),
        len(x),
        level,
    )
