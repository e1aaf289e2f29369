"""A grounding pass's results gathered where the pass ran, before its one copy to the host.

The capture hands back one dictionary of tensors a layer (:mod:`.features`). The measurement
needs them stacked over the layers, some summed over the layers, and each response's head
summary: the lower quantile of every head's statistic over the response's tokens
(:meth:`~rcstat.grounding.measurement.Measurement.head_features`), which sorts ``3 · L · H`` rows
of ``G`` values. On the device that sort takes a few launches while the host's numpy sort of
the ``[3, 32, 32, 255]`` features of an 8B model took about 5 ms of each call, after the pass.
"""

from __future__ import annotations

import torch

from rcstat.grounding.score import sorted_quantiles

__all__ = ["head_summaries", "stacked", "summed"]


def stacked(layers: list[dict[str, torch.Tensor]], key: str, dim: int = 0) -> torch.Tensor:
    """The ``key`` output of every layer stacked on ``dim``, on the first layer's device."""
    first = layers[0][key].device
    return torch.stack([r[key].to(first, non_blocking=True) for r in layers], dim=dim)


def summed(layers: list[dict[str, torch.Tensor]], key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The ``key`` output (``shape``) summed in float64 over the layers that return it, on
    the first such layer's device (zeros on the host when none does)."""
    found = [r[key] for r in layers if key in r]
    if not found:
        return torch.zeros(shape, dtype=torch.float64)
    first = found[0].device
    together = torch.stack([value.to(first, non_blocking=True) for value in found])
    return together.sum(0, dtype=torch.float64)


def head_summaries(features: torch.Tensor, rows: list[int], quantile: float) -> torch.Tensor:
    """``[B, 3, L, H]``: for each sequence ``b``, the lower ``quantile`` of every statistic and
    head over its first ``rows[b]`` response tokens, where ``features`` (``[3, L, B, H, W]``)
    lie; NaN where those tokens hold a NaN.

    The same sorted values and the same interpolation
    (:func:`~rcstat.grounding.score.sorted_quantiles`) as
    :func:`~rcstat.grounding.score.lower_quantiles`, so equal to it bit for bit.

    Raises
    ------
    ValueError
        A sequence without a response token (``rows[b] < 1``), or more rows than ``W``.
    """
    width = features.shape[-1]
    if len(rows) != features.shape[2] or any(not 1 <= g <= width for g in rows):
        raise ValueError(
            f"rows: expected {features.shape[2]} counts in [1, {width}] (one per sequence), "
            f"got {rows}"
        )
    out = []
    for b, g in enumerate(rows):
        values = features[:, :, b, :, :g]  # [3, L, H, g]
        middle = sorted_quantiles(torch.sort(values, dim=-1).values, quantile)  # [3, L, H]
        out.append(torch.where(values.isnan().any(-1), torch.nan, middle))
    return torch.stack(out)
