"""Obviously-correct, slow reference implementations used as test oracles.

Written independently of ``rcstat.stats``: numpy, float64, pairwise sums and the paper's
Algorithm 1 verbatim.
"""

from __future__ import annotations

import numpy as np


def naive_expected_rc(x: np.ndarray, y: np.ndarray) -> float:
    """``(1/nm) Σ_a Σ_b max(x_a - y_b, 0)`` over all pairs."""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    return float(np.maximum(x[:, None] - y[None, :], 0.0).mean())


def _cdf(samples: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (samples[None, :] <= t[:, None]).mean(axis=1)


def algorithm1(x: np.ndarray, y: np.ndarray, bound: str) -> float:
    """The paper's Algorithm 1 (midpoints of the unique breakpoints); ``bound`` upper|lower."""
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    y = np.sort(np.asarray(y, dtype=np.float64).ravel())
    breaks = np.unique(np.concatenate([x, y]))
    if breaks.size < 2:
        return 0.0
    left, right = breaks[:-1], breaks[1:]
    mid, width = (left + right) / 2, right - left
    f_x, f_y = _cdf(x, mid), _cdf(y, mid)
    if bound == "upper":
        v = np.minimum(f_y, 1.0 - f_x)
    else:
        v = np.maximum(f_y - f_x, 0.0)
    return float((v * width).sum())


def eq6_block(scores: np.ndarray, prompt_len: int) -> float:
    """Paper eq. (6) as a literal quadruple loop over one head's generation block.

    ``scores[j, i] = f(i, m + j)``. ``E = 2 / (|p| |g|² (|g|+1)) Σ_i Σ_j Σ_k Σ_{l >= k}
    max(f(i, j) - f(k, l), 0)``.
    """
    g = scores.shape[0]
    m = prompt_len
    total = 0.0
    for i in range(m):
        for j in range(g):
            for k in range(g):
                for q in range(k, g):  # query q >= key k
                    total += max(scores[j, i] - scores[q, m + k], 0.0)
    return 2.0 * total / (m * g * g * (g + 1))


def iot_block(scores: np.ndarray, prompt_len: int) -> float:
    """IOT approximation by loops: mean over queries j of E(X(p, {j}), Y(g, {j}))."""
    m, g = prompt_len, scores.shape[0]
    return float(
        np.mean([naive_expected_rc(scores[j, :m], scores[j, m : m + j + 1]) for j in range(g)])
    )
