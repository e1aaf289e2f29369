"""The packed layout of one compressed KV layer and the cache-to-attention handoff.

A compressed layer stores, per (batch, KV head) segment, only the entries it keeps, followed by
free room for appended tokens (:class:`PackedKV`). :class:`RaggedCache` (``cache.py``)
builds and grows these layouts; :func:`ragged_attention` (``attention.py``) reads them.
The two meet in a :class:`RaggedSession`: the cache publishes a layer's layout when the model
updates it and the attention function of the same layer takes it back. See
``docs/press.md`` for the whole design.
"""

from __future__ import annotations

import contextvars
import weakref
from dataclasses import dataclass, field
from typing import Literal

import torch

Backend = Literal["auto", "reference", "varlen", "split"]


@dataclass
class PackedKV:
    """One layer's packed storage: segment ``s = b·kv_heads + h`` per (batch, KV head).

    Segment ``s`` occupies rows ``seg_start[s] .. seg_start[s+1]-1`` of ``keys``/``values``;
    its first ``seg_len[s]`` rows are live (original order), the rest is free room.
    ``padding_free``: no row holds a padded position (the layer was compressed knowing the
    batch's padding, and padded new tokens are not appended), so a padding mask adds nothing
    to the causal rule and decode steps can skip it.
    """

    keys: torch.Tensor  # [capacity, dim], model dtype
    values: torch.Tensor  # [capacity, dim]
    positions: torch.Tensor  # [capacity] int64: logical position of each row (-1 in the room)
    seg_start: torch.Tensor  # [S + 1] int64 row offsets (seg_start[S] = capacity)
    seg_len: torch.Tensor  # [S] int64 live rows per segment
    clock: torch.Tensor  # [1] int64: ``length`` on the device (a recorded append reads it)
    batch: int
    kv_heads: int
    length: int  # logical sequence length (prompt + appended tokens)
    room: int  # free rows at the end of every segment, at least (the same bound for all)
    live: int  # sum(seg_len), kept on the host
    max_len: int  # a bound on max(seg_len) (exact unless padded tokens were skipped), host
    appended: int = 0  # tokens appended since the layer was (last) compressed
    padding_free: bool = False

    def grow(self, q_len: int, stored: int) -> None:
        """Advance the host fields by ``q_len`` appended positions, ``stored`` rows of them
        written (what an append does on the host; replaying a recorded append needs it too)."""
        self.length += q_len
        self.room -= q_len
        self.live += stored
        self.max_len += q_len
        self.appended += q_len

    def host_fields(self) -> tuple[int, int, int, int, int]:
        """What :meth:`grow` changes: ``(length, room, live, max_len, appended)``."""
        return (self.length, self.room, self.live, self.max_len, self.appended)

    def set_host_fields(self, fields: tuple[int, int, int, int, int]) -> None:
        """Put back what :meth:`host_fields` returned."""
        self.length, self.room, self.live, self.max_len, self.appended = fields

    @property
    def capacity(self) -> int:
        """Rows allocated (live + room of every segment)."""
        return int(self.keys.shape[0])

    @property
    def entry_bytes(self) -> int:
        """Bytes of one key + value row."""
        return 2 * int(self.keys.shape[1]) * self.keys.element_size()


def live_rows(packed: PackedKV) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the live entries in segment order, and their segment: two ``[live]`` int64."""
    device = packed.seg_len.device
    segments = packed.seg_len.numel()
    segment = torch.repeat_interleave(
        torch.arange(segments, device=device), packed.seg_len, output_size=packed.live
    )  # [live]
    first = torch.cumsum(packed.seg_len, 0) - packed.seg_len  # [S] rank of each segment's first
    rank = torch.arange(packed.live, device=device) - first[segment]  # [live] index in segment
    return packed.seg_start[segment] + rank, segment


def pack_rows(
    keys: torch.Tensor,
    values: torch.Tensor,
    rows: torch.Tensor,
    segment: torch.Tensor,
    positions: torch.Tensor,
    seg_len: torch.Tensor,
    *,
    room: int,
    batch: int,
    kv_heads: int,
    length: int,
    max_len: int,
    appended: int,
    padding_free: bool,
) -> PackedKV:
    """Copy the selected rows into a fresh packed layout with ``room`` free rows per segment.

    ``keys``/``values`` ``[M, dim]`` are the source; ``rows`` ``[N]`` the rows to keep, in
    segment order, ``segment`` ``[N]`` their segment, ``positions`` ``[N]`` their logical
    positions and ``seg_len`` ``[S]`` the resulting number of entries per segment.
    """
    live = int(rows.numel())
    segments = int(seg_len.numel())
    device = keys.device
    seg_start = torch.zeros(segments + 1, dtype=torch.int64, device=device)  # [S + 1]
    torch.cumsum(seg_len + room, 0, out=seg_start[1:])
    first = torch.cumsum(seg_len, 0) - seg_len  # [S]
    rank = torch.arange(live, device=device) - first[segment]  # [N]
    dest = seg_start[segment] + rank  # [N] destination rows
    capacity = live + segments * room
    # zeros, not empty: the room is never attended to, but NaN garbage there would leak through
    # 0·NaN in the padded reference path
    new_keys = keys.new_zeros(capacity, keys.shape[1])  # [capacity, dim]
    new_values = values.new_zeros(capacity, values.shape[1])
    new_keys.index_copy_(0, dest, keys.index_select(0, rows))
    new_values.index_copy_(0, dest, values.index_select(0, rows))
    new_positions = torch.full((capacity,), -1, dtype=torch.int64, device=device)
    new_positions.index_copy_(0, dest, positions)
    return PackedKV(
        keys=new_keys,
        values=new_values,
        positions=new_positions,
        seg_start=seg_start,
        seg_len=seg_len.clone(),
        clock=torch.full((1,), length, dtype=torch.int64, device=device),
        batch=batch,
        kv_heads=kv_heads,
        length=length,
        room=room,
        live=live,
        max_len=max_len,
        appended=appended,
        padding_free=padding_free,
    )


@dataclass(frozen=True)
class Padding:
    """The padding of the forward pass being run, as the mask function saw it.

    ``mask`` refers (weakly: the session does not keep a prompt's mask alive) to the 4D mask
    it returned, which the packed layers recognise by identity; ``new`` holds, per batch row
    on the host, which of the pass's ``q`` new tokens are real.
    """

    mask: weakref.ref[torch.Tensor]  # [batch, 1, q, kv_length] bool
    new: tuple[tuple[bool, ...], ...]  # [batch][q]


@dataclass
class RaggedSession:
    """State of one :func:`ragged_attention` context."""

    backend: Backend
    # packed layouts published by RaggedCache.update, taken by the attention of the same layer
    pending: dict[int, PackedKV] = field(default_factory=dict)
    # the current forward pass's padding (None: unpadded), set by the mask function
    padding: Padding | None = None


RAGGED_SESSION: contextvars.ContextVar[RaggedSession | None] = contextvars.ContextVar(
    "rcstat_ragged", default=None
)
