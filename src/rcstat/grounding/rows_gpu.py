"""The per-row grounding features of one layer in two kernel launches (docs/grounding.md).

:func:`~rcstat.grounding.features.grounding_reducer` computes, for every captured row and
head, the RC of the row's context scores against its response scores, the Lookback ratio,
the log of the weight on the row's own key and the weight on the context keys that hold the
token being written — in tens of small tensor operations a layer, which on a GPU cost more
host time than the forward pass itself on short inputs. Here the same quantities come from
two Triton kernels (``_rows_triton``): one online-softmax pass a row (and, for the heads whose
RC is wanted, the pairwise sums ``Σ_x Σ_y max(x − y, 0)`` of docs/definitions.md computed
tile by tile), then one pass over the matched keys summing the heads' weights, the heads split
into groups when units and key tiles alone would leave the card's SMs idle. Used on CUDA
with Triton (``RCSTAT_TRITON`` not 0), and on the CPU under ``TRITON_INTERPRET=1`` (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from rcstat.capture import SoftmaxParams
from rcstat.stats import UnitRows
from rcstat.stats._gpu import (
    kernels_serve,
    on_device,
    prepared_sorted,
    ragged_rank_sums,
    sm_count,
)

__all__ = ["RowLayout", "SupportBatch", "fused_rows", "fused_rows_serve", "support_sums"]

_BLOCK = 1024  # keys a program reads at once
_PAIRS = 64  # context and response samples of one RC tile (64 x 64 pairs)
_WAVES = 4  # programs of the copied kernel wanted per SM
#: Device memory a :class:`SupportBatch` may hold for the heads it gathers.
SUPPORT_BATCH_BYTES = 256 << 20


def head_groups(programs: int, heads: int, sms: int) -> tuple[int, int]:
    """``(groups, heads a group)`` of the copied kernel: the fewest groups that give at least
    ``_WAVES`` programs per SM with ``programs`` (units × key tiles) per group, one head a
    group at most, and no empty group.

    Examples
    --------
    >>> head_groups(4, 32, 132)  # 2 units, 2 key tiles: one head a group
    (32, 1)
    >>> head_groups(40, 32, 132)  # 14 groups wanted: 3 heads a group fill 11
    (11, 3)
    >>> head_groups(1000, 32, 132)
    (1, 32)
    """
    wanted = min(heads, max(1, -(-_WAVES * sms // max(programs, 1))))
    per_group = -(-heads // wanted)
    return -(-heads // per_group), per_group


@dataclass(frozen=True)
class RowLayout:
    """Where each sequence's rows, context and response sit, on the scores' device.

    Attributes
    ----------
    positions
        ``[B, W]`` int64: absolute position of each captured row.
    meta
        ``[B, 4]`` int64: context start, context end, first response key (the row before the
        first response token), rows ``G``.
    match
        ``[B, W, K]`` uint8: context key ``k0 + k`` holds the token row ``j`` writes; None
        when no sequence has matches.
    k0
        First key of the match columns.
    units
        ``[U, 3]`` int64: sequence, first row and end row ``[a, b)`` of each response unit.
    """

    positions: torch.Tensor
    meta: torch.Tensor
    match: torch.Tensor | None
    k0: int
    units: torch.Tensor


def fused_rows_serve(scores: torch.Tensor) -> bool:
    """Whether :func:`fused_rows` serves these scores (float32; CUDA with Triton, or the CPU
    under Triton's interpreter)."""
    return scores.dtype == torch.float32 and kernels_serve(scores)


def fused_rows(
    block: torch.Tensor,
    layout: RowLayout,
    flags: torch.Tensor | None,
    params: SoftmaxParams,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Grounding features of every row of one layer.

    Parameters
    ----------
    block
        ``[B, H, R, T]`` float32 raw scores of the captured rows (``R >= W``), read through
        its strides.
    layout
        The rows' :class:`RowLayout`.
    flags
        ``[H]`` int32: 1 for the heads whose RC is computed (NaN elsewhere, and on rows past
        a sequence's ``G``); None: no head's (the kernel is compiled without the RC).
    params
        The layer's softmax parameters.

    Returns
    -------
    tuple
        ``features`` ``[3, B, H, W]`` float32 (rc, lookback, log weight on the row's own
        key), ``copy`` ``[B, H, W]`` float32 (weight on the matched context keys) and
        ``copied`` ``[U, K]`` float32 (that weight on each key, summed over the heads and the
        unit's rows; None without matches; the heads' groups of :func:`head_groups` added in
        order, so the same inputs on the same card give the same sums).
    """
    from rcstat.grounding._rows_triton import copied_kernel, rows_kernel

    count, heads, _, _ = block.shape
    width = layout.positions.shape[1]
    device = block.device
    match = layout.match
    keys = 0 if match is None else match.shape[-1]
    features = torch.empty(3, count, heads, width, dtype=torch.float32, device=device)
    copy = torch.empty(count, heads, width, dtype=torch.float32, device=device)
    norm = torch.empty(count, heads, width, 2, dtype=torch.float32, device=device)
    softcap = params.softcap is not None
    window = params.sliding_window is not None
    shape = dict(HAS_SOFTCAP=softcap, HAS_WINDOW=window)
    scalars = (
        params.scaling,
        params.softcap if softcap else 1.0,
        params.sliding_window if window else 0,
    )
    with on_device(device):
        rows_kernel[(count * heads, width)](
            block,
            *block.stride(),
            layout.positions,
            layout.meta,
            copy if flags is None else flags,  # never read without flags
            copy if match is None else match,  # never read without matches
            features,
            copy,
            norm,
            count,
            heads,
            width,
            keys,
            layout.k0,
            *scalars,
            HAS_MATCH=match is not None,
            HAS_RC=flags is not None,
            BLOCK=_BLOCK,
            BX=_PAIRS,
            BY=_PAIRS,
            **shape,
        )
        if match is None or not layout.units.shape[0]:
            return features, copy, None
        units = layout.units.shape[0]
        tiles = -(-keys // _BLOCK)
        groups, per_group = head_groups(units * tiles, heads, sm_count(device))
        partial = torch.empty(groups, units, keys, dtype=torch.float32, device=device)
        copied_kernel[(units, tiles, groups)](
            block,
            *block.stride(),
            layout.positions,
            layout.units,
            match,
            norm,
            partial,
            heads,
            width,
            keys,
            layout.k0,
            per_group,
            *scalars,
            BLOCK=_BLOCK,
            **shape,
        )
    copied = partial[0] if groups == 1 else partial.sum(0)  # [U, K], the groups in order
    return features, copy, copied


def support_sums(
    scores: torch.Tensor,
    heads: torch.Tensor,
    rows: UnitRows,
    keys: tuple[int, int],
    shared: dict[Hashable, torch.Tensor],
) -> torch.Tensor:
    """``[U, K]`` float64: :func:`~rcstat.stats.units_key_expected` of the heads ``heads`` of
    ``scores``, summed over those heads — the same sums, by the same kernels, with the heads'
    scores read in place (no copy of their rows) and what depends only on the units and the
    number of heads made once a pass.

    Parameters
    ----------
    scores
        ``[B, H, R, T]`` float32 blocks of a pass, on CUDA (``rcstat.stats`` serves them).
    heads
        ``[h]`` int64 indices of the support heads, on the scores' device.
    rows
        The units' rows in the blocks (:func:`~rcstat.grounding.features.support_unit_rows`).
    keys
        ``[k0, k1)``: the keys scored.
    shared
        Filled and read across the layers of one pass: the units' masks, sample counts, row
        lengths and denominators for ``h`` heads, and the units' first elements for a layout
        of strides.
    """
    count, _, height, columns = scores.shape
    units, width = rows.index.shape
    picked = heads.shape[0]
    first, last = keys
    if ("valid", picked) not in shared:
        valid = rows.valid[:, None, :].expand(units, picked, width).reshape(units * picked, width)
        samples = valid.sum(-1, dtype=torch.int32)  # [U·h] as prepared_self counts them
        lengths = rows.lengths[:, None].expand(units, picked).reshape(-1)  # [U·h]
        shared |= {
            ("valid", picked): valid,
            ("count", picked): samples,
            ("lengths", picked): lengths,
            ("denominator", picked): (lengths.double() * samples.double())[:, None],
        }
    if "batch" not in shared:  # [U]: each unit's block (None: the first for every unit)
        shared["batch"] = torch.zeros_like(rows.starts) if rows.batch is None else rows.batch
    batch = shared["batch"]
    strides = scores.stride()
    stride_b, stride_h, stride_row, stride_key = strides
    if ("base", strides) not in shared:  # [U]: the element of key k0 in each unit's first row
        shared[("base", strides)] = batch * stride_b + rows.starts * stride_row + first * stride_key
    flat = scores.reshape(count, -1, height * columns)  # [B, H, R·T] (a view when contiguous)
    y = flat[batch[:, None, None], heads[None, :, None], rows.index[:, None, :]]  # [U, h, Y]
    valid = shared[("valid", picked)]
    ys = torch.sort(torch.where(valid, y.reshape(units * picked, width), torch.inf), dim=-1)[0]
    prepared = prepared_sorted(ys, shared[("count", picked)])
    base = (shared[("base", strides)][:, None] + heads[None, :] * stride_h).reshape(-1)  # [U·h]
    sums = ragged_rank_sums(
        scores,
        base,
        shared[("lengths", picked)],
        (last - first, rows.longest, 1),
        (stride_key, stride_row, 1),
        prepared,
    )[0]  # [U·h, K]
    expected = sums / shared[("denominator", picked)]
    return expected.view(units, picked, last - first).sum(1)


class SupportBatch:
    """The support heads' scores of consecutive layers gathered into one block and ranked by
    one :func:`support_sums` call, instead of one call a layer.

    A layer's support sums take about twenty launches (gather, sort, prepare, rank); on
    short inputs their host time exceeds the device's time for the layer, so the device
    waits. Gathered, each layer costs one copy of its heads' scores, and the heads of all
    layers are ranked together: every head's sums are those of its own layer's call, bit
    for bit (the same kernels on the same values), added over all gathered heads at once.

    The block holds at most :data:`SUPPORT_BATCH_BYTES` (at least one head): it is ranked
    when the next layer's heads would not fit, at the last support layer (and then freed),
    and when the scores move to another device or change shape; a layer with more heads than
    fit is ranked on its own, read in place.

    Parameters
    ----------
    keys
        ``[k0, k1)``, as in :func:`support_sums`.
    last, total
        The last layer with support heads (its call ranks what is left) and the number of
        support heads of all layers (the block holds no more).
    placed
        ``placed(device)``: the units' rows and the ``shared`` dict of :func:`support_sums`
        on ``device``.
    """

    def __init__(
        self,
        keys: tuple[int, int],
        last: int,
        total: int,
        placed: Callable[[torch.device], tuple[UnitRows, dict[Hashable, torch.Tensor]]],
    ) -> None:
        self.keys, self.last, self.total, self._placed = keys, last, total, placed
        self._block: torch.Tensor | None = None  # [B, capacity, R, T]
        self._filled = 0
        self._chosen: dict[tuple[torch.device, int], torch.Tensor] = {}

    def add(self, layer: int, scores: torch.Tensor, heads: torch.Tensor) -> torch.Tensor | None:
        """Gather the heads ``heads`` (``[h]``, on the scores' device) of the layer's
        ``scores`` ``[B, H, R, T]``; return the ``[U, K]`` float64 sums of the heads this
        call ranked, on the scores' device (None: none)."""
        parts = []
        block = self._block
        if block is not None and (
            block.device != scores.device
            or block.shape[0] != scores.shape[0]
            or block.shape[2:] != scores.shape[2:]
        ):
            parts.append(self.rank())
            self._block = block = None
        if block is None:
            per_head = scores[:, 0].numel() * scores.element_size()
            capacity = max(1, min(self.total, SUPPORT_BATCH_BYTES // per_head))
            shape = (scores.shape[0], capacity, *scores.shape[2:])
            self._block = block = torch.empty(shape, dtype=scores.dtype, device=scores.device)
        picked = heads.shape[0]
        if self._filled + picked > block.shape[1]:
            parts.append(self.rank())
        if picked > block.shape[1]:  # more heads than the block holds: ranked in place
            rows, shared = self._placed(scores.device)
            parts.append(support_sums(scores, heads, rows, self.keys, shared))
        else:
            block[:, self._filled : self._filled + picked] = scores.index_select(1, heads)
            self._filled += picked
        if layer >= self.last:
            parts.append(self.rank())
            self._block = None  # nothing more to gather in this pass: its memory goes back
        found = [part.to(scores.device, non_blocking=True) for part in parts if part is not None]
        return sum(found[1:], found[0]) if found else None

    def rank(self) -> torch.Tensor | None:
        """The ``[U, K]`` sums of the heads gathered so far, on their device (None: none);
        the block is then empty."""
        if self._block is None or not self._filled:
            return None
        device = self._block.device
        if (device, self._filled) not in self._chosen:
            self._chosen[device, self._filled] = torch.arange(self._filled, device=device)
        rows, shared = self._placed(device)
        chosen = self._chosen[device, self._filled]
        self._filled = 0
        return support_sums(self._block, chosen, rows, self.keys, shared)
