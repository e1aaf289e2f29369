"""Triton pieces of the model's softmax, shared by the kernels that rebuild attention weights
from captured raw scores (optional; see :mod:`rcstat.capture.probs` for the tensor version).

- ``logits``: what a layer's softmax sees of raw scores ``s``: ``scaling · s``, soft-capped
  as ``cap · tanh(scaling · s / cap)`` with ``tanh(v) = 1 − 2 / (exp(2v) + 1)`` (finite for
  every finite ``v``).
- ``row_lse_kernel``: the log of each generated row's softmax normaliser, by one online pass
  over the row's visible keys.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def logits(s, scaling, softcap, HAS_SOFTCAP: tl.constexpr):
    """What the layer's softmax sees of raw scores ``s``."""
    z = s * scaling
    if HAS_SOFTCAP:
        z = (1.0 - 2.0 / (tl.exp(2.0 * z / softcap) + 1.0)) * softcap
    return z


@triton.jit(do_not_specialize_on_alignment=("prompt_len", "rows", "window"))
def row_lse_kernel(
    block_ptr,  # [H, G, m + G] raw scores of the generated rows
    s_h,
    s_j,
    s_i,
    prompt_len,
    lse_ptr,  # [H, G] float32
    rows,
    scaling,
    softcap,
    window,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """``lse[h, j] = log Σ_i exp(z(h, j, i))`` over the keys ``i`` row ``j`` (at position
    ``m + j``) sees: ``i <= m + j`` and, with a window, ``m + j − i < window``."""
    h = tl.program_id(0)
    j = tl.program_id(1)
    row = block_ptr + h.to(tl.int64) * s_h + j.to(tl.int64) * s_j
    pos = prompt_len + j
    lo = pos * 0
    if HAS_WINDOW:
        lo = tl.maximum(pos - window + 1, 0)
    offsets = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    for start in range(lo, pos + 1, BLOCK):
        k = start + offsets
        visible = k <= pos
        s = tl.load(row + k.to(tl.int64) * s_i, mask=visible, other=0.0).to(tl.float32)
        z = tl.where(visible, logits(s, scaling, softcap, HAS_SOFTCAP), float("-inf"))
        new_top = tl.maximum(top, tl.max(z, 0))
        weights = tl.where(visible, tl.exp(z - new_top), 0.0)
        total = total * tl.exp(top - new_top) + tl.sum(weights, 0)
        top = new_top
    tl.store(lse_ptr + h * rows + j, top + tl.log(total))
