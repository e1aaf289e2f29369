"""Triton kernels of the grounding features of one layer (optional; see ``rows_gpu``).

- ``rows_kernel``: one program per (sequence ``b``, head ``h``, captured row ``j``). One
  online-softmax pass over the row's visible keys gives the softmax normaliser and, rescaled
  as the running maximum moves, the unnormalised weight on the context keys, on the response
  keys and on the matched context keys; the weight on the row's own key is read at the end.
  With ``HAS_RC`` (compiled without it when no head is flagged: the float64 pairwise loop
  costs registers, and so occupancy, even where it never runs), for the heads flagged for
  RC, the scale-free RC of the row's raw scores
  ``X`` = the context keys against ``Y`` = the response keys ``first .. first + j`` is
  ``S / (S + S')`` with ``S = Σ_x Σ_y max(x − y, 0)`` summed tile by tile (pairs of ``X`` and
  ``Y`` tiles, float32 within a tile, float64 across) and ``S' = S − (|Y|·Σx − |X|·Σy)``
  (``max(a, 0) − max(−a, 0) = a``); 0.5 where both are 0.
- ``copied_kernel``: one program per (response unit, tile of context keys, group of heads)
  sums the attention weight of the group's heads on the matched keys over the unit's rows,
  row after row and head after head, from the normaliser the first kernel stored. Each group
  writes its own partial sums (no atomics: the sums do not depend on the order programs run
  in); the caller adds the groups up. Groups exist to give the card enough programs when a
  pass has few units and keys.

Soft-capping as in ``rcstat.capture._softmax_triton.logits``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from rcstat.capture._softmax_triton import logits, online_step, window_start


@triton.jit
def rows_kernel(
    scores_ptr,  # [B, H, R, T] float32 raw scores
    s_b,
    s_h,
    s_r,
    s_t,
    pos_ptr,  # [B, W] int64: absolute position of each row
    meta_ptr,  # [B, 4] int64: context start, context end, first response key, rows G
    flags_ptr,  # [H] int32: 1 where the head's RC is wanted
    match_ptr,  # [B, W, K] uint8: context key k0 + k holds the row's token
    features_ptr,  # [3, B, H, W] float32: rc, lookback, log of the own-key weight
    copy_ptr,  # [B, H, W] float32
    norm_ptr,  # [B, H, W, 2] float32: the running maximum and the normaliser
    B,
    H,
    W,
    K,
    k0,
    scaling,
    softcap,
    window,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_MATCH: tl.constexpr,
    HAS_RC: tl.constexpr,
    BLOCK: tl.constexpr,
    BX: tl.constexpr,
    BY: tl.constexpr,
):
    bh = tl.program_id(0)
    j = tl.program_id(1)
    b = bh // H
    h = bh % H
    row = scores_ptr + b.to(tl.int64) * s_b + h.to(tl.int64) * s_h + j.to(tl.int64) * s_r
    pos = tl.load(pos_ptr + b * W + j)
    c0 = tl.load(meta_ptr + b * 4)
    c1 = tl.load(meta_ptr + b * 4 + 1)
    first = tl.load(meta_ptr + b * 4 + 2)
    gen = tl.load(meta_ptr + b * 4 + 3)
    lo = window_start(pos, window, HAS_WINDOW)
    offsets = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    on_context = tl.zeros((), tl.float32)
    on_response = tl.zeros((), tl.float32)
    on_match = tl.zeros((), tl.float32)
    match_row = match_ptr + (b * W + j).to(tl.int64) * K
    for start in range(lo, pos + 1, BLOCK):
        k = start + offsets
        visible = k <= pos
        s = tl.load(row + k * s_t, mask=visible, other=0.0)
        top, scale, e = online_step(s, visible, top, scaling, softcap, HAS_SOFTCAP)
        in_context = (k >= c0) & (k < c1)
        total = total * scale + tl.sum(e, 0)
        on_context = on_context * scale + tl.sum(tl.where(in_context, e, 0.0), 0)
        on_response = on_response * scale + tl.sum(tl.where(k >= first, e, 0.0), 0)
        if HAS_MATCH:
            hit = tl.load(match_row + (k - k0), mask=visible & in_context, other=0)
            on_match = on_match * scale + tl.sum(tl.where(hit != 0, e, 0.0), 0)
    own = logits(tl.load(row + pos * s_t), scaling, softcap, HAS_SOFTCAP)
    out = (b * H + h) * W + j
    plane = B * H * W
    context_mean = on_context / total / (c1 - c0).to(tl.float32)
    response_mean = on_response / total / (j + 1).to(tl.float32)
    lookback = context_mean / tl.maximum(context_mean + response_mean, 1e-30)
    weight = tl.exp(own - top) / total
    rc = tl.full((), float("nan"), tl.float32)
    if HAS_RC and (tl.load(flags_ptr + h) != 0) & (j < gen):
        pairs = tl.zeros((), tl.float64)
        sum_x = tl.zeros((), tl.float64)
        sum_y = tl.zeros((), tl.float64)
        xs = tl.arange(0, BX)
        ys = tl.arange(0, BY)
        for x0 in range(c0, c1, BX):
            kx = x0 + xs
            x = tl.load(row + kx * s_t, mask=kx < c1, other=0.0)
            sum_x += tl.sum(x, 0).to(tl.float64)
            for y0 in range(first, first + j + 1, BY):
                ky = y0 + ys
                y = tl.load(row + ky * s_t, mask=ky <= first + j, other=0.0)
                gap = x[:, None] - y[None, :]
                inside = (kx < c1)[:, None] & (ky <= first + j)[None, :]
                pairs += tl.sum(tl.sum(tl.where(inside, tl.maximum(gap, 0.0), 0.0), 1), 0).to(
                    tl.float64
                )
        for y0 in range(first, first + j + 1, BY):
            ky = y0 + ys
            sum_y += tl.sum(tl.load(row + ky * s_t, mask=ky <= first + j, other=0.0), 0).to(
                tl.float64
            )
        n_x = (c1 - c0).to(tl.float64)
        n_y = (j + 1).to(tl.float64)
        reverse = tl.maximum(pairs - (n_y * sum_x - n_x * sum_y), 0.0)
        both = pairs + reverse
        rc = tl.where(both > 0, pairs / tl.where(both > 0, both, 1.0), 0.5).to(tl.float32)
    tl.store(features_ptr + out, rc)
    tl.store(features_ptr + plane + out, lookback)
    tl.store(features_ptr + 2 * plane + out, tl.log(tl.maximum(weight, 1e-30)))
    tl.store(copy_ptr + out, on_match / total)
    if HAS_MATCH:
        tl.store(norm_ptr + 2 * out, top)
        tl.store(norm_ptr + 2 * out + 1, total)


@triton.jit
def copied_kernel(
    scores_ptr,  # [B, H, R, T] float32 raw scores
    s_b,
    s_h,
    s_r,
    s_t,
    pos_ptr,  # [B, W] int64
    units_ptr,  # [U, 3] int64: sequence, first row, end row of each unit
    match_ptr,  # [B, W, K] uint8
    norm_ptr,  # [B, H, W, 2] float32 from rows_kernel
    copied_ptr,  # [groups, U, K] float32: Σ over the unit's rows and the group's heads
    H,
    W,
    K,
    k0,
    group_heads,
    scaling,
    softcap,
    window,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK: tl.constexpr,
):
    u = tl.program_id(0)
    offsets = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    group = tl.program_id(2)
    h0 = group * group_heads
    h1 = tl.minimum(h0 + group_heads, H)
    b = tl.load(units_ptr + 3 * u)
    keys = k0 + offsets
    acc = tl.zeros((BLOCK,), tl.float32)
    for j in range(tl.load(units_ptr + 3 * u + 1), tl.load(units_ptr + 3 * u + 2)):
        pos = tl.load(pos_ptr + b * W + j)
        live = (offsets < K) & (keys <= pos)
        if HAS_WINDOW:
            live = live & (pos - keys < window)
        hit = tl.load(match_ptr + (b * W + j) * K + offsets, mask=live, other=0) != 0
        if tl.max(hit.to(tl.int32), 0) > 0:
            for h in range(h0, h1):
                row = scores_ptr + b * s_b + h * s_h + j * s_r
                s = tl.load(row + keys * s_t, mask=hit, other=0.0)
                norm = norm_ptr + 2 * ((b * H + h) * W + j)
                e = tl.exp(logits(s, scaling, softcap, HAS_SOFTCAP) - tl.load(norm))
                acc += tl.where(hit, e / tl.load(norm + 1), 0.0)
    out = copied_ptr + (group * tl.num_programs(0) + u).to(tl.int64) * K + offsets
    tl.store(out, acc, mask=offsets < K)
