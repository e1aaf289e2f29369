"""The colour scale of grounding scores: logarithmic and centred on the verdict's threshold.

A word's score lies in [0, 1] but the calibrated threshold of the shipped profile is about
0.002: on a linear 0–1 scale a supported word (0.01) and a failing one (0.0001) would both be
the darkest red. So a token with score ``s`` is placed by ``log10(s / t)`` against the threshold
``t``, and which side of the threshold it lies on decides its hue:

* bins ``0 .. 4`` (red to yellow) hold the scores **below** the threshold, bins ``5 .. 9``
  (light to dark green) those **at or above** it — whatever the rounding, a score is red exactly
  when its word fails;
* each bin spans ``D / 5`` decades of ``s / t``, with ``D = clamp(log10(1 / t), 1, 6)``: the
  green bins cover ``[t, 1]`` (for ``t <= 0.1``), the red bins as many decades below ``t``;
  bin 0 also holds everything further below, bin 9 everything above;
* NaN (punctuation, not judged) has no bin (-1).

For ``t = 0.002`` a bin is 0.54 decades (×3.5): 0.0006–0.002 is bin 4, 0.002–0.007 bin 5,
0.29–1 bin 9, below 0.000014 bin 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

__all__ = ["BINS", "bin_edges", "decades", "score_bins", "token_label"]

#: Colour bins: half below the threshold, half at or above it.
BINS = 10
_HALF = BINS // 2
#: The fewest and the most decades each half of the scale spans.
_DECADES = (1.0, 6.0)


def decades(threshold: float) -> float:
    """``D``: the decades of ``s / t`` that each half of the scale spans.

    >>> round(decades(0.002), 3), decades(0.5), decades(0.0)
    (2.699, 1.0, 6.0)
    """
    low, high = _DECADES
    if not threshold > 0:  # 0 (every score passes) or NaN
        return high
    return min(max(math.log10(1.0 / threshold), low), high)


def _centre(threshold: float) -> float:
    """The threshold the scale is centred on (a threshold of 0 is placed ``D`` decades below
    1)."""
    return threshold if threshold > 0 else 10.0 ** -decades(threshold)


def score_bins(scores: Sequence[float] | np.ndarray, threshold: float) -> np.ndarray:
    """Colour bin of each token score against ``threshold`` (see the module notes); -1 for NaN.

    >>> score_bins([0.0, 1e-5, 0.0019, 0.002, 0.0021, 0.05, 1.0, float("nan")], 0.002).tolist()
    [0, 0, 4, 5, 5, 7, 9, -1]
    """
    s = np.asarray(scores, dtype=np.float64)
    nan = np.isnan(s)
    centre, span = _centre(threshold), decades(threshold)
    with np.errstate(divide="ignore", invalid="ignore"):
        position = np.log10(np.where(nan | (s <= 0), np.nan, s) / centre)  # decades from t
    raw = np.floor(_HALF + position * _HALF / span)
    raw = np.where(np.isnan(raw), 0, raw)  # zero, negative: the lowest bin
    bins = np.clip(raw, 0, BINS - 1).astype(np.int64)
    above = s >= threshold  # the side decides the hue, whatever the rounding
    bins = np.where(above, np.maximum(bins, _HALF), np.minimum(bins, _HALF - 1))
    return np.where(nan, -1, bins)


def bin_edges(threshold: float) -> list[tuple[float, float]]:
    """``[low, high)`` of each bin's scores (bin 0 from 0, bin 9 up to 1; a bin above 1 is
    empty, ``low == high == 1``).

    >>> [f"{a:.2g}-{b:.2g}" for a, b in bin_edges(0.002)[4:8]]
    ['0.00058-0.002', '0.002-0.0069', '0.0069-0.024', '0.024-0.083']
    """
    centre, step = _centre(threshold), decades(threshold) / _HALF
    inner = [min(centre * 10.0 ** ((k - _HALF) * step), 1.0) for k in range(1, BINS)]
    if threshold > 0:
        inner[_HALF - 1] = min(threshold, 1.0)
    edges = [0.0, *inner, 1.0]
    return list(itertools.pairwise(edges))


def token_label(value: float) -> str:
    """A token's score as its tooltip shows it: 3 decimals, 2 significant digits below 0.01
    (where the threshold lies), ``n/a`` for NaN.

    >>> token_label(0.92), token_label(0.00043), token_label(0.0), token_label(float("nan"))
    ('0.920', '0.00043', '0.000', 'n/a')
    """
    if math.isnan(value):
        return "n/a"
    return f"{value:.3f}" if value == 0 or abs(value) >= 0.01 else f"{value:.2g}"
