"""The one kernel behind every RC statistic: step-CDF integrals from two sorted samples.

For samples ``x`` (``n``) and ``y`` (``m``), uniform over their multisets, with step CDFs
``F_x``, ``F_y`` and survival ``S_x = 1 - F_x``:

- expected RC  ``E = ∫ F_y S_x dt  = (1/nm) Σ_a Σ_b max(x_a - y_b, 0)``   (paper eq. 6)
- upper bound  ``A = ∫ min(F_y, S_x) dt``                                 (Theorem 3.6, eq. 4)
- lower bound  ``a = ∫ max(F_y - F_x, 0) dt``                             (Theorem 3.6, eq. 5)

Algorithm (exact, ``O(n log n + m log n)``; no merged sort, no pairwise sums). Sort both
samples. Let ``G(t) = ∫_t^∞ S_x = (1/n) Σ_a max(x_a - t, 0)``: with prefix sums ``P`` of the
sorted ``x`` and ``d = #{x <= t}``, ``G(t) = (P[n] - P[d] - (n - d) t) / n``. ``F_y`` is
constant, ``c = (b+1)/m``, on each interval ``[y_(b), y_(b+1))`` of the sorted ``y``, and on
it every integrand has a closed form in ``G`` at the interval's ends and at one order statistic
of ``x`` (where ``F_x`` crosses ``c`` or ``1 - c``):

- ``E_b = c (G(L) - G(R))``
- ``A_b = c (V - L) + G(V) - G(R)`` with ``V = clamp(x_(⌊(1-c) n⌋), L, R)``
- ``a_b = (c - 1)(U - L) + G(L) - G(U)`` with ``U = clamp(x_(⌈c n⌉ - 1), L, R)``

Below ``min(y)`` all integrands vanish (``F_y = 0``); the last interval ends at
``max(max(y), max(x))``, beyond which ``S_x = 0``. ``G`` at ``x_(j)`` needs no search
(``d = j`` is a valid split, ties contribute 0). So the only ``O(n log n)`` step is sorting
``x``; the ``m`` searches of ``y`` in ``x`` and everything else are cheap. Values are centred on
the median of ``y`` (every statistic is shift-invariant) and accumulated in float64.

On CPU the sort uses numpy (vectorised quicksort, ~20× faster than ``torch.sort`` there); on
other devices ``torch.sort``.
"""

from __future__ import annotations

import numpy as np
import torch


def _sort_rows(values: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Sort each row ascending with invalid entries as ``+inf`` at the end. ``[R, n]``."""
    if values.dtype in (torch.float16, torch.bfloat16):
        values = values.float()  # exact; numpy has no bfloat16
    filled = values if valid is None else torch.where(valid, values, torch.inf)
    if filled.device.type == "cpu":
        return torch.from_numpy(np.sort(filled.detach().numpy(), axis=-1))
    return torch.sort(filled, dim=-1).values


def _row_cumsum(values: torch.Tensor, flat: bool | None = None) -> torch.Tensor:
    """Inclusive cumulative sums of each row of ``[R, N]`` (float64).

    On CUDA (``flat=None``) one flat scan replaces ``R`` row scans: an innermost-dimension
    scan of a few long rows parallelises badly on GPUs (60% of the kernel's time before).
    Each row's first element has the previous row's total subtracted, so the running sum
    restarts at 0 at every row and keeps the magnitude of one row; the rounding drift carried
    over from earlier rows (the scan's row total minus the subtracted one) is removed too.
    """
    if flat is None:
        flat = values.device.type == "cuda"
    if not flat:
        return values.cumsum(-1)
    rows, width = values.shape
    totals = values.sum(-1)  # [R]
    shifted = values.clone()
    shifted[1:, 0] -= totals[:-1]
    running = shifted.reshape(-1).cumsum_(0).view(rows, width)  # [R, N]
    residual = torch.cat([running.new_zeros(1), running[:-1, -1] - totals[:-1]])
    return running.sub_(residual.unsqueeze(-1))


def _count(valid: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """Valid samples per row, ``[R, 1]`` int64 (``None`` = all valid)."""
    if valid is None:
        return torch.full((like.shape[0], 1), like.shape[-1], dtype=torch.long, device=like.device)
    return valid.sum(-1, keepdim=True)


def rc_integrals(
    x: torch.Tensor,
    x_valid: torch.Tensor | None,
    y: torch.Tensor,
    y_valid: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return ``(E, A, a)`` in float64 for rows of samples.

    Parameters
    ----------
    x, x_valid
        ``[R, n]`` samples and boolean mask, ``None`` when all are valid (every row has a
        valid, finite sample).
    y, y_valid
        ``[R, m]`` samples and boolean mask, likewise.
    """
    dtype = torch.promote_types(x.dtype, y.dtype)
    xs = _sort_rows(x.to(dtype), x_valid)  # [R, N], +inf padding
    ys = _sort_rows(y.to(dtype), y_valid)  # [R, M]
    rows, width = xs.shape
    n = _count(x_valid, xs)  # [R, 1] int64
    m = _count(y_valid, ys)
    d = torch.searchsorted(xs, ys, right=True)  # [R, M]: #{x <= y_(b)}

    center = ys.gather(-1, (m - 1) // 2).double()  # [R, 1] median of y
    xc = xs.double().sub_(center)  # [R, N] centred (+inf padding)
    if x_valid is not None:
        xc.masked_fill_(torch.arange(width, device=xs.device) >= n, 0.0)  # 0-padded
    cums = _row_cumsum(xc)  # [R, N] inclusive

    def prefix(count: torch.Tensor) -> torch.Tensor:
        """Sum of the ``count`` smallest (centred) x of each row."""
        return torch.where(count > 0, cums.gather(-1, (count - 1).clamp(min=0)), 0.0)

    total = prefix(n)  # [R, 1]
    n64 = n.double()

    def tail(split: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``G(t)`` given ``split`` = a count of x with ``x[:split] <= t <= x[split:]``."""
        return (total - prefix(split) - (n - split).double() * t) / n64

    yc = ys.double() - center  # [R, M] (+inf beyond m)
    b = torch.arange(ys.shape[-1], device=ys.device).expand(rows, -1)  # interval index
    in_range = None if y_valid is None else b < m
    x_max = xc.gather(-1, n - 1)  # [R, 1]
    left = yc if in_range is None else torch.where(in_range, yc, 0.0)
    g_left = tail(d, left)
    if in_range is not None:
        g_left = torch.where(in_range, g_left, 0.0)
    last = b == m - 1
    right = torch.where(last, torch.maximum(left, x_max), left.roll(-1, dims=-1))
    g_right = torch.where(last, 0.0, g_left.roll(-1, dims=-1))
    c = (b + 1).double() / m.double()  # F_y on the interval

    def order_statistic(j: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``clamp(x_(j), L, R)`` and ``G`` there."""
        j = j.clamp(0, width - 1)
        t = xc.gather(-1, j)
        inside = tail(j, t)
        point = torch.minimum(torch.maximum(t, left), right)
        g = torch.where(t <= left, g_left, torch.where(t >= right, g_right, inside))
        return point, g

    v, g_v = order_statistic(((m - b - 1) * n) // m)  # F_x passes 1 - c
    u, g_u = order_statistic(((b + 1) * n + m - 1) // m - 1)  # F_x reaches c

    expected = c * (g_left - g_right)
    upper = c * (v - left) + g_v - g_right
    lower = (c - 1.0) * (u - left) + g_left - g_u
    parts = [expected, upper, lower]
    if in_range is not None:
        parts = [torch.where(in_range, part, 0.0) for part in parts]
    return parts[0].sum(-1), parts[1].sum(-1), parts[2].sum(-1)
