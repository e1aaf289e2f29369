"""Input checks shared by every public statistic: one place, specific ``ValueError``s."""

from __future__ import annotations

import torch


def check_samples(
    name: str, values: torch.Tensor, valid: torch.Tensor | None, *, check_finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate one batched sample set and return ``(values, valid)`` (``valid`` stays
    ``None`` when every sample is valid).

    Parameters
    ----------
    name
        The argument's name, used in error messages (``"x"`` or ``"y"``).
    check_finite
        Scan for NaN / inf and for batch entries without a valid sample (each a device
        synchronisation); skip only when the caller knows the values and masks are good.
    values
        Samples along the last axis, any leading batch shape: ``[..., n]``.
    valid
        Boolean mask of the same shape marking real samples (ragged sets), or ``None``.

    Raises
    ------
    TypeError
        If ``values`` is not a real tensor or ``valid`` is not boolean.
    ValueError
        If there is no sample axis, a batch entry has no valid sample, the mask's shape
        differs, or a valid sample is NaN or infinite.
    """
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() == 0:
        raise ValueError(f"{name} must have a sample axis (last dimension); got a scalar")
    if values.is_complex():
        raise TypeError(f"{name} must hold real scores, got {values.dtype}")
    if not values.is_floating_point():
        values = values.to(torch.float64)
    if values.shape[-1] == 0:
        raise ValueError(f"{name} is empty: the sample axis has length 0")
    if valid is None:
        if check_finite and not bool(torch.isfinite(values).all()):
            _raise_non_finite(name, ~torch.isfinite(values))
        return values, None
    if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool:
        raise TypeError(f"{name}_valid must be a boolean torch.Tensor")
    if valid.shape != values.shape:
        raise ValueError(
            f"{name}_valid has shape {tuple(valid.shape)} but {name} has shape "
            f"{tuple(values.shape)}; they must match"
        )
    valid = valid.to(values.device)
    if not check_finite:  # the remaining checks read values: one synchronisation each
        return values, valid
    empty = valid.sum(-1) == 0
    if bool(empty.any()):
        entry = tuple(int(i) for i in empty.nonzero()[0])
        raise ValueError(f"{name} has no valid sample in batch entry {entry}")
    bad = valid & ~torch.isfinite(values)
    if bool(bad.any()):
        _raise_non_finite(name, bad)
    return values, valid


def _raise_non_finite(name: str, bad: torch.Tensor) -> None:
    index = tuple(int(i) for i in bad.nonzero()[0])
    raise ValueError(
        f"{name} contains a non-finite value (NaN or inf) at index {index}; "
        "attention scores must be finite"
    )


def raise_if_not_finite(values: torch.Tensor, what: str) -> None:
    """Raise ``ValueError`` if a float64 sum over samples is NaN or inf.

    A float64 sum of float32 (or narrower) samples is finite exactly when every sample is,
    so checking per-set sums replaces a scan of the samples (one synchronisation).
    """
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        _raise_non_finite(what, bad)
