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
