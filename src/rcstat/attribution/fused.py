"""One layer's attribution quantities in one Triton kernel: the CUDA path of
:func:`~rcstat.attribution.reduce.attribution_reducer` for the expected RC (paper eqs. 6, 10).

The tensor path ranks the cross samples twice (once against each head's self samples, once
against each unit's), rebuilds every post-softmax weight of the block and sums them with
running sums: tens of launches a layer, each a pass over ``[H, |g|, m]``. Here the self
samples are sorted as before (:func:`~rcstat.stats._gpu.prepared_self`), one small kernel
takes each row's softmax normaliser, and ``attribution_kernel`` reads every cross sample once
for the head's ranking sum, the unit's key-level RC ``t_h(g', i)`` and the unit's mean weight
on the key. The results equal the tensor path's (tests/attribution_fused_cases.py).

Before the kernel, three branches run side by side on CUDA (streams, or a graph's parallel
branches): the rows' normalisers; the units' sorted samples, grouped from the heads' sort by
a counting sort, and their preparation; the heads' bucket records and running sums, the
latter split over blocks of samples.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rcstat.capture import SoftmaxParams
from rcstat.stats import UnitRows, self_samples, unit_self_samples
from rcstat.stats._gpu import (
    SelfSamples,
    kernels_serve,
    on_device,
    prepared_self,
    prepared_sorted,
    search_args,
    sorted_self,
)
from rcstat.stats._streams import fork, join, on

__all__ = ["UnitOrder", "fused_attribution", "fused_serves", "row_segments", "unit_order"]

_BLOCK_J = 4  # rows a tile
_BLOCK_I = 32  # prompt keys a tile (and a program)
_LSE_BLOCK = 1024  # keys a step of the normaliser's pass
# the units' bucket tables, 2^(bits(longest) − 2) buckets: rows of many sizes are padded to
# the longest, and a smaller table stays in cache (H200: 1.54 → 1.34 ms a layer at 2048/256)
_UNIT_SPREAD = -2
_UNIT_CHUNK = 512  # a head's sorted samples a program of the units' counting sort (H200: 512
# and 256 beat 1024 by 1-2 % of the layer)
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


@dataclass(frozen=True)
class UnitOrder:
    """Where the units' self samples lie in the heads' ``Y(g, g)``, for units that do not
    overlap (:func:`unit_order`): the units' sorted samples are then the heads' sorted ones
    grouped by unit, with no sort of their own.

    ``unit`` ``[g(g+1)/2]`` uint8 or int16: the unit of each self sample in query-major
    order (the number of units for rows of none); ``sizes`` ``[U]`` int32: each unit's
    ``|Y(g, g')|``.
    """

    unit: torch.Tensor
    sizes: torch.Tensor

    def map(self, move: Callable[[torch.Tensor], torch.Tensor]) -> UnitOrder:
        """The same order with both tensors moved by ``move`` (e.g. to a device)."""
        return UnitOrder(move(self.unit), move(self.sizes))


def unit_order(units: Sequence[tuple[int, int]], gen_len: int) -> UnitOrder | None:
    """:class:`UnitOrder` of the row ranges ``units`` of a ``gen_len``-row answer (host
    tensors), or None when two units share a row.

    Examples
    --------
    >>> order = unit_order([(2, 3), (0, 2)], 3)  # rows 0-1 are unit 1, row 2 unit 0
    >>> order.unit.tolist()  # samples of row 0 (1), row 1 (2), row 2 (3)
    [1, 1, 1, 0, 0, 0]
    >>> order.sizes.tolist()
    [3, 3]
    """
    row_unit = np.full(gen_len, len(units), dtype=np.int64)
    for u, (a, b) in enumerate(units):
        if (row_unit[a:b] != len(units)).any():
            return None
        row_unit[a:b] = u
    sizes = [(b * (b + 1) - a * (a + 1)) // 2 for a, b in units]  # |Y(g, g')|
    kind = torch.uint8 if len(units) < 256 else torch.int16
    per_sample = np.repeat(row_unit, np.arange(1, gen_len + 1))  # [g(g+1)/2]
    return UnitOrder(torch.from_numpy(per_sample).to(kind), torch.tensor(sizes, dtype=torch.int32))


def _units_from_heads(
    ys: torch.Tensor, order: torch.Tensor, placed: UnitOrder, rows: UnitRows
) -> SelfSamples:
    """The units' prepared self samples from the heads' sorted ones: ``ys`` ``[H, M]`` sorted,
    ``order`` ``[H, M]`` where each was in query-major order. Grouped by unit in the heads'
    order (a counting sort: ``unit_counts_kernel``, ``unit_scatter_kernel``), each unit's
    samples are its sorted ``Y(g, g')``, the values :func:`prepared_self` of the gathered
    samples sorts to; the rows are padded with ``+inf`` as ``prepared_self`` pads them."""
    import triton

    from rcstat.attribution._fused_triton import unit_counts_kernel, unit_scatter_kernel

    heads, samples = ys.shape
    units, width = rows.index.shape
    groups = triton.next_power_of_2(units + 1)  # the units and rows of none
    chunks = -(-samples // _UNIT_CHUNK)
    device = ys.device
    counts = torch.empty(heads, chunks, groups, dtype=torch.int32, device=device)
    padded = torch.full((units * heads, width), torch.inf, device=device)  # [U·H, Ymax]
    with on_device(device):
        unit_counts_kernel[(heads, chunks)](
            order, order.stride(0), placed.unit, samples, counts, chunks,
            GROUPS=groups, BLOCK=_UNIT_CHUNK,
        )  # fmt: skip
        # before[h, c, u] − first[h, c, u]: the unit's samples in earlier chunks, less the
        # chunk's samples of smaller units
        offset = counts.cumsum(1, dtype=torch.int32) - counts.cumsum(2, dtype=torch.int32)
        unit_scatter_kernel[(heads, chunks)](
            ys, ys.stride(0), order, order.stride(0), placed.unit, samples, offset, chunks,
            units, heads, padded, padded.stride(0), GROUPS=groups, BLOCK=_UNIT_CHUNK,
        )  # fmt: skip
    count = placed.sizes[:, None].expand(units, heads).contiguous().view(-1)  # [U·H]
    return prepared_sorted(padded, count, spread=_UNIT_SPREAD)


def fused_attribution(
    block: torch.Tensor,
    prompt_len: int,
    segments: torch.Tensor,
    rows: UnitRows,
    params: SoftmaxParams,
    *,
    rank_heads: bool = True,
    placed: UnitOrder | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """``(E, t, attention)`` of one layer's generation block ``[H, |g|, m + |g|]``.

    ``E`` ``[H]`` float64: ``E(X(p, g), Y(g, g))`` per head (None without ``rank_heads``: the
    heads' self samples are then not even sorted); ``t`` ``[U, H, m]`` float64: the
    key-level expected RC ``t_h(g', i)`` of every unit over the prompt keys; ``attention``
    ``[U, m]`` float32: the post-softmax weight on each prompt key, summed over heads and
    averaged over the unit's rows. ``segments`` is :func:`row_segments` on the block's device
    and ``rows`` the units' :class:`~rcstat.stats.UnitRows` there; ``placed`` (units that
    do not overlap, with ``rank_heads``) lets the units' samples come from the heads' sort.
    """
    from rcstat.attribution._fused_triton import attribution_kernel
    from rcstat.capture._softmax_triton import row_lse_kernel

    heads, gen_len, _ = block.shape
    units = rows.index.shape[0]
    device = block.device
    softcap = params.softcap is not None
    window = params.sliding_window is not None
    softmax = (params.scaling, params.softcap or 1.0, params.sliding_window or 0)
    lse = torch.empty(heads, gen_len, dtype=torch.float32, device=device)
    tiles = -(-prompt_len // _BLOCK_I)
    ranked = torch.empty(heads, segments.shape[0], tiles, dtype=torch.float64, device=device)
    per_key = torch.empty(units, heads, prompt_len, dtype=torch.float64, device=device)
    weight = torch.empty(units, heads, prompt_len, dtype=torch.float32, device=device)
    unit: SelfSamples | None = None
    if rank_heads:
        ys, count, order = sorted_self(self_samples(block, prompt_len), None)  # [H, M]
    # three branches: the rows' normalisers, the units' samples, the heads' preparation
    normalisers, side = fork(device, 0), fork(device, 1)
    with on(normalisers), on_device(device):
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
    with on(side):
        if rank_heads and placed is not None:
            unit = _units_from_heads(ys, order, placed, rows)
        if unit is None:
            y, valid = unit_self_samples(block, rows)  # [U, H, Y]
            unit = prepared_self(
                y.reshape(units * heads, -1), valid.reshape(units * heads, -1),
                spread=_UNIT_SPREAD,
            )  # fmt: skip
    # without the heads' search the kernel never reads their samples: the units' stand in
    head = prepared_sorted(ys, count) if rank_heads else unit  # running sums split
    join(device, normalisers, side)
    with on_device(device):
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
