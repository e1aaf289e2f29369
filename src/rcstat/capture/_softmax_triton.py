"""Triton pieces of the model's softmax, shared by the kernels that rebuild attention weights
from captured raw scores (optional; see :mod:`rcstat.capture.probs` for the tensor version).

- ``logits``: what a layer's softmax sees of raw scores ``s``: ``scaling · s``, soft-capped
  as ``cap · tanh(scaling · s / cap)`` with ``tanh(v) = 1 − 2 / (exp(2v) + 1)`` (finite for
  every finite ``v``).
- ``window_start``, ``online_step``: the first key a row sees, and one tile of an online
  softmax over a row (the running maximum, the factor that rescales what was summed under
  the old maximum, the tile's weights under the new one).
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


@triton.jit
def window_start(pos, window, HAS_WINDOW: tl.constexpr):
    """The first key a query at position ``pos`` sees (``pos − i < window`` with a window)."""
    lo = pos * 0
    if HAS_WINDOW:
        lo = tl.maximum(pos - window + 1, 0)
    return lo


@triton.jit
def online_step(s, visible, top, scaling, softcap, HAS_SOFTCAP: tl.constexpr):
    """``(new_top, rescale, weights)`` for a tile of raw scores ``s`` (``visible`` keys) of a
    row whose running maximum is ``top``: sums taken under ``top`` times ``rescale`` are
    under ``new_top``, and ``weights = exp(z − new_top)`` (0 on hidden keys)."""
    z = tl.where(visible, logits(s, scaling, softcap, HAS_SOFTCAP), float("-inf"))
    new_top = tl.maximum(top, tl.max(z, 0))
    return new_top, tl.exp(top - new_top), tl.where(visible, tl.exp(z - new_top), 0.0)


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
    offsets = tl.arange(0, BLOCK)
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    for start in range(window_start(pos, window, HAS_WINDOW), pos + 1, BLOCK):
        k = start + offsets
        visible = k <= pos
        s = tl.load(row + k.to(tl.int64) * s_i, mask=visible, other=0.0).to(tl.float32)
        top, rescale, weights = online_step(s, visible, top, scaling, softcap, HAS_SOFTCAP)
        total = total * rescale + tl.sum(weights, 0)
    tl.store(lse_ptr + h * rows + j, top + tl.log(total))
