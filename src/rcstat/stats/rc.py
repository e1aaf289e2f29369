"""Public RC statistics on batched sample sets (docs/definitions.md).

Every function takes ``x`` (cross-contextualization samples) and ``y`` (self-contextualization
samples) along the last axis, with any broadcastable leading batch shape (layers, heads, spans,
...), and optional boolean masks ``x_valid`` / ``y_valid`` for ragged sets. Results have the
broadcast batch shape and dtype float64. One private kernel (``_kernel.rc_integrals``)
computes the exact values in ``O(N log N)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import rcstat.stats._gpu as _gpu
from rcstat.stats._kernel import rc_integrals
from rcstat.stats._validate import check_samples, raise_if_not_finite

# Rows are processed in chunks of at most this many samples, to bound temporary memory
# (about 40 bytes per sample).
_CHUNK_SAMPLES = 1 << 25


@dataclass(frozen=True)
class RCStatistics:
    """Expected RC, its bounds and ``mean(x) - mean(y)`` for a batch of sample-set pairs
    (float64, batch shape). ``lower`` is None when it was not asked for (``lower=False``)."""

    expected: torch.Tensor
    upper: torch.Tensor
    lower: torch.Tensor | None
    mean_gap: torch.Tensor

    @property
    def reverse(self) -> torch.Tensor:
        """``E(y, x) = E(x, y) - (mean(x) - mean(y))``, the reverse RC ``E[max(Y - X, 0)]``."""
        return (self.expected - self.mean_gap).clamp_min(0.0)

    @property
    def normalized(self) -> torch.Tensor:
        """Scale-free RC ``E(x, y) / (E(x, y) + E(y, x))`` in ``[0, 1]`` (0.5 when both are 0).

        The share of ``E|X - Y|`` contributed by pairs where the cross sample is larger;
        invariant to shifting and to scaling both sets by ``s > 0``.
        """
        return _share(self.expected, self.reverse)


def _share(expected: torch.Tensor, reverse: torch.Tensor) -> torch.Tensor:
    """``E / (E + E_reverse)``, 0.5 where both are 0."""
    total = expected + reverse
    ratio = expected / total.clamp_min(torch.finfo(total.dtype).tiny)
    return torch.where(total > 0, ratio, 0.5)


def _rows(
    x: torch.Tensor,
    y: torch.Tensor,
    x_valid: torch.Tensor | None,
    y_valid: torch.Tensor | None,
    check_finite: bool,
) -> tuple[torch.Size, torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor | None]:
    """Validate, broadcast the batch shapes and flatten to ``[R, n]`` / ``[R, m]`` rows."""
    x, xv = check_samples("x", x, x_valid, check_finite=check_finite)
    y, yv = check_samples("y", y, y_valid, check_finite=check_finite)
    if x.device != y.device:
        raise ValueError(f"x is on {x.device} but y is on {y.device}; put both on one device")
    try:
        batch = torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    except RuntimeError as err:
        raise ValueError(
            f"batch shapes of x {tuple(x.shape[:-1])} and y {tuple(y.shape[:-1])} do not broadcast"
        ) from err
    xv = None if xv is None else _flat(xv, batch)
    yv = None if yv is None else _flat(yv, batch)
    return batch, _flat(x, batch), xv, _flat(y, batch), yv


def _flat(values: torch.Tensor, batch: torch.Size) -> torch.Tensor:
    """Broadcast to ``[*batch, n]`` and flatten to contiguous rows ``[R, n]``."""
    n = values.shape[-1]
    return values.expand(*batch, n).reshape(-1, n).contiguous()


def _rows_of(valid: torch.Tensor | None, start: int, step: int) -> torch.Tensor | None:
    return None if valid is None else valid[start : start + step]


def _masked_mean(values: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    if valid is None:
        return values.sum(-1, dtype=torch.float64) / values.shape[-1]
    return torch.where(valid, values.double(), 0.0).sum(-1) / valid.sum(-1)


def rc_statistics(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
    check_finite: bool = True,
    lower: bool = True,
) -> RCStatistics:
    """Exact expected RC and both bounds of Theorem 3.6 from one sort.

    Parameters
    ----------
    x
        Cross-contextualization samples ``[..., n]`` (e.g. the scores of generated queries
        against prompt keys).
    y
        Self-contextualization samples ``[..., m]``.
    x_valid, y_valid
        Optional boolean masks of the same shapes marking real samples.
    check_finite
        Raise on NaN / inf samples (default). The scan costs one device synchronisation;
        pass False only when the values were checked already (the analysis checks the
        captured scores once per forward pass). Unchecked non-finite samples give
        non-finite results (never finite wrong ones).
    lower
        Compute the lower bound ``a`` (default). It needs the order of all of ``x``; on a
        CUDA device with Triton installed, ``lower=False`` with dense ``x`` takes a path
        that never sorts ``x`` (each cross sample is ranked among the sorted ``y``; ``A``
        comes from one crossing point per set), and ``lower`` is then None.

    Returns
    -------
    RCStatistics
        ``expected``, ``upper`` and ``lower``, each float64 with the broadcast batch shape.

    Notes
    -----
    ``E = (1/nm) Σ_a Σ_b max(x_a - y_b, 0) = ∫ F_y (1 - F_x) dt`` (eq. 6),
    ``A = ∫ min(F_y, 1 - F_x) dt`` (eq. 4), ``a = ∫ max(F_y - F_x, 0) dt`` (eq. 5);
    ``0 <= a <= E <= A``.

    Examples
    --------
    >>> import torch
    >>> s = rc_statistics(torch.tensor([0.0, 2.0]), torch.tensor([1.0]))
    >>> float(s.expected), float(s.upper), float(s.lower)
    (0.5, 0.5, 0.5)
    """
    if not lower and x_valid is None and _gpu.available(x, y):
        return _dense_gpu(x, y, y_valid, check_finite)
    batch, x, xv, y, yv = _rows(x, y, x_valid, y_valid, check_finite)
    per_row = x.shape[-1] + y.shape[-1]
    step = max(1, _CHUNK_SAMPLES // per_row)
    parts = [
        rc_integrals(x[i : i + step], _rows_of(xv, i, step), y[i : i + step], _rows_of(yv, i, step))
        for i in range(0, x.shape[0], step)
    ]
    expected, upper, bound = (torch.cat([p[k] for p in parts]).reshape(batch) for k in range(3))
    mean_gap = (_masked_mean(x, xv) - _masked_mean(y, yv)).reshape(batch)
    return RCStatistics(
        expected=expected, upper=upper, lower=bound if lower else None, mean_gap=mean_gap
    )


def _dense_gpu(
    x: torch.Tensor, y: torch.Tensor, y_valid: torch.Tensor | None, check_finite: bool
) -> RCStatistics:
    """:func:`rc_statistics` without the lower bound on CUDA (``rcstat.stats._gpu``)."""
    batch, x, _, y, yv = _rows(x, y, None, y_valid, check_finite=False)
    return gpu_statistics(x[:, None, :], y, yv, batch, check_finite, "x or y")  # x [R, 1, n]


def gpu_statistics(
    x: torch.Tensor,
    y: torch.Tensor,
    y_valid: torch.Tensor | None,
    batch: torch.Size,
    check_finite: bool,
    what: str,
) -> RCStatistics:
    """E, A and the mean gap of dense row views ``x [R, A, B]`` on CUDA, shaped ``batch``.

    With ``check_finite``, non-finite samples (which make the float64 sums non-finite: no
    extra pass over ``x``) raise a ``ValueError`` naming ``what``.
    """
    expected, upper, gap = _gpu.dense_statistics(x, y, y_valid)
    if check_finite:
        raise_if_not_finite(gap, what)
    return RCStatistics(
        expected=expected.reshape(batch),
        upper=upper.reshape(batch),
        lower=None,
        mean_gap=gap.reshape(batch),
    )


def expected_rc(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact expected relative contextualization ``E[max(X - Y, 0)]`` (paper eq. 6).

    ``E(x, y) = (1/(n·m)) Σ_a Σ_b max(x_a - y_b, 0) = ∫ F_y(t) (1 - F_x(t)) dt``, computed
    exactly in ``O((n + m) log(n + m))`` instead of the paper's ``O(|p||g|³)``. Arguments as in
    :func:`rc_statistics`; returns float64 with the broadcast batch shape.

    Examples
    --------
    >>> import torch
    >>> float(expected_rc(torch.tensor([3.0, 1.0]), torch.tensor([0.0, 2.0])))  # (3+1+1+0)/4
    1.25
    """
    return rc_statistics(x, y, x_valid=x_valid, y_valid=y_valid).expected


def rc_upper_bound(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Overlap-area upper bound ``A = ∫ min(F_y, 1 - F_x) dt >= E`` (Theorem 3.6, eq. 4).

    This is what the paper's Algorithm 1 computes; here it is exact (no midpoint grid).
    Arguments as in :func:`rc_statistics`.

    Examples
    --------
    >>> import torch
    >>> float(rc_upper_bound(torch.tensor([3.0, 1.0]), torch.tensor([0.0, 2.0])))
    1.5
    """
    return rc_statistics(x, y, x_valid=x_valid, y_valid=y_valid).upper


def rc_lower_bound(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Lower bound ``a = ∫ max(F_y - F_x, 0) dt <= E`` (Theorem 3.6, eq. 5).

    Arguments as in :func:`rc_statistics`.

    Examples
    --------
    >>> import torch
    >>> float(rc_lower_bound(torch.tensor([3.0, 1.0]), torch.tensor([0.0, 2.0])))
    1.0
    """
    lower = rc_statistics(x, y, x_valid=x_valid, y_valid=y_valid).lower
    assert lower is not None  # asked for by default
    return lower


def normalized_rc(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_valid: torch.Tensor | None = None,
    y_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scale-free RC in ``[0, 1]``: ``E(x, y) / (E(x, y) + E(y, x))``.

    The share of ``E|X - Y|`` contributed by pairs where the cross sample exceeds the self
    sample. It is invariant to shifting and to scaling both sets by ``s > 0``, so it compares
    heads and models whose raw scores live on different scales. ``E(y, x)`` needs no second
    sort: ``E(x, y) - E(y, x) = mean(x) - mean(y)``. When ``x`` and ``y`` are the same constant
    (``E|X - Y| = 0``) the result is 0.5.

    Examples
    --------
    >>> import torch
    >>> round(float(normalized_rc(torch.tensor([3.0, 1.0]), torch.tensor([0.0, 2.0]))), 4)
    0.8333
    """
    return rc_statistics(x, y, x_valid=x_valid, y_valid=y_valid).normalized


def expected_rc_shared(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_valid: torch.Tensor | None = None,
    check_finite: bool = True,
) -> torch.Tensor:
    """Exact ``E(x_r, y)`` for many small sample sets ``x_r`` that share one ``y``.

    The KV-cache press scores every prompt token ``i`` against the same window:
    ``s_i = E(X({i}, ĝ), Y(ĝ, ĝ))`` (paper eq. 9). Sorting ``y`` once and searching each ``x``
    in it gives ``Σ_b max(x - y_b, 0) = c(x)·x - S(c(x))`` (``c`` = number of ``y`` below
    ``x``, ``S`` = prefix sums of the sorted ``y``): ``O(k n log m)`` for ``k`` sets of ``n``,
    and ``x`` itself is never sorted (long ``x`` sets against short ``y`` sets cost one
    binary search per sample).

    Parameters
    ----------
    x
        ``[..., k, n]``: ``k`` sample sets of ``n`` samples each.
    y
        ``[..., m]``: the shared sample set (same leading shape as ``x`` without ``k``).
    y_valid
        Optional boolean mask of ``y``'s shape marking its real samples (ragged ``y`` sets,
        e.g. the causal self samples of each query row); every set needs one.
    check_finite
        Scan for NaN / inf (one device synchronisation); pass False only when the values were
        checked already (the capture checks every forward pass).

    Returns
    -------
    torch.Tensor
        ``[..., k]`` float64.

    Examples
    --------
    >>> import torch
    >>> expected_rc_shared(torch.tensor([[3.0, 1.0], [0.0, 0.0]]), torch.tensor([0.0, 2.0]))
    tensor([1.2500, 0.0000], dtype=torch.float64)
    """
    # on the Triton path the sums carry the finiteness check: no scan of the samples
    fast = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and _gpu.available(x, y)
    x, _ = check_samples("x", x, None, check_finite=check_finite and not fast)
    y, y_valid = check_samples("y", y, y_valid, check_finite=check_finite and not fast)
    if x.dim() < 2 or x.shape[:-2] != y.shape[:-1]:
        raise ValueError(
            f"x must be [..., k, n] and y [..., m] with the same leading shape; got "
            f"{tuple(x.shape)} and {tuple(y.shape)}"
        )
    if fast:  # x ranked in place by a Triton kernel: no copy of x
        lead, (groups, samples), width = x.shape[:-2], x.shape[-2:], y.shape[-1]
        valid = None if y_valid is None else y_valid.expand(y.shape).reshape(-1, width)
        flat = _gpu.shared_expected(
            x.reshape(-1, groups, samples, 1), y.reshape(-1, width), valid
        ).reshape(*lead, groups)
        if check_finite:  # non-finite samples make their sums non-finite
            raise_if_not_finite(flat, "x or y")
        return flat
    y = y.double()
    if y_valid is None:
        count = torch.full(y.shape[:-1], y.shape[-1], dtype=torch.float64, device=y.device)
        center = y.mean(-1, keepdim=True)  # [..., 1]: subtracted for precision only
    else:
        count = y_valid.sum(-1).double()  # [...]
        center = (torch.where(y_valid, y, 0.0).sum(-1) / count)[..., None]
        y = torch.where(y_valid, y, torch.inf)  # sorted last, never below a finite x
    ys = torch.sort(y - center, dim=-1).values  # [..., m]
    prefix = torch.cat([torch.zeros_like(ys[..., :1]), ys.cumsum(-1)], dim=-1)  # [..., m + 1]
    xs = x.double().flatten(-2) - center  # [..., k·n]
    below = torch.searchsorted(ys.contiguous(), xs.contiguous())  # [..., k·n]: #{y < x}
    sums = below.double() * xs - prefix.gather(-1, below)  # Σ_b max(x - y_b, 0)
    return sums.view(x.shape).mean(-1) / count[..., None]


def normalized_rc_shared(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    y_valid: torch.Tensor | None = None,
    check_finite: bool = True,
) -> torch.Tensor:
    """Scale-free RC ``E(x_r, y) / (E(x_r, y) + E(y, x_r))`` for sets ``x_r`` sharing one ``y``.

    :func:`normalized_rc` computed the way of :func:`expected_rc_shared` (``y`` sorted once,
    ``x`` searched in it; ``E(y, x) = E(x, y) - (mean(x) - mean(y))``), for long ``x`` sets
    against short, possibly ragged ``y`` sets. Arguments as in :func:`expected_rc_shared`;
    returns ``[..., k]`` float64 in ``[0, 1]``.

    Examples
    --------
    >>> import torch
    >>> normalized_rc_shared(torch.tensor([[3.0, 1.0]]), torch.tensor([0.0, 2.0]))
    tensor([0.8333], dtype=torch.float64)
    """
    expected = expected_rc_shared(x, y, y_valid=y_valid, check_finite=check_finite)
    valid = None if y_valid is None else y_valid.expand_as(y)
    gap = x.double().mean(-1) - _masked_mean(y, valid)[..., None]  # [..., k]
    return _share(expected, (expected - gap).clamp_min(0.0))


def markov_bound(upper: torch.Tensor | float, delta: float) -> torch.Tensor:
    """Level that RC exceeds with probability at most ``delta`` (Corollary B.1).

    By Markov's inequality and ``E[Z] <= A``: ``P(Z >= A / δ) <= δ``; returns ``A / δ``.

    Examples
    --------
    >>> float(markov_bound(0.5, 0.25))
    2.0
    """
    if not 0.0 < delta <= 1.0:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    upper_t = torch.as_tensor(upper, dtype=torch.float64)
    if bool((upper_t < 0).any()) or not bool(torch.isfinite(upper_t).all()):
        raise ValueError("upper must be finite and non-negative (an RC upper bound)")
    return upper_t / delta
