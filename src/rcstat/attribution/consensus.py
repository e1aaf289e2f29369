"""A head set fixed over a dataset: the heads whose RC ranks highest on most examples.

The paper picks the top-``k`` heads of each example from that example's own ranking (§4.2,
step 1). :func:`consensus_heads` instead ranks heads by their *mean rank* over many examples'
rankings (each a ``[layers, heads]`` array of ``E(X(p, g), Y(g, g))``, e.g.
:attr:`Attribution.head_scores <rcstat.attribution.Attribution.head_scores>`), so one set of
heads serves every example of a task. Ranks, not raw values, are averaged: RC's scale differs
between prompts, and a mean of values would follow the few examples where it is largest.
The ranking needs no gold label, so a set built on the very examples it then attributes
reads nothing it should not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from rcstat.checks import check_count

__all__ = ["consensus_heads", "mean_head_ranks"]


def mean_head_ranks(rankings: Sequence[np.ndarray]) -> np.ndarray:
    """``[layers, heads]``: each head's mean rank over the examples (1 = the highest score of
    its example; ties share their mean rank).

    Raises
    ------
    ValueError
        No ranking, rankings of different shapes, or a ranking with NaN.
    """
    if len(rankings) == 0:
        raise ValueError("rankings: give at least one example's [layers, heads] ranking")
    arrays = [np.asarray(r, dtype=np.float64) for r in rankings]
    shape = arrays[0].shape
    if len(shape) != 2 or any(a.shape != shape for a in arrays):
        raise ValueError(
            f"rankings: expected [layers, heads] arrays of one shape, got "
            f"{sorted({a.shape for a in arrays})}"
        )
    stacked = np.stack(arrays).reshape(len(arrays), -1)  # [N, layers·heads]
    if np.isnan(stacked).any():
        raise ValueError("rankings: a ranking holds NaN (a statistic that was not computed)")
    ranks = rankdata(-stacked, axis=1)  # [N, layers·heads], 1 = highest
    return ranks.mean(axis=0).reshape(shape)


def consensus_heads(rankings: Sequence[np.ndarray], top_k: int) -> list[tuple[int, int]]:
    """The ``top_k`` ``(layer, head)`` pairs of lowest mean rank over ``rankings``, best first
    (ties in layer, head order).

    >>> import numpy as np
    >>> consensus_heads([np.array([[3.0, 1.0], [2.0, 0.0]]),
    ...                  np.array([[1.0, 0.0], [5.0, 2.0]])], 2)
    [(1, 0), (0, 0)]
    """
    mean = mean_head_ranks(rankings)
    check_count("top_k", top_k, high=mean.size)
    order = np.argsort(mean.reshape(-1), kind="stable")[:top_k]
    heads = mean.shape[1]
    return [divmod(int(i), heads) for i in order]
