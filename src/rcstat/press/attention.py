"""The attention that reads a :class:`~rcstat.press.cache.RaggedCache`.

Inside :func:`ragged_attention` the model runs the attention function ``"rcstat_ragged"``:
packed layers go to :func:`packed_attention` (each query head reads its KV head's segment; on
CUDA a split-KV Triton kernel for decode steps (``decode_kernel.py``) and
``torch.nn.attention.varlen`` for prompts and continuations, a padded sdpa reference
elsewhere), dense layers to transformers' sdpa. See ``docs/press.md`` for the design and its
limits.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers.masking_utils import sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from rcstat.capture.switch import switched_attention
from rcstat.press.layout import RAGGED_SESSION, Backend, PackedKV, Padding, RaggedSession
from rcstat.stats import kernels_serve

IMPLEMENTATION = "rcstat_ragged"
BACKENDS: tuple[Backend, ...] = ("auto", "reference", "varlen", "split")


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}"
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


def _split_usable(query: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether the split-KV decode kernel can serve: one query per head, no mask, dim <= 256,
    a CUDA device with Triton (``RCSTAT_TRITON`` not 0) or CPU tensors under the interpreter."""
    if query.shape[2] != 1 or mask is not None or query.shape[-1] > 256:
        return False
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return False
    return kernels_serve(query)


def _split_preferred(query: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """``"auto"``'s choice of the split-KV kernel: CUDA decode steps in fp16/bf16 with the head
    dims its tiles are sized for."""
    return (
        query.is_cuda
        and query.dtype in (torch.float16, torch.bfloat16)
        and query.shape[-1] in (64, 128, 256)
        and _split_usable(query, mask)
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
        (``torch.nn.attention.varlen.varlen_attn``: CUDA, fp16/bf16, ``mask=None``),
        ``"split"`` (the split-KV Triton decode kernel of ``decode_kernel.py``: ``q = 1``,
        ``mask=None``, dim <= 256; CUDA, or CPU under ``TRITON_INTERPRET=1``) or ``"auto"``
        (on CUDA: split for fp16/bf16 decode steps with dim 64/128/256, varlen for prompts
        and continuations; else the reference).

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
    >>> from rcstat.press.cache import RaggedCache
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
    _check_backend(backend)
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
    if backend == "split" and not _split_usable(query, mask):
        raise RuntimeError(
            "the split-KV kernel cannot serve this call: it needs one query per head (decode), "
            "no mask, dim <= 256, fp16/bf16/fp32, and a CUDA device with Triton (or CPU "
            "tensors under TRITON_INTERPRET=1)"
        )
    if backend == "split" or (backend == "auto" and _split_preferred(query, mask)):
        from rcstat.press.decode_kernel import split_decode_attention

        return split_decode_attention(query, packed, scaling)
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
    # reshape: a CUDA sdpa kernel may return [B, Hkv, G·q, D] with other strides
    return out.reshape(batch, heads, q_len, dim).transpose(1, 2).contiguous()


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
    session = RAGGED_SESSION.get()
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
    if _padding_only(attention_mask, packed, session.padding):
        attention_mask = None  # the layer stores no padded entry: causal by position is exact
    out = packed_attention(
        query, packed, scaling=scale, mask=attention_mask, backend=session.backend
    )
    return out, None


def _padding_only(mask: torch.Tensor | None, packed: PackedKV, padding: Padding | None) -> bool:
    """Whether ``mask`` only hides padding that ``packed`` does not store: it is the mask the
    mask function built for this pass (padding ∧ causal), the layer is padding-free, and the
    pass's padded new tokens (not stored) precede its real ones in every row, so that
    bottom-right causal alignment over the stored rows still holds."""
    if mask is None or padding is None or mask is not padding.mask() or not packed.padding_free:
        return False
    return all(row.index(True) + sum(row) == len(row) for row in padding.new if any(row))


def _mask(**kwargs: Any) -> torch.Tensor | None:
    """``None`` when the pattern is plain causal without padding (like flash's mask function),
    else sdpa's boolean ``[batch, 1, q, kv_length]`` mask over logical positions.

    transformers calls mask functions with keywords only, and their names changed across
    releases (``cache_position`` in 5.2; ``q_length`` / ``q_offset`` later): everything is
    passed on to sdpa's own mask function unchanged."""
    attention_mask = kwargs.get("attention_mask")
    kv_length = int(kwargs["kv_length"])
    unpadded = attention_mask is None or bool(attention_mask[:, -kv_length:].all())
    session = RAGGED_SESSION.get()
    if session is not None:
        session.padding = None
    if unpadded and kwargs.get("allow_is_causal_skip", True):
        return None
    mask = sdpa_mask(**kwargs)
    if (
        session is not None
        and attention_mask is not None
        and attention_mask.dim() == 2
        and not unpadded
        and mask is not None
    ):
        new = attention_mask[:, -mask.shape[-2] :].bool().tolist()  # [B][q] host
        session.padding = Padding(weakref.ref(mask), tuple(tuple(row) for row in new))
    return mask


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
    _check_backend(backend)
    if RAGGED_SESSION.get() is not None:
        raise RuntimeError("ragged_attention contexts cannot be nested")
    token = RAGGED_SESSION.set(RaggedSession(backend=backend))
    try:
        with switched_attention(model, IMPLEMENTATION, _attention, _mask):
            yield
    finally:
        RAGGED_SESSION.reset(token)
