"""A per-KV-head ragged (packed) KV cache that really frees evicted entries, and its attention.

Design (DESIGN.md §2.2 "Real memory", ecosystem notes §2):

- :class:`RaggedCache` is a transformers ``DynamicCache`` whose layers (:class:`RaggedLayer`)
  start dense (``[batch, kv_head, T, dim]``, exactly like ``DynamicLayer``).
  :meth:`RaggedCache.compress_layer` replaces a layer's storage by a :class:`PackedKV`:
  keys/values ``[capacity, dim]`` in the model dtype where segment ``s = b·kv_heads + h``
  holds only the entries that ``(batch b, kv head h)`` keeps, in their original order,
  followed by ``room`` free rows. The dense tensors are dropped, so evicted entries are gone.
- Every new token (decoding, or a multi-token continuation) is appended to every segment by an
  in-place ``index_copy_`` into the free rows. All segments grow by the same number of tokens,
  so ``room`` is one host integer and no device synchronisation is needed per step. When the
  room runs out the layer is repacked with ``room = q + max(slack, appended)`` (``appended``:
  tokens appended since compression): the room doubles with the decoded length, so ``n``
  appended tokens cost about ``log2(n / slack)`` repacks, ``O(kept · log(n / slack) + S · n)``
  row copies in all — amortised ``O(1)`` per token and segment, plus the logarithmic re-copies
  of the compressed rows (a dense ``DynamicLayer`` copies everything at every token). The room
  never exceeds ``q + max(slack, appended)`` rows per segment: at most about as many spare
  rows as tokens decoded so far (or ``slack``).
- The cache reports the *logical* length (prompt + appended tokens) to transformers, so
  ``cache_position``, RoPE and mask sizes are those of the uncompressed sequence;
  ``positions`` records the logical index of every stored entry.
- Attention: inside :func:`ragged_attention` the model runs the attention function
  ``"rcstat_ragged"``. The cache↔attention handoff: :meth:`RaggedCache.update` of a packed
  layer appends the new tokens, returns the packed buffers ``[capacity, dim]`` (what the model
  passes on as ``key``/``value``) and publishes the layer's :class:`PackedKV` in the context's
  session under its layer index; the attention function takes it back by
  ``module.layer_idx`` (checking that ``key`` is that buffer) and calls
  :func:`packed_attention`. Dense layers go to transformers' sdpa.
- :func:`packed_attention`: query head ``h`` reads the segment of its KV head ``h // group``;
  the new query ``i`` (logical position ``t = length - q + i``) sees the stored entries with
  position ``<= t``. CPU / float32: pad the segments to the longest one and run
  ``scaled_dot_product_attention`` with a boolean mask (the reference). CUDA with fp16/bf16:
  ``torch.nn.attention.varlen.varlen_attn`` (FlashAttention-2 inside torch) with one sequence
  per segment (its live rows, bottom-right causal, GQA: the group's query heads share the one
  KV head) and one query-less sequence per room, so the room is never read and no
  ``seqused_k`` is needed. Its signature differs across torch versions (2.11: no
  ``enable_gqa``/``seqused_k``; 2.13: both): it is inspected at run time, and the reference is
  used where it cannot serve. Without split-KV (torch 2.11) one thread block walks a whole
  segment, so decoding over long segments is latency-bound; the memory is what it saves.
- Masks: the mask function returns ``None`` unless the batch has padding (or transformers asks
  for an explicit pattern); then it returns sdpa's boolean mask over logical positions, which
  the packed path gathers at each entry's position and the dense path passes to sdpa.

Limits: inference only (no dropout, no gradients through appends), full-attention layers only
(sliding-window or soft-capped layers are refused), no beam search / cropping of packed layers.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

IMPLEMENTATION = "rcstat_ragged"
Backend = Literal["auto", "reference", "varlen"]


@dataclass
class PackedKV:
    """One layer's packed storage: segment ``s = b·kv_heads + h`` per (batch, KV head).

    Segment ``s`` occupies rows ``seg_start[s] .. seg_start[s+1]-1`` of ``keys``/``values``;
    its first ``seg_len[s]`` rows are live (original order), the rest is free room.
    """

    keys: torch.Tensor  # [capacity, dim], model dtype
    values: torch.Tensor  # [capacity, dim]
    positions: torch.Tensor  # [capacity] int64: logical position of each row (-1 in the room)
    seg_start: torch.Tensor  # [S + 1] int64 row offsets (seg_start[S] = capacity)
    seg_len: torch.Tensor  # [S] int64 live rows per segment
    batch: int
    kv_heads: int
    length: int  # logical sequence length (prompt + appended tokens)
    room: int  # free rows at the end of every segment (the same for all)
    live: int  # sum(seg_len), kept on the host
    max_len: int  # max(seg_len), kept on the host
    appended: int = 0  # tokens appended since the layer was (last) compressed

    @property
    def capacity(self) -> int:
        """Rows allocated (live + room of every segment)."""
        return int(self.keys.shape[0])

    @property
    def entry_bytes(self) -> int:
        """Bytes of one key + value row."""
        return 2 * int(self.keys.shape[1]) * self.keys.element_size()


def _live_rows(packed: PackedKV) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the live entries in segment order, and their segment: two ``[live]`` int64."""
    device = packed.seg_len.device
    segments = packed.seg_len.numel()
    segment = torch.repeat_interleave(
        torch.arange(segments, device=device), packed.seg_len, output_size=packed.live
    )  # [live]
    first = torch.cumsum(packed.seg_len, 0) - packed.seg_len  # [S] rank of each segment's first
    rank = torch.arange(packed.live, device=device) - first[segment]  # [live] index in segment
    return packed.seg_start[segment] + rank, segment


def _pack(
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
        batch=batch,
        kv_heads=kv_heads,
        length=length,
        room=room,
        live=live,
        max_len=max_len,
        appended=appended,
    )


class RaggedLayer(DynamicLayer):
    """A ``DynamicLayer`` that can be compressed into a :class:`PackedKV` (see module doc).

    While dense, ``keys``/``values`` are ``[batch, kv_heads, T, dim]``; once packed they are
    the packed buffers ``[capacity, dim]`` and :attr:`packed` holds the layout.
    """

    def __init__(self) -> None:
        super().__init__()
        self.packed: PackedKV | None = None
        self.slack = 0

    # -- transformers' layer interface -------------------------------------------------------
    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[batch, kv_heads, q, dim]`` states; returns the dense or packed buffers."""
        if self.packed is None:
            return super().update(key_states, value_states, cache_kwargs)
        packed = self._append(key_states, value_states)
        return packed.keys, packed.values

    def get_seq_length(self) -> int:
        """The logical length: all positions seen, evicted ones included."""
        if self.packed is not None:
            return self.packed.length
        return super().get_seq_length()

    def crop(self, max_length: int) -> None:
        self._require_dense("crop")
        super().crop(max_length)

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._require_dense("batch_repeat_interleave")
        super().batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._require_dense("batch_select_indices")
        super().batch_select_indices(indices)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._require_dense("reorder_cache (beam search)")
        super().reorder_cache(beam_idx)

    def reset(self) -> None:
        self._require_dense("reset")
        super().reset()

    def _require_dense(self, operation: str) -> None:
        if self.packed is not None:
            raise NotImplementedError(
                f"{operation} is not supported on a packed (compressed) layer"
            )

    def _dense(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The dense ``[batch, kv_heads, T, dim]`` keys and values."""
        if self.keys is None or self.values is None or self.get_seq_length() == 0:
            raise ValueError("the layer has seen no tokens yet: run the prompt through the model")
        return self.keys, self.values

    # -- compression and appends -------------------------------------------------------------
    def compress(self, keep: torch.Tensor, slack: int) -> None:
        """Keep only the entries where ``keep`` ``[batch, kv_heads, length]`` is True.

        ``keep`` is indexed by logical position. On a packed layer it selects among the entries
        still stored (evicted ones stay evicted, whatever ``keep`` says about them).
        """
        packed = self.packed
        if packed is None:
            dense_keys, dense_values = self._dense()
            batch, kv_heads, length, dim = dense_keys.shape
            device = dense_keys.device
        else:
            batch, kv_heads, length = packed.batch, packed.kv_heads, packed.length
            device = packed.keys.device
        _check_keep(keep, (batch, kv_heads, length), device)
        segments = batch * kv_heads
        flat_keep = keep.reshape(segments, length)  # [S, T]
        if packed is None:
            rows = flat_keep.reshape(-1).nonzero().squeeze(1)  # [N] = s·T + t, segment order
            segment, positions = rows // length, rows % length
            keys, values = dense_keys.reshape(-1, dim), dense_values.reshape(-1, dim)  # [S·T, D]
        else:
            live, live_segment = _live_rows(packed)
            selected = flat_keep[live_segment, packed.positions[live]]  # [live] bool
            rows, segment = live[selected], live_segment[selected]
            positions = packed.positions[rows]
            keys, values = packed.keys, packed.values
        seg_len = torch.bincount(segment, minlength=segments)  # [S]
        empty = (seg_len == 0).nonzero().squeeze(1).tolist()
        if empty:
            pairs = [(s // kv_heads, s % kv_heads) for s in empty]
            raise ValueError(
                f"keep leaves no entry for (batch, kv_head) {pairs[:8]}"
                f"{' …' if len(pairs) > 8 else ''}: keep at least one entry per segment"
            )
        self.slack = slack
        self.packed = _pack(
            keys,
            values,
            rows,
            segment,
            positions,
            seg_len,
            room=slack,
            batch=batch,
            kv_heads=kv_heads,
            length=length,
            max_len=int(seg_len.max()),
            appended=0,
        )
        # drop the dense (or previous packed) tensors: the evicted entries are freed here
        self.keys, self.values = self.packed.keys, self.packed.values

    def _append(self, key_states: torch.Tensor, value_states: torch.Tensor) -> PackedKV:
        packed = self.packed
        assert packed is not None
        batch, kv_heads, q_len, dim = key_states.shape
        expected = (packed.batch, packed.kv_heads, q_len, packed.keys.shape[1])
        if tuple(key_states.shape) != expected or value_states.shape != key_states.shape:
            raise ValueError(
                f"new key/value states {tuple(key_states.shape)}/{tuple(value_states.shape)} "
                f"do not match the packed layer: expected {expected}"
            )
        if key_states.dtype != packed.keys.dtype or key_states.device != packed.keys.device:
            raise ValueError(
                f"new states are {key_states.dtype} on {key_states.device}, the packed layer "
                f"is {packed.keys.dtype} on {packed.keys.device}"
            )
        if packed.room < q_len:  # repack with a room that doubles with the decoded length
            rows, segment = _live_rows(packed)
            packed = _pack(
                packed.keys,
                packed.values,
                rows,
                segment,
                packed.positions[rows],
                packed.seg_len,
                room=q_len + max(self.slack, packed.appended),
                batch=packed.batch,
                kv_heads=packed.kv_heads,
                length=packed.length,
                max_len=packed.max_len,
                appended=packed.appended,
            )
            self.packed = packed
            self.keys, self.values = packed.keys, packed.values
        segments = batch * kv_heads
        dest = packed.seg_start[:-1] + packed.seg_len  # [S] first free row of each segment
        if q_len == 1:  # decoding: as few kernel launches as possible
            packed.positions.index_fill_(0, dest, packed.length)
        else:
            offsets = torch.arange(q_len, device=dest.device)  # [q]
            dest = (dest.unsqueeze(1) + offsets).view(-1)  # [S·q], segment-major
            packed.positions.index_copy_(0, dest, (packed.length + offsets).repeat(segments))
        packed.keys.index_copy_(0, dest, key_states.reshape(segments * q_len, dim))
        packed.values.index_copy_(0, dest, value_states.reshape(segments * q_len, dim))
        packed.seg_len += q_len
        packed.length += q_len
        packed.room -= q_len
        packed.live += segments * q_len
        packed.max_len += q_len
        packed.appended += q_len
        return packed

    # -- accounting --------------------------------------------------------------------------
    def kept_lengths(self) -> torch.Tensor:
        """Stored entries per (batch, KV head): ``[batch, kv_heads]`` int64."""
        if self.packed is not None:
            return self.packed.seg_len.view(self.packed.batch, self.packed.kv_heads).clone()
        keys, _ = self._dense()
        batch, kv_heads, length, _ = keys.shape
        return torch.full((batch, kv_heads), length, dtype=torch.int64, device=keys.device)

    def physical_bytes(self) -> int:
        """Bytes of the live key/value entries (room excluded)."""
        if self.packed is not None:
            return self.packed.live * self.packed.entry_bytes
        return self.allocated_bytes()

    def allocated_bytes(self) -> int:
        """Bytes of the key/value buffers, room included."""
        if self.packed is not None:
            return self.packed.capacity * self.packed.entry_bytes
        if self.keys is None or self.values is None:
            return 0
        return (self.keys.numel() + self.values.numel()) * self.keys.element_size()

    def dense_bytes(self) -> int:
        """Bytes a dense ``[batch, kv_heads, length, dim]`` key + value cache would take."""
        if self.packed is not None:
            p = self.packed
            return p.batch * p.kv_heads * p.length * p.entry_bytes
        return self.allocated_bytes()


def _check_keep(keep: torch.Tensor, shape: tuple[int, int, int], device: torch.device) -> None:
    if not isinstance(keep, torch.Tensor) or keep.dtype != torch.bool:
        raise TypeError(f"keep must be a torch.bool tensor, got {getattr(keep, 'dtype', keep)!r}")
    if tuple(keep.shape) != shape:
        raise ValueError(
            f"keep has shape {tuple(keep.shape)}, expected [batch, kv_heads, length] = {shape}"
        )
    if keep.device != device:
        raise ValueError(f"keep is on {keep.device}, the layer's cache is on {device}")


class RaggedCache(DynamicCache):
    """A ``DynamicCache`` whose layers can be compressed per KV head, freeing evicted entries.

    Use it as ``past_key_values`` in ``model(...)`` / ``model.generate(...)``; forward passes
    that reach a compressed layer must run inside :func:`ragged_attention`.

    Parameters
    ----------
    slack
        Free rows kept per segment after compression, so that this many appended tokens are
        in-place writes (the room then doubles with the decoded length, see the module doc).

    Notes
    -----
    Compressing a layer twice is allowed and composes: the second ``keep`` (over logical
    positions, appended tokens included) selects among the entries still stored.
    ``physical_bytes`` / ``allocated_bytes`` count key/value rows only; the int64
    ``positions`` (8 B per allocated row) and the segment offsets are metadata on top.

    Examples
    --------
    >>> cache = RaggedCache(slack=2)
    >>> kv = torch.randn(1, 2, 6, 8)  # [batch, kv_head, T, dim]
    >>> _ = cache.update(kv, kv.clone(), 0)
    >>> keep = torch.ones(1, 2, 6, dtype=torch.bool)
    >>> keep[0, 0, :4] = False
    >>> cache.compress_layer(0, keep)
    >>> cache.kept_lengths(0).tolist(), cache.get_seq_length()
    ([[2, 6]], 6)
    >>> cache.physical_bytes(), cache.allocated_bytes(), cache.dense_bytes()
    (512, 768, 768)
    """

    def __init__(self, slack: int = 64) -> None:
        if not isinstance(slack, int) or slack < 0:
            raise ValueError(f"slack must be an int >= 0, got {slack!r}")
        super().__init__()
        self.layer_class_to_replicate = RaggedLayer
        self.slack = slack

    def layer(self, layer_idx: int) -> RaggedLayer:
        """The cache layer ``layer_idx`` (it must have seen tokens already)."""
        if not 0 <= layer_idx < len(self.layers):
            raise IndexError(
                f"layer {layer_idx} is not in the cache ({len(self.layers)} layers filled so far)"
            )
        layer = self.layers[layer_idx]
        assert isinstance(layer, RaggedLayer)
        return layer

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new states; for a packed layer, also hand its layout to the attention."""
        session = _SESSION.get()
        if layer_idx < len(self.layers) and self.is_packed(layer_idx) and session is None:
            raise RuntimeError(
                f"layer {layer_idx} of the RaggedCache is compressed: run the model inside "
                "rcstat.press.ragged_attention(model) so that its attention reads the packed cache"
            )
        keys, values = super().update(key_states, value_states, layer_idx, cache_kwargs)
        packed = self.layer(layer_idx).packed
        if packed is not None:
            assert session is not None
            session.pending[layer_idx] = packed
        return keys, values

    def compress_layer(
        self, layer_idx: int, keep: torch.Tensor, *, slack: int | None = None
    ) -> None:
        """Replace layer ``layer_idx`` by its kept entries, packed per (batch, KV head).

        Parameters
        ----------
        layer_idx
            The decoder layer.
        keep
            ``[batch, kv_heads, length]`` bool over logical positions; at least one True per
            (batch, KV head). Batch rows may keep different numbers of entries.
        slack
            Free rows per segment (default: the cache's ``slack``).

        Raises
        ------
        TypeError
            If ``keep`` is not a bool tensor.
        ValueError
            If its shape or device does not match the layer, or a segment would be empty.
        """
        room = self.slack if slack is None else slack
        if not isinstance(room, int) or room < 0:
            raise ValueError(f"slack must be an int >= 0, got {room!r}")
        self.layer(layer_idx).compress(keep, room)

    def is_packed(self, layer_idx: int) -> bool:
        """Whether layer ``layer_idx`` has been compressed."""
        return self.layer(layer_idx).packed is not None

    def kept_lengths(self, layer_idx: int) -> torch.Tensor:
        """Stored entries per (batch, KV head) of one layer: ``[batch, kv_heads]`` int64."""
        return self.layer(layer_idx).kept_lengths()

    def physical_bytes(self) -> int:
        """Bytes of the live key/value entries over all layers (room excluded)."""
        return sum(self.layer(i).physical_bytes() for i in range(len(self.layers)))

    def allocated_bytes(self) -> int:
        """Bytes of the key/value buffers over all layers (room included)."""
        return sum(self.layer(i).allocated_bytes() for i in range(len(self.layers)))

    def dense_bytes(self) -> int:
        """Bytes a full dense cache of the same logical length would take."""
        return sum(self.layer(i).dense_bytes() for i in range(len(self.layers)))


# -- attention ------------------------------------------------------------------------------


@dataclass
class _Session:
    """State of one :func:`ragged_attention` context."""

    backend: Backend
    # packed layouts published by RaggedCache.update, taken by the attention of the same layer
    pending: dict[int, PackedKV] = field(default_factory=dict)


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "rcstat_ragged", default=None
)


@functools.cache
def _varlen_kernel() -> Callable[..., torch.Tensor] | None:
    """``varlen_attn`` bound to GQA + causal, or None if this torch's signature cannot serve."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "scale" not in params:
        return None
    options: dict[str, Any] = {}
    if "window_size" in params:  # torch 2.11 and 2.13
        options["window_size"] = (-1, 0)  # causal, bottom-right aligned
    elif "is_causal" in params:
        options["is_causal"] = True
    else:
        return None
    if "enable_gqa" in params:  # torch 2.13 checks head counts unless told; 2.11 takes GQA as is
        options["enable_gqa"] = True
    # we never ask for the auxiliary outputs, so the kernel returns one tensor
    return cast(Callable[..., torch.Tensor], functools.partial(varlen_attn, **options))


def _varlen_usable(query: torch.Tensor, mask: torch.Tensor | None) -> bool:
    dim = query.shape[-1]
    return (
        _varlen_kernel() is not None
        and query.is_cuda
        and query.dtype in (torch.float16, torch.bfloat16)
        and mask is None
        and dim % 8 == 0
        and dim <= 256
    )


def packed_attention(
    query: torch.Tensor,
    packed: PackedKV,
    *,
    scaling: float,
    mask: torch.Tensor | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """Attention of the ``q`` newest queries against a packed layer (GQA, causal).

    Parameters
    ----------
    query
        ``[batch, heads, q, dim]``, post-RoPE; the queries of the last ``q`` logical positions
        (already appended to ``packed``).
    packed
        The layer's layout; query head ``h`` reads segment ``b·kv_heads + h // group``.
    scaling
        Softmax scale (``1/sqrt(dim)`` for most models).
    mask
        ``None`` (causal by position: query at position ``t`` sees entries with position
        ``<= t``) or a boolean ``[batch | 1, 1, q, length]`` over logical positions (True =
        attend), e.g. with padding; it is gathered at each entry's position.
    backend
        ``"reference"`` (padded segments + boolean mask + sdpa, any device), ``"varlen"``
        (``torch.nn.attention.varlen.varlen_attn``: CUDA, fp16/bf16, ``mask=None``) or
        ``"auto"`` (varlen when usable, else the reference).

    Returns
    -------
    torch.Tensor
        ``[batch, q, heads, dim]`` (the layout transformers' attention functions return).

    Notes
    -----
    For each query head ``h`` and new query ``i`` with visible entries ``V``:
    ``out = Σ_{j∈V} softmax_j(scaling · <q_i, k_j>) v_j`` — the dense attention restricted to
    the stored entries, i.e. eviction = masking those keys out, without storing them.

    Examples
    --------
    >>> cache = RaggedCache(slack=4)
    >>> kv = torch.randn(1, 2, 5, 8)  # [batch, kv_head, T, dim]
    >>> _ = cache.update(kv, kv.clone(), 0)
    >>> cache.compress_layer(0, torch.tensor([[[1, 0, 0, 1, 1], [0, 1, 1, 1, 1]]]).bool())
    >>> layer = cache.layer(0)
    >>> _ = layer.update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8))  # one new token
    >>> query = torch.randn(1, 4, 1, 8)  # 4 query heads: a group of 2 per KV head
    >>> packed_attention(query, layer.packed, scaling=8**-0.5).shape
    torch.Size([1, 1, 4, 8])
    """
    if backend not in ("auto", "reference", "varlen"):
        raise ValueError(f"backend must be 'auto', 'reference' or 'varlen', got {backend!r}")
    batch, heads = query.shape[:2]
    if batch != packed.batch or heads % packed.kv_heads:
        raise ValueError(
            f"query {tuple(query.shape)} does not fit the packed layer (batch {packed.batch}, "
            f"{packed.kv_heads} KV heads)"
        )
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"the ragged attention takes boolean masks only, got {mask.dtype}")
    if backend == "varlen" and not _varlen_usable(query, mask):
        raise RuntimeError(
            "varlen_attn cannot serve this call: it needs torch.nn.attention.varlen.varlen_attn "
            "(with scale and window_size/is_causal), a CUDA fp16/bf16 query, dim % 8 == 0 and "
            "<= 256, and no mask"
        )
    if backend == "varlen" or (backend == "auto" and _varlen_usable(query, mask)):
        kernel = _varlen_kernel()
        assert kernel is not None
        return _varlen_attention(kernel, query, packed, scaling)
    return _reference_attention(query, packed, scaling, mask)


def _reference_attention(
    query: torch.Tensor, packed: PackedKV, scaling: float, mask: torch.Tensor | None
) -> torch.Tensor:
    """Pad every segment to the longest, mask, and run sdpa with the group's queries as rows."""
    batch, heads, q_len, dim = query.shape
    kv_heads, length = packed.kv_heads, packed.max_len
    group = heads // kv_heads
    device = query.device
    offsets = torch.arange(length, device=device)  # [L]
    valid = offsets < packed.seg_len.unsqueeze(1)  # [S, L]
    rows = torch.where(valid, packed.seg_start[:-1].unsqueeze(1) + offsets, 0)  # [S, L]
    keys = packed.keys[rows].view(batch, kv_heads, length, dim)
    values = packed.values[rows].view(batch, kv_heads, length, dim)
    positions = packed.positions[rows].view(batch, kv_heads, 1, length)
    if mask is None:
        query_positions = packed.length - q_len + torch.arange(q_len, device=device)  # [q]
        visible = positions <= query_positions.view(1, 1, q_len, 1)  # [B, Hkv, q, L]
    else:
        by_position = mask[:, 0].unsqueeze(1).expand(batch, kv_heads, q_len, mask.shape[-1])
        index = positions.clamp_min(0).expand(batch, kv_heads, q_len, length)
        visible = by_position.gather(-1, index)  # [B, Hkv, q, L]
    allowed = visible & valid.view(batch, kv_heads, 1, length)  # [B, Hkv, q, L]
    allowed = allowed.unsqueeze(2).expand(batch, kv_heads, group, q_len, length)
    out = F.scaled_dot_product_attention(
        query.reshape(batch, kv_heads, group * q_len, dim),  # a group's queries as rows
        keys,
        values,
        attn_mask=allowed.reshape(batch, kv_heads, group * q_len, length),
        scale=scaling,
    )  # [B, Hkv, G·q, D]
    return out.view(batch, heads, q_len, dim).transpose(1, 2).contiguous()


def _varlen_attention(
    kernel: Callable[..., torch.Tensor], query: torch.Tensor, packed: PackedKV, scaling: float
) -> torch.Tensor:
    """``varlen_attn`` over ``2S`` sequences: sequence ``2s`` is segment ``s`` (its ``q``
    queries × ``group`` heads against its live rows, one KV head), ``2s+1`` its free room with
    no query. The room sequences make the live rows addressable by ``cu_seq_k`` alone, so no
    ``seqused_k`` is needed (torch 2.11's signature has none)."""
    batch, heads, q_len, dim = query.shape
    kv_heads = packed.kv_heads
    group = heads // kv_heads
    segments = batch * kv_heads
    packed_query = (
        query.reshape(batch, kv_heads, group, q_len, dim)
        .permute(0, 1, 3, 2, 4)
        .reshape(segments * q_len, group, dim)
    )  # [S·q, G, D]
    starts = packed.seg_start[:-1]
    live_ends = starts + packed.seg_len
    cu_seq_k = torch.cat([torch.stack([starts, live_ends], 1).view(-1), packed.seg_start[-1:]])
    cu_seq_q = _query_offsets(segments, q_len, query.device)
    out = kernel(
        packed_query,
        packed.keys.unsqueeze(1),  # [capacity, 1, D]
        packed.values.unsqueeze(1),
        cu_seq_q,
        cu_seq_k.to(torch.int32),  # [2S + 1]
        q_len,
        max(packed.max_len, packed.room),
        scale=scaling,
    )  # [S·q, G, D]
    return (
        out.view(batch, kv_heads, q_len, group, dim)
        .permute(0, 2, 1, 3, 4)
        .reshape(batch, q_len, heads, dim)
    )


@functools.lru_cache(maxsize=64)
def _query_offsets(segments: int, q_len: int, device: torch.device) -> torch.Tensor:
    """``cu_seq_q`` ``[2S + 1]`` int32: ``q`` queries per segment, none per room."""
    index = torch.arange(2 * segments + 1, dtype=torch.int32, device=device)
    return (index + 1) // 2 * q_len


def _dense_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """sdpa; with no mask and a continuation (1 < q < kv), an explicit bottom-right causal mask
    (sdpa's ``is_causal`` is top-left aligned)."""
    q_len, kv_len = query.shape[2], key.shape[2]
    if attention_mask is None and 1 < q_len < kv_len:
        attention_mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(
            kv_len - q_len
        )[None, None]  # [1, 1, q, kv]
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    return sdpa(module, query, key, value, attention_mask, **kwargs)


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,  # may come positionally (kvpress wraps registered functions)
    *,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered ``"rcstat_ragged"`` attention function (see the module docstring)."""
    if sliding_window is not None or softcap is not None:
        raise NotImplementedError(
            "the ragged attention supports full-attention layers only (this layer has "
            f"sliding_window={sliding_window}, softcap={softcap})"
        )
    session = _SESSION.get()
    layer = int(getattr(module, "layer_idx", -1))
    packed = session.pending.pop(layer, None) if session is not None else None
    if packed is None:
        if key.dim() != 4:
            raise RuntimeError(
                f"layer {layer}: got packed keys {tuple(key.shape)} without their layout (the "
                "cache must be a RaggedCache updated inside ragged_attention)"
            )
        return _dense_attention(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if key is not packed.keys or value is not packed.values:
        raise RuntimeError(f"layer {layer}: the keys passed to attention are not the packed cache")
    if dropout:
        raise NotImplementedError("packed layers are inference-only (dropout > 0)")
    scale = scaling if scaling is not None else cast(float, module.scaling)
    assert session is not None
    out = packed_attention(
        query, packed, scaling=scale, mask=attention_mask, backend=session.backend
    )
    return out, None


def _mask(
    batch_size: int,
    cache_position: torch.Tensor,
    kv_length: int,
    kv_offset: int = 0,
    mask_function: Callable[..., Any] = causal_mask_function,
    attention_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> torch.Tensor | None:
    """``None`` when the pattern is plain causal without padding (like flash's mask function),
    else sdpa's boolean ``[batch, 1, q, kv_length]`` mask over logical positions."""
    unpadded = attention_mask is None or bool(attention_mask[:, -kv_length:].all())
    if unpadded and kwargs.get("allow_is_causal_skip", True):
        return None
    return sdpa_mask(
        batch_size=batch_size,
        cache_position=cache_position,
        kv_length=kv_length,
        kv_offset=kv_offset,
        mask_function=mask_function,
        attention_mask=attention_mask,
        **kwargs,
    )


@contextmanager
def ragged_attention(model: torch.nn.Module, *, backend: Backend = "auto") -> Iterator[None]:
    """Run ``model`` with the ragged attention (needed once a :class:`RaggedCache` layer is packed).

    Parameters
    ----------
    model
        A Hugging Face causal LM whose attention dispatches through ``AttentionInterface``
        (Llama, Qwen2, Mistral without sliding window, ...).
    backend
        See :func:`packed_attention`.

    Notes
    -----
    Registers ``"rcstat_ragged"`` (attention + mask functions), switches the model to it and
    restores the previous implementation on exit. The session lives in a ``ContextVar``: run
    the forward passes in the thread that entered the context.
    """
    if backend not in ("auto", "reference", "varlen"):
        raise ValueError(f"backend must be 'auto', 'reference' or 'varlen', got {backend!r}")
    config: Any = model.config
    previous = config._attn_implementation or "eager"
    if previous == IMPLEMENTATION or _SESSION.get() is not None:
        raise RuntimeError("ragged_attention contexts cannot be nested")
    AttentionInterface.register(IMPLEMENTATION, _attention)
    AttentionMaskInterface.register(IMPLEMENTATION, _mask)
    token = _SESSION.set(_Session(backend=backend))
    model.set_attn_implementation(IMPLEMENTATION)  # type: ignore[operator]
    try:
        yield
    finally:
        model.set_attn_implementation(previous)  # type: ignore[operator]
        _SESSION.reset(token)
