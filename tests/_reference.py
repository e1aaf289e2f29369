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


def eq9_relative(rows: np.ndarray, window: int, score: str = "expected") -> np.ndarray:
    """``s_i / θ`` of one head by loops (paper eq. 9); ``rows[j, i]`` = window query j, key i.

    ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))`` (``score="upper"``: the overlap area ``A`` of Algorithm 1)
    for every non-window position ``i``, with ``Y(ĝ, ĝ)`` the window's causal self scores
    (query ``j`` against window keys ``k <= j``), and ``θ = mean_i s_i`` (0 where ``θ = 0``).
    """
    length = rows.shape[1]
    start = length - window
    y = np.array([rows[q, start + k] for q in range(window) for k in range(q + 1)])
    if score == "expected":
        s = np.array([naive_expected_rc(rows[:, i], y) for i in range(start)])
    else:
        s = np.array([algorithm1(rows[:, i], y, "upper") for i in range(start)])
    theta = s.mean()
    return s / theta if theta > 0 else np.zeros_like(s)


def eq9_relative_layers(blocks: list[np.ndarray], window: int, score: str) -> np.ndarray:
    """``[layers, heads, T - w]``: :func:`eq9_relative` of every head of every layer;
    ``blocks[layer]`` is ``[heads, T, T]``, pre-softmax scores ``f(i, j)`` per query row and
    key column."""
    length = blocks[0].shape[-1]
    return np.array(
        [
            [eq9_relative(b[h, length - window :, :], window, score) for h in range(b.shape[0])]
            for b in blocks
        ]
    )


def eq9_keep_masks(
    relative: np.ndarray,
    window: int,
    kv_heads: int,
    *,
    threshold: float = 1.0,
    ratio: float | None = None,
    group: str = "max",
    budget: str = "layer",
    floor: float = 0.0,
    sinks: int = 0,
) -> np.ndarray:
    """``[layers, kv_heads, T]`` bool: which prompt entries each KV head keeps, by eq. 9.

    ``relative`` is ``[layers, heads, T - w]`` from :func:`eq9_relative_layers`. A KV head
    combines its group (query heads ``kv·g … kv·g + g − 1``): ``"max"`` keeps ``i`` when *any*
    of them keeps it, ``"mean"`` compares the group's mean relative score. The last ``window``
    positions and the first ``sinks`` are always kept.

    Threshold mode (``ratio`` None): keep iff the relative score exceeds ``c = threshold``;
    ``c = 0`` keeps everything. Target-ratio mode: ``round(r · entries)`` entries are evicted,
    ``entries`` counting every KV entry of the prompt (window included): ``c`` is the quantile
    of the eligible scores (neither window nor sink) at that rank and entries with scores up
    to ``c`` go — per layer (``budget="layer"``) or over all layers (``"pooled"``, where each
    KV head first sets aside its best ``⌈floor · (1 − r) · (T − w)⌉`` non-window entries, the
    sinks counted first, and only the rest is eligible).
    """
    layers, heads, candidates = relative.shape
    length = candidates + window
    per_group = heads // kv_heads
    keep = np.ones((layers, kv_heads, length), dtype=bool)
    if ratio is None:
        if threshold == 0:
            return keep
        for layer in range(layers):
            for kv in range(kv_heads):
                members = relative[layer, kv * per_group : (kv + 1) * per_group]  # [g, T - w]
                if group == "max":
                    kept = [any(m[i] > threshold for m in members) for i in range(candidates)]
                else:
                    kept = [float(np.mean(members[:, i])) > threshold for i in range(candidates)]
                keep[layer, kv, :candidates] = kept
                keep[layer, kv, :sinks] = True
        return keep
    combine = np.max if group == "max" else np.mean
    combined = np.array(  # [L, Hkv, T - w]
        [
            [
                combine(relative[layer, kv * per_group : (kv + 1) * per_group], axis=0)
                for kv in range(kv_heads)
            ]
            for layer in range(layers)
        ]
    )
    eligible = np.zeros(combined.shape, dtype=bool)
    eligible[..., min(sinks, candidates) :] = True
    if budget == "pooled":
        protect = min(candidates, int(np.ceil(floor * (1 - ratio) * candidates)))
        extra = max(protect - sinks, 0)  # the sinks are each head's best entries
        for layer in range(layers):
            for kv in range(kv_heads):
                order = sorted(range(sinks, candidates), key=lambda i: -combined[layer, kv, i])
                eligible[layer, kv, order[:extra]] = False
        evicted = _lowest_by_quantile(combined, eligible, round(ratio * layers * kv_heads * length))
    else:
        evicted = np.stack(
            [
                _lowest_by_quantile(
                    combined[layer], eligible[layer], round(ratio * kv_heads * length)
                )
                for layer in range(layers)
            ]
        )
    keep[..., :candidates] = ~evicted
    return keep


def _lowest_by_quantile(scores: np.ndarray, eligible: np.ndarray, evict: int) -> np.ndarray:
    """``scores``' shape, bool: the eligible entries scoring at most ``c``, the ``evict``-th
    smallest eligible score (no ties in random data), so that exactly ``evict`` go."""
    if evict == 0:
        return np.zeros(scores.shape, dtype=bool)
    c = np.sort(scores[eligible])[evict - 1]
    return eligible & (scores <= c)
