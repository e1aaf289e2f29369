"""The Triton kernel of one layer's attribution quantities (optional; see ``fused``).

``attribution_kernel``: one program per (tile of prompt keys, head, segment of generated rows:
a run of rows of one answer unit, or rows of no unit; many programs keep the searches'
memory latency hidden). It reads each raw score ``x = f(i, m + j)`` of its rows and keys
once for all three quantities (the next rows' scores are loaded while a step's searches run):

- the head's ranking sum ``Σ (c(x)·x − S(c(x)))`` against the head's sorted self samples
  ``Y(g, g)``, over every row (paper eq. 6: ``n·m·E(X(p, g), Y(g, g))``);
- the unit's key-level sum ``Σ_{j ∈ g'} (c'(x)·x − S'(c'(x)))`` against the unit's sorted
  self samples ``Y(g, g')``, stored per key as ``t_h(g', i)`` (eq. 10 before the span mean);
- the unit's softmax weight on the key, ``exp(z(x) − lse_j)``, averaged over its rows (the
  attention baseline), from the row normalisers of ``row_lse_kernel``.

No atomics: each program owns its outputs, so the sums do not depend on the order programs
run in. Without ``RANK_HEADS`` (the only unit is the whole answer, whose key values give the
heads' ranking) the first search is left out.

``unit_counts_kernel`` and ``unit_scatter_kernel``: the units' sorted self samples from the
heads' sort (units that do not overlap), a counting sort by unit that keeps the heads' order
within each unit: a chunk of a head's sorted samples counts its samples of each unit, and
each sample goes to its unit's row at the samples of its unit before it (in earlier chunks,
from the counts' running sums, and earlier in its chunk).
"""

from __future__ import annotations

import triton
import triton.language as tl

from rcstat.capture._softmax_triton import logits
from rcstat.stats._triton import rank_terms

#: Sizes that change with every example: not specialised on their alignment (each new
#: combination of multiples of 16 would compile the kernel again); the strides still are.
_SIZES = (
    "prompt_len",
    "segments",
    "rows",
    "heads",
    "hy_stride",
    "ht_stride",
    "h_buckets",
    "h_prefix_stride",
    "h_steps",
    "uy_stride",
    "ut_stride",
    "u_buckets",
    "u_prefix_stride",
    "u_steps",
    "tiles",
    "window",
)


@triton.jit(do_not_specialize_on_alignment=_SIZES)
def attribution_kernel(
    block_ptr,  # [H, G, m + G] raw scores of the generated rows
    s_h,
    s_j,
    s_i,
    prompt_len,
    seg_ptr,  # [S, 4] int32: first row, end row, unit (−1: none), 1 if the head ranking counts them
    segments,
    lse_ptr,  # [H, G] float32
    rows,
    heads,
    hy_ptr,  # the heads' self samples (rcstat.stats._gpu.SelfSamples, row h)
    hy_stride,
    ht_ptr,
    ht_stride,
    h_low,
    h_scale,
    h_buckets,
    h_count,
    h_prefix,
    h_prefix_stride,
    h_center,
    h_steps,
    uy_ptr,  # the units' self samples (row u·H + h)
    uy_stride,
    ut_ptr,
    ut_stride,
    u_low,
    u_scale,
    u_buckets,
    u_count,
    u_prefix,
    u_prefix_stride,
    u_center,
    u_steps,
    head_out,  # [H, S, tiles] float64: the ranking sum of a segment's rows in a key tile
    key_out,  # [U, H, m] float64: t_h(g', i)
    att_out,  # [U, H, m] float32: the head's weight on key i, averaged over the unit's rows
    tiles,
    scaling,
    softcap,
    window,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    RANK_HEADS: tl.constexpr,
    HEAD_TABLE: tl.constexpr,
    UNIT_TABLE: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_I: tl.constexpr,
):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    keys = tile * BLOCK_I + tl.arange(0, BLOCK_I)  # [BI]
    on_key = keys < prompt_len
    base = block_ptr + h.to(tl.int64) * s_h + keys[None, :].to(tl.int64) * s_i
    first = tl.load(seg_ptr + 4 * s)
    end = tl.load(seg_ptr + 4 * s + 1)
    unit = tl.load(seg_ptr + 4 * s + 2)
    counted = tl.load(seg_ptr + 4 * s + 3)
    row = unit * heads + h
    ranked = tl.zeros((), tl.float64)
    per_key = tl.zeros([BLOCK_I], tl.float64)
    weight = tl.zeros([BLOCK_I], tl.float32)
    # the next rows' scores are read a step ahead: their load is in flight while this step's
    # searches wait on theirs
    js = first + tl.arange(0, BLOCK_J)  # [BJ]
    mask = (js < end)[:, None] & on_key[None, :]  # [BJ, BI]
    ahead = tl.load(base + js[:, None].to(tl.int64) * s_j, mask=mask, other=0.0)
    for j0 in range(first, end, BLOCK_J):
        js = j0 + tl.arange(0, BLOCK_J)  # [BJ]
        on_row = js < end
        mask = on_row[:, None] & on_key[None, :]
        x = ahead.to(tl.float32)
        after = (js + BLOCK_J < end)[:, None] & on_key[None, :]
        ahead = tl.load(base + (js + BLOCK_J)[:, None].to(tl.int64) * s_j, mask=after, other=0.0)
        if RANK_HEADS:
            if counted != 0:
                term, _ = rank_terms(
                    x, mask, h, hy_ptr, hy_stride, ht_ptr, ht_stride, h_low, h_scale, h_buckets,
                    h_count, h_prefix, h_prefix_stride, h_center, h_steps, HEAD_TABLE,
                )  # fmt: skip
                ranked += tl.sum(tl.sum(term, axis=1), axis=0)
        if unit >= 0:
            term, _ = rank_terms(
                x, mask, row, uy_ptr, uy_stride, ut_ptr, ut_stride, u_low, u_scale, u_buckets,
                u_count, u_prefix, u_prefix_stride, u_center, u_steps, UNIT_TABLE,
            )  # fmt: skip
            per_key += tl.sum(term, axis=0)
            lse = tl.load(lse_ptr + h * rows + js, mask=on_row, other=0.0)
            z = logits(x, scaling, softcap, HAS_SOFTCAP)
            seen = mask
            if HAS_WINDOW:
                seen = seen & ((prompt_len + js)[:, None] - keys[None, :] < window)
            weight += tl.sum(tl.where(seen, tl.exp(z - lse[:, None]), 0.0), axis=0)
    if unit >= 0:
        out = row.to(tl.int64) * prompt_len + keys
        count = tl.load(u_count + row).to(tl.float64)
        tl.store(key_out + out, per_key / ((end - first).to(tl.float64) * count), mask=on_key)
        tl.store(att_out + out, weight / (end - first).to(tl.float32), mask=on_key)
    tl.store(head_out + (h * segments + s) * tiles + tile, ranked)


#: The counting sort's sizes, likewise not specialised on their alignment.
_UNIT_SIZES = ("order_stride", "samples", "chunks", "ys_stride", "units", "heads", "out_stride")


@triton.jit(do_not_specialize_on_alignment=_UNIT_SIZES[:3])
def unit_counts_kernel(
    order_ptr,  # [H, M] int64: where each of a head's sorted samples was (query-major)
    order_stride,
    unit_ptr,  # [M] uint8 / int16: the unit of each sample in query-major order (U: none)
    samples,
    counts_ptr,  # [H, chunks, GROUPS] int32: the samples of each unit in a chunk
    chunks,
    GROUPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``counts[h, c, u] = #{k in chunk c : unit(order[h, k]) = u}``, chunks of ``BLOCK``
    sorted positions."""
    h = tl.program_id(0)
    chunk = tl.program_id(1)
    pos = chunk * BLOCK + tl.arange(0, BLOCK)
    inside = pos < samples
    src = tl.load(order_ptr + h.to(tl.int64) * order_stride + pos, mask=inside, other=0)
    unit = tl.load(unit_ptr + src, mask=inside, other=0).to(tl.int32)
    counts = tl.histogram(unit, GROUPS, mask=inside)  # [GROUPS]
    out = (h.to(tl.int64) * chunks + chunk) * GROUPS + tl.arange(0, GROUPS)
    tl.store(counts_ptr + out, counts)


@triton.jit(do_not_specialize_on_alignment=_UNIT_SIZES)
def unit_scatter_kernel(
    ys_ptr,  # [H, M] float32 a head's sorted self samples
    ys_stride,
    order_ptr,  # [H, M] int64
    order_stride,
    unit_ptr,  # [M] uint8 / int16 (U: no unit)
    samples,
    offset_ptr,  # [H, chunks, GROUPS] int32: before[h, c, u] − first[h, c, u] (below)
    chunks,
    units,
    heads,
    out_ptr,  # [U·H, width] float32: unit u's sorted samples of head h in row u·H + h
    out_stride,
    GROUPS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Each sample of chunk ``c`` of head ``h`` goes to ``out[u·H + h, before + rank]``:
    ``before`` = its unit's samples in earlier chunks, ``rank`` = those earlier in the chunk.
    The chunk's samples sorted by ``(unit, position)`` put unit ``u``'s at sorted positions
    ``first[h, c, u] + rank`` (``first`` = the chunk's samples of smaller units), so the
    destination is ``offset[h, c, u] + p`` for sorted position ``p``."""
    h = tl.program_id(0)
    chunk = tl.program_id(1)
    lanes = tl.arange(0, BLOCK)
    pos = chunk * BLOCK + lanes
    inside = pos < samples
    src = tl.load(order_ptr + h.to(tl.int64) * order_stride + pos, mask=inside, other=0)
    unit = tl.load(unit_ptr + src, mask=inside, other=0).to(tl.int32)
    unit = tl.where(inside, unit, GROUPS)  # past the end: after every unit
    key = tl.sort(unit * BLOCK + lanes)  # [BLOCK] by unit, then position
    by_unit = key // BLOCK
    lane = key - by_unit * BLOCK
    kept = by_unit < units  # samples of a unit (not of rows of none, not past the end)
    offset = tl.load(offset_ptr + (h.to(tl.int64) * chunks + chunk) * GROUPS + by_unit,
                     mask=kept, other=0)  # fmt: skip
    value = tl.load(ys_ptr + h.to(tl.int64) * ys_stride + chunk * BLOCK + lane, mask=kept)
    row = by_unit.to(tl.int64) * heads + h
    tl.store(out_ptr + row * out_stride + offset + lanes, value, mask=kept)
