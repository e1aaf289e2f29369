"""A per-KV-head ragged (packed) KV cache that really frees evicted entries.

:class:`RaggedCache` is a transformers ``DynamicCache`` whose layers start dense and are
replaced, on :meth:`RaggedCache.compress_layer`, by a :class:`~rcstat.press.layout.PackedKV`
holding only the kept entries of each (batch, KV head): evicted entries are gone from memory.
New tokens are appended in place into every segment's room (see ``docs/press.md``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from rcstat.press.layout import RAGGED_SESSION, PackedKV, live_rows, pack_rows


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
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``[batch, kv_heads, q, dim]`` states; returns the dense or packed buffers.

        Extra arguments (``cache_kwargs`` in transformers 5.2, ``kwargs`` later) go to
        ``DynamicLayer.update`` for a dense layer; a packed layer needs none of them."""
        if self.packed is None:
            _check_states(key_states, value_states)
            return super().update(key_states, value_states, *args, **kwargs)
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
    def compress(self, keep: torch.Tensor, slack: int, real: torch.Tensor | None = None) -> None:
        """Keep only the entries where ``keep`` ``[batch, kv_heads, length]`` is True.

        ``keep`` is indexed by logical position. On a packed layer it selects among the entries
        still stored (evicted ones stay evicted, whatever ``keep`` says about them). ``real``
        ``[batch, length]`` bool marks the unpadded positions: padded ones are evicted too and
        the layer is then padding-free (see :class:`~rcstat.press.layout.PackedKV`); None
        (padding unknown) keeps what ``keep`` says and makes no such promise.
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
        if real is not None:
            _check_real(real, (batch, length), device)
            keep = keep & real.unsqueeze(1)
        segments = batch * kv_heads
        flat_keep = keep.reshape(segments, length)  # [S, T]
        if packed is None:
            rows = flat_keep.reshape(-1).nonzero().squeeze(1)  # [N] = s·T + t, segment order
            segment, positions = rows // length, rows % length
            keys, values = dense_keys.reshape(-1, dim), dense_values.reshape(-1, dim)  # [S·T, D]
        else:
            live, live_segment = live_rows(packed)
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
        self.packed = pack_rows(
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
            padding_free=real is not None,
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
            rows, segment = live_rows(packed)
            packed = pack_rows(
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
                padding_free=packed.padding_free,
            )
            self.packed = packed
            self.keys, self.values = packed.keys, packed.values
        segments = batch * kv_heads
        stored = self._stored_new(packed, q_len)
        if stored is not None:
            self._append_real(packed, key_states, value_states, stored)
            return packed
        dest = packed.seg_start[:-1] + packed.seg_len  # [S] first free row of each segment
        if q_len == 1:  # decoding: as few kernel launches as possible
            packed.positions.index_copy_(0, dest, packed.clock.expand(segments))
        else:
            offsets = torch.arange(q_len, device=dest.device)  # [q]
            dest = (dest.unsqueeze(1) + offsets).view(-1)  # [S·q], segment-major
            packed.positions.index_copy_(0, dest, (packed.clock + offsets).repeat(segments))
        packed.keys.index_copy_(0, dest, key_states.reshape(segments * q_len, dim))
        packed.values.index_copy_(0, dest, value_states.reshape(segments * q_len, dim))
        packed.seg_len += q_len
        packed.clock += q_len
        packed.grow(q_len, segments * q_len)
        return packed

    @staticmethod
    def _stored_new(packed: PackedKV, q_len: int) -> tuple[tuple[bool, ...], ...] | None:
        """Which new tokens a padding-free layer stores, per batch row (host), when some of
        them are padding; None when every new token is stored."""
        session = RAGGED_SESSION.get()
        padding = session.padding if session is not None else None
        if not packed.padding_free or padding is None:
            return None
        if padding.mask() is None:  # the record outlived its pass: this pass brought its own
            packed.padding_free = False  # mask (a caller's 4D one); store all, mask from now on
            return None
        if len(padding.new) != packed.batch or any(len(row) != q_len for row in padding.new):
            raise RuntimeError(
                f"the forward pass's padding covers {len(padding.new)} rows × "
                f"{len(padding.new[0]) if padding.new else 0} new tokens, the layer gets "
                f"{packed.batch} × {q_len}"
            )
        return None if all(all(row) for row in padding.new) else padding.new

    @staticmethod
    def _append_real(
        packed: PackedKV,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        stored: tuple[tuple[bool, ...], ...],
    ) -> None:
        """Append only the real (unpadded) new tokens of each batch row: segments grow by
        their row's count, ``max_len`` and ``room`` move by ``q`` (bounds, see PackedKV)."""
        _, kv_heads, q_len, dim = key_states.shape
        device = packed.keys.device
        real = torch.tensor(stored, dtype=torch.bool).repeat_interleave(kv_heads, 0)  # [S, q]
        counts = real.sum(1)  # [S]
        rank = real.cumsum(1) - 1  # [S, q] rank of each real token in its segment's new rows
        source = real.view(-1).nonzero().squeeze(1)  # [N] rows of the [S·q] new states
        segment = source // q_len
        offsets = (rank.view(-1)[source]).to(device)  # [N]
        source, segment = source.to(device), segment.to(device)
        dest = packed.seg_start[segment] + packed.seg_len[segment] + offsets  # [N]
        packed.positions.index_copy_(0, dest, packed.clock + source % q_len)
        packed.keys.index_copy_(0, dest, key_states.reshape(-1, dim).index_select(0, source))
        packed.values.index_copy_(0, dest, value_states.reshape(-1, dim).index_select(0, source))
        packed.seg_len += counts.to(device)
        packed.clock += q_len
        packed.grow(q_len, int(counts.sum()))

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


def _check_real(real: torch.Tensor, shape: tuple[int, int], device: torch.device) -> None:
    if not isinstance(real, torch.Tensor) or real.dtype != torch.bool:
        raise TypeError(
            f"the real positions must be a torch.bool tensor, got {getattr(real, 'dtype', real)!r}"
        )
    if tuple(real.shape) != shape or real.device != device:
        raise ValueError(
            f"attention_mask is {tuple(real.shape)} on {real.device}, expected "
            f"[batch, length] = {shape} on {device}"
        )


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
        *args: Any,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new states; for a packed layer, also hand its layout to the attention."""
        session = RAGGED_SESSION.get()
        if layer_idx < len(self.layers) and self.is_packed(layer_idx) and session is None:
            raise RuntimeError(
                f"layer {layer_idx} of the RaggedCache is compressed: run the model inside "
                "rcstat.press.ragged_attention(model) so that its attention reads the packed cache"
            )
        keys, values = super().update(key_states, value_states, layer_idx, *args, **kwargs)
        packed = self.layer(layer_idx).packed
        if packed is not None:
            assert session is not None
            session.pending[layer_idx] = packed
        return keys, values

    def compress_layer(
        self,
        layer_idx: int,
        keep: torch.Tensor,
        *,
        slack: int | None = None,
        attention_mask: torch.Tensor | None = None,
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
        attention_mask
            ``[batch, length]`` (1/True = real token, 0/False = padding) of the cached
            positions, for a padded batch: padded entries are evicted whatever ``keep`` says,
            and the layer's decode steps then skip the padding mask (the split-KV kernel
            serves them) and store no padded new token. None: the padding is unknown; a padded
            batch then decodes through the masked reference path.

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
        real = None if attention_mask is None else attention_mask.bool()
        self.layer(layer_idx).compress(keep, room, real)

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


def _check_states(key_states: torch.Tensor, value_states: torch.Tensor) -> None:
    """Refuse new states that are not ``[batch, kv_heads, q, dim]`` pairs of one batch, head
    count and length (the value's dim may differ from the key's)."""
    if key_states.dim() != 4 or value_states.dim() != 4:
        raise ValueError(
            f"new key/value states must be [batch, kv_heads, q, dim], got "
            f"{tuple(key_states.shape)}/{tuple(value_states.shape)}"
        )
    if key_states.shape[:3] != value_states.shape[:3]:
        raise ValueError(
            f"new key/value states {tuple(key_states.shape)}/{tuple(value_states.shape)} differ "
            "in batch, KV heads or length"
        )
