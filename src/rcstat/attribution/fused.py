"""One layer's attribution quantities in one Triton kernel: the CUDA path of
:func:`~rcstat.attribution.reduce.attribution_reducer` for the expected RC (paper eqs. 6, 10).

The tensor path ranks the cross samples twice (once against each head's self samples, once
against each unit's), rebuilds every post-softmax weight of the block and sums them with
running sums: tens of launches a layer, each a pass over ``[H, |g|, m]``. Here the self
samples are sorted as before (:func:`~rcstat.stats._gpu.prepared_self`), one small kernel
takes each row's softmax normaliser, and ``attribution_kernel`` reads every cross sample once
for the head's ranking sum, the unit's key-level RC ``t_h(g', i)`` and the unit's mean weight
on the key. The results equal the tensor path's (tests/attribution_fused_cases.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch

from rcstat.capture import SoftmaxParams
from rcstat.stats import UnitRows, self_samples, unit_self_samples
from rcstat.stats._gpu import kernels_serve, on_device, prepared_self, search_args

__all__ = ["fused_attribution", "fused_serves", "row_segments"]

_BLOCK_J = 4  # rows a tile
_BLOCK_I = 32  # prompt keys a tile (and a program)
_LSE_BLOCK = 1024  # keys a step of the normaliser's pass
# the units' bucket tables, 2^(bits(longest) − 2) buckets: rows of many sizes are padded to
# the longest, and a smaller table stays in cache (H200: 1.54 → 1.34 ms a layer at 2048/256)
_UNIT_SPREAD = -2
_WARPS = 1  # tuned on an H200: 4 x 32 x 1 warp near the best at 2k and 8k keys, 16 and 256 rows


def fused_serves(block: torch.Tensor) -> bool:
    """Whether the kernel runs on ``block`` (CUDA with Triton, or the interpreter; float32,
    bfloat16 or float16 scores)."""
    narrow = (torch.float32, torch.bfloat16, torch.float16)
    return block.dtype in narrow and kernels_serve(block)


def row_segments(units: Sequence[tuple[int, int]], gen_len: int) -> np.ndarray:
    """The runs of rows the kernel walks, ``[S, 4]`` int32: first row, end row, unit index
    (−1: rows of no unit) and 1 where the head ranking counts the rows.

    Units that do not overlap, in any order, give one run each plus the gaps between them,
    every row counted once. Overlapping units give one run each, not counted, and one run of
    all ``gen_len`` rows for the ranking.
    """
    order = sorted(range(len(units)), key=lambda u: units[u][0])
    spans = [units[u] for u in order]
    if any(b > c for (_, b), (c, _) in itertools.pairwise(spans)):
        runs = [(a, b, u, 0) for u, (a, b) in enumerate(units)] + [(0, gen_len, -1, 1)]
        return np.asarray(runs, dtype=np.int32)
    runs, row = [], 0
    for u in order:
        a, b = units[u]
        if row < a:
            runs.append((row, a, -1, 1))
        runs.append((a, b, u, 1))
        row = b
    if row < gen_len:
        runs.append((row, gen_len, -1, 1))
    return np.asarray(runs, dtype=np.int32)


def fused_attribution(
    block: torch.Tensor,
    prompt_len: int,
    segments: torch.Tensor,
    rows: UnitRows,
    params: SoftmaxParams,
    *,
    rank_heads: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """``(E, t, attention)`` of one layer's generation block ``[H, |g|, m + |g|]``.

    ``E`` ``[H]`` float64: ``E(X(p, g), Y(g, g))`` per head (None without ``rank_heads``: the
    heads' self samples are then not even sorted); ``t`` ``[U, H, m]`` float64: the
    key-level expected RC ``t_h(g', i)`` of every unit over the prompt keys; ``attention``
    ``[U, m]`` float32: the post-softmax weight on each prompt key, summed over heads and
    averaged over the unit's rows. ``segments`` is :func:`row_segments` on the block's device
    and ``rows`` the units' :class:`~rcstat.stats.UnitRows` there.
    """
    from rcstat.attribution._fused_triton import attribution_kernel
    from rcstat.capture._softmax_triton import row_lse_kernel

    heads, gen_len, _ = block.shape
    units = rows.index.shape[0]
    device = block.device
    y, valid = unit_self_samples(block, rows)  # [U, H, Y]
    unit = prepared_self(
        y.reshape(units * heads, -1), valid.reshape(units * heads, -1), spread=_UNIT_SPREAD
    )
    # without the ranking the kernel never reads the heads' samples: the units' stand in
    head = prepared_self(self_samples(block, prompt_len), None) if rank_heads else unit
    softcap = params.softcap is not None
    window = params.sliding_window is not None
    lse = torch.empty(heads, gen_len, dtype=torch.float32, device=device)
    tiles = -(-prompt_len // _BLOCK_I)
    ranked = torch.empty(heads, segments.shape[0], tiles, dtype=torch.float64, device=device)
    per_key = torch.empty(units, heads, prompt_len, dtype=torch.float64, device=device)
    weight = torch.empty(units, heads, prompt_len, dtype=torch.float32, device=device)
    softmax = (params.scaling, params.softcap or 1.0, params.sliding_window or 0)
    with on_device(device):
        row_lse_kernel[(heads, gen_len)](
            block,
            *block.stride(),
            prompt_len,
            lse,
            gen_len,
            *softmax,
            HAS_SOFTCAP=softcap,
            HAS_WINDOW=window,
            BLOCK=_LSE_BLOCK,
        )
        attribution_kernel[(tiles, heads, segments.shape[0])](
            block,
            *block.stride(),
            prompt_len,
            segments,
            segments.shape[0],
            lse,
            gen_len,
            heads,
            *search_args(head),
            *search_args(unit),
            ranked,
            per_key,
            weight,
            tiles,
            *softmax,
            HAS_SOFTCAP=softcap,
            HAS_WINDOW=window,
            RANK_HEADS=rank_heads,
            HEAD_TABLE=head.table is not None,
            UNIT_TABLE=unit.table is not None,
            BLOCK_J=_BLOCK_J,
            BLOCK_I=_BLOCK_I,
            num_warps=_WARPS,
        )
    if not rank_heads:
        return None, per_key, weight.sum(1)
    expected = ranked.sum((1, 2)) / (gen_len * prompt_len * head.count.double())
    return expected, per_key, weight.sum(1)
