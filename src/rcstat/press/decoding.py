"""Greedy generation with every decode step replayed as one CUDA graph.

``model.generate`` runs Python for every layer of every step: at batch 1 an 8B model's step is
bound by the host, not by the KV cache it reads (docs/benchmarks.md §3.5.3). Here one decode
step — the model's forward pass for one token per sequence, the cache's in-place append and
the greedy choice of the next token — is recorded once as a CUDA graph and replayed; between
replays the host only advances the cache's bookkeeping.

This works for caches whose buffers keep their shapes between steps:

- a :class:`~rcstat.press.cache.RaggedCache` whose layers are all packed: a token is written
  into each segment's room and the split-KV kernel reads the live lengths on the device
  (``decode_kernel.py``), so a graph stays valid until a layer's room runs out. That step
  runs eagerly (the layer is repacked with a larger room) and the graph is recorded again;
  rooms double with the decoded length, so ``n`` new tokens need about ``log2(n / slack)``
  recordings. What the recorded step does on the host — each layer's logical length, room and
  bounds (:meth:`~rcstat.press.layout.PackedKV.grow`) — is done again after every replay;
- transformers' ``StaticCache`` (and any cache with ``is_compileable``): it writes where a
  device tensor says — ``cache_position``, advanced inside the graph, in transformers 5.2;
  each layer's own device counter in later releases, which take no ``cache_position``.

The step reads its inputs from and writes its outputs to fixed buffers: the tokens fed
``[B, 1]``, their positions ``[B, 1]``, the storage index ``cache_position`` ``[1]`` (for
models that take it), the tokens generated ``[B, max_new_tokens]`` and a device step counter.
A sequence that emits a stop token is done: its later outputs are ``pad_token_id``; the host
reads whether all are done before every eager step and, while replaying, every
:data:`CHECK_EVERY` steps. Off CUDA (or with ``graphs=False``) the same step runs eagerly,
which is how the tests check it against ``generate``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rcstat.generation import check_max_new_tokens, input_device
from rcstat.models.cache_argument import forward_takes, with_cache
from rcstat.press.attention import ragged_attention
from rcstat.press.cache import RaggedCache
from rcstat.press.layout import RAGGED_SESSION, Backend, PackedKV

__all__ = ["CHECK_EVERY", "GraphedGeneration", "graphed_generate"]

CHECK_EVERY = 32  # steps between the host's reads of "every sequence is done" while replaying


@dataclass(frozen=True)
class GraphedGeneration:
    """What :func:`graphed_generate` produced.

    Attributes
    ----------
    tokens
        ``[batch, steps]`` int64 on the model's device: the greedy tokens, ``pad_token_id``
        from a sequence's stop token on (the stop token itself is not kept).
    lengths
        ``[batch]`` int64: tokens before each sequence's stop token (``steps`` if none).
    finished
        ``[batch]`` bool: the sequence emitted a stop token (False: cut at the limit).
    steps
        Forward passes run: ``max_new_tokens``, or fewer once every sequence was done (read
        before every eager step and, while replaying, every :data:`CHECK_EVERY` steps).
    recorded
        CUDA graphs recorded (0: every step ran eagerly).
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    finished: torch.Tensor
    steps: int
    recorded: int


class Recorder(Protocol):
    """Records ``step`` once; calling the result replays it (its host code does not run)."""

    def __call__(self, step: Callable[[], None]) -> Callable[[], None]: ...


class CudaRecorder:
    """Records steps as CUDA graphs sharing one memory pool; a new recording frees the last.

    The last graph is reset only after the new one is recorded: a pool whose graphs were all
    reset while tensors it holds are alive can no longer be shared (PyTorch's allocator
    asserts on it), so the pool keeps one live graph throughout.
    """

    def __init__(self) -> None:
        self._pool = torch.cuda.graph_pool_handle()
        self._graph: torch.cuda.CUDAGraph | None = None

    def __call__(self, step: Callable[[], None]) -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            step()
        if self._graph is not None:
            self._graph.reset()
        self._graph = graph
        return graph.replay


def graphed_generate(
    model: Any,
    cache: Any,
    tokens: torch.Tensor,
    *,
    max_new_tokens: int,
    positions: torch.Tensor | None = None,
    stops: Collection[int] = (),
    pad_token_id: int = 0,
    graphs: bool | None = None,
) -> GraphedGeneration:
    """Greedy continuation of the sequences in ``cache``, each step replayed as a CUDA graph.

    Parameters
    ----------
    model
        A Hugging Face causal LM (for a :class:`RaggedCache`, one :func:`ragged_attention`
        serves: Llama, Qwen2, Mistral without sliding window, ...).
    cache
        The prompts' cache without their last token: a :class:`RaggedCache` (for graphs,
        every layer compressed) or a transformers ``StaticCache``. The batch must be
        unpadded, or its layers compressed with ``attention_mask`` (padding-free): no mask is
        passed while decoding.
    tokens
        ``[batch, 1]`` int64: each prompt's last token, not yet in the cache.
    max_new_tokens
        Tokens to generate at most.
    positions
        ``[batch]`` logical position of ``tokens`` (default: the cache's length for every
        row; a left-padded row counts its real tokens only).
    stops
        Token ids that end a sequence (e.g. :func:`~rcstat.generation.stop_token_ids`).
    pad_token_id
        What a done sequence emits.
    graphs
        Record CUDA graphs: None (default) on a CUDA model whose cache allows it, True
        requires them, False runs every step eagerly.

    Returns
    -------
    GraphedGeneration

    Raises
    ------
    ValueError
        ``tokens`` or ``positions`` of the wrong shape, a ``StaticCache`` too short for
        ``max_new_tokens``, or ``graphs=True`` where graphs cannot serve (no CUDA, a dense
        layer of a ``RaggedCache``, a cache that grows by concatenation).
    RuntimeError
        Called inside :func:`ragged_attention` (it enters its own).
    """
    check_max_new_tokens(max_new_tokens)
    if RAGGED_SESSION.get() is not None:
        raise RuntimeError(
            "graphed_generate runs the model in its own ragged_attention: call it outside one"
        )
    record = _graphs_serve(cache, input_device(model), graphs)
    step = _Step.make(model, cache, tokens, max_new_tokens, positions, stops, pad_token_id)
    return _generate(step, CudaRecorder() if record else None, "split" if record else "auto")


def _graphs_serve(cache: Any, device: torch.device, graphs: bool | None) -> bool:
    """Whether to record graphs; for ``graphs=True``, why they cannot serve (ValueError)."""
    if graphs is False:
        return False
    reason = _why_not_graphs(cache, device)
    if reason is not None and graphs:
        raise ValueError(f"graphs=True cannot serve: {reason}")
    return reason is None


def _why_not_graphs(cache: Any, device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"the model runs on {device}, CUDA graphs need a CUDA device"
    if isinstance(cache, RaggedCache):
        dense = [i for i in range(len(cache.layers)) if not cache.is_packed(i)]
        if dense or not cache.layers:
            return (
                f"layers {dense[:8] or 'all'} of the RaggedCache are dense (they grow by "
                "concatenation): compress every layer first"
            )
        return None
    if not getattr(cache, "is_compileable", False):
        return (
            f"a {type(cache).__name__} changes shape every step: use a RaggedCache with every "
            "layer compressed or a StaticCache"
        )
    return None


def _generate(step: _Step, recorder: Recorder | None, backend: Backend) -> GraphedGeneration:
    """Run ``step`` until its limit or every sequence is done, recording it with ``recorder``
    (None: every step eager; the tests pass recorders that run on the CPU)."""
    model, cache, max_new_tokens = step.model, step.cache, step.out.shape[1]
    layers = _packed_layers(cache)  # their layouts, new ones after each repack
    attention = ragged_attention(model, backend=backend) if layers else nullcontext()
    recorded = done_steps = 0
    replay: Callable[[], None] | None = None
    left = 0  # replays before a layer's room runs out
    with torch.no_grad(), attention:
        while done_steps < max_new_tokens:
            eager = replay is None or left == 0
            if step.stops is not None and done_steps and (eager or done_steps % CHECK_EVERY == 0):
                if bool(step.done.all()):  # reads the device: not before every replay
                    break
            if replay is None or left == 0:
                # the old layouts are dropped first: a repack frees each layer's old buffers
                # before the next layer's are allocated (the peak is one layer over the cache)
                layers, replay = [], None
                step()  # the first step (kernels compile), or a repack
                done_steps += 1
                layers = _packed_layers(cache)
                left = min((p.room for p in layers), default=max_new_tokens)
                if recorder is not None and left > 0 and done_steps < max_new_tokens:
                    with _host_kept(cache, layers):
                        replay = recorder(step)
                    recorded += 1
                continue
            replay()
            for packed in layers:
                packed.grow(1, packed.batch * packed.kv_heads)
            done_steps += 1
            left -= 1
    return GraphedGeneration(
        tokens=step.out[:, :done_steps],
        lengths=step.lengths.clone(),
        finished=step.done.clone(),
        steps=done_steps,
        recorded=recorded,
    )


@dataclass
class _Step:
    """One decode step on fixed buffers (what a CUDA graph records)."""

    model: Any
    cache: Any
    ids: torch.Tensor  # [B, 1] the tokens fed
    positions: torch.Tensor  # [B, 1] their logical positions
    cache_position: torch.Tensor | None  # [1] storage index, for models that take it
    out: torch.Tensor  # [B, max_new_tokens] generated tokens
    count: torch.Tensor  # [1] steps run (device)
    lengths: torch.Tensor  # [B] tokens kept before a stop
    done: torch.Tensor  # [B] bool: emitted a stop token
    stops: torch.Tensor | None  # [k] stop ids (None: no stops)
    pad: int

    @classmethod
    def make(
        cls,
        model: Any,
        cache: Any,
        tokens: torch.Tensor,
        max_new_tokens: int,
        positions: torch.Tensor | None,
        stops: Collection[int],
        pad: int,
    ) -> _Step:
        device = input_device(model)
        batch = _cache_batch(cache)
        if not isinstance(tokens, torch.Tensor) or tokens.shape != (batch, 1):
            raise ValueError(
                f"tokens must be [batch, 1] = [{batch}, 1] (each prompt's last token), got "
                f"{tuple(getattr(tokens, 'shape', ()))}"
            )
        if tokens.dtype != torch.int64:
            raise TypeError(f"tokens must be int64 token ids, got {tokens.dtype}")
        start = int(cache.get_seq_length())
        limit = getattr(cache.layers[0], "max_cache_len", None)  # a static layer's positions
        if isinstance(limit, int) and start + max_new_tokens > limit:
            raise ValueError(
                f"the cache holds {limit} positions: {start} cached + {max_new_tokens} new "
                "tokens do not fit"
            )
        if positions is None:
            positions = torch.full((batch,), start, dtype=torch.int64)
        elif (
            not isinstance(positions, torch.Tensor)
            or positions.shape != (batch,)
            or positions.dtype != torch.int64
        ):
            shape = tuple(getattr(positions, "shape", ()))
            kind = getattr(positions, "dtype", type(positions).__name__)
            raise ValueError(
                f"positions must be a [batch] = [{batch}] int64 tensor, got {shape} {kind}"
            )
        takes = forward_takes(model, "cache_position")
        return cls(
            model=model,
            cache=cache,
            ids=tokens.to(device).clone(),
            positions=positions.to(device).view(batch, 1).clone(),
            cache_position=torch.tensor([start], device=device) if takes else None,
            out=torch.full((batch, max_new_tokens), pad, dtype=torch.int64, device=device),
            count=torch.zeros(1, dtype=torch.int64, device=device),
            lengths=torch.zeros(batch, dtype=torch.int64, device=device),
            done=torch.zeros(batch, dtype=torch.bool, device=device),
            stops=torch.tensor(sorted(stops), device=device) if stops else None,
            pad=pad,
        )

    def __call__(self) -> None:
        extra = {} if self.cache_position is None else {"cache_position": self.cache_position}
        logits = self.model(
            self.ids,
            position_ids=self.positions,
            **with_cache(self.model, self.cache),
            use_cache=True,
            **extra,
        ).logits  # [B, 1, V]
        chosen = logits[:, -1].argmax(-1)  # [B]
        if self.stops is not None:
            self.done |= torch.isin(chosen, self.stops)
        kept = torch.where(self.done, self.pad, chosen)  # [B]
        self.out.index_copy_(1, self.count, kept.unsqueeze(1))
        self.lengths += (~self.done).long()
        self.ids.copy_(chosen.unsqueeze(1))
        self.positions += 1
        self.count += 1
        if self.cache_position is not None:
            self.cache_position += 1


def _cache_batch(cache: Any) -> int:
    """The batch a cache holds (it must have seen the prompts)."""
    layers = getattr(cache, "layers", None)
    if not layers:
        raise ValueError("the cache is empty: run the prompts (all but their last token) first")
    first = layers[0]
    packed = getattr(first, "packed", None)
    if packed is not None:
        return int(packed.batch)
    keys = getattr(first, "keys", None)
    if not isinstance(keys, torch.Tensor) or keys.dim() != 4:
        raise ValueError("the cache is empty: run the prompts (all but their last token) first")
    return int(keys.shape[0])


def _packed_layers(cache: Any) -> list[PackedKV]:
    """The packed layouts of a RaggedCache (empty for any other cache)."""
    if not isinstance(cache, RaggedCache):
        return []
    return [p for p in (cache.layer(i).packed for i in range(len(cache.layers))) if p is not None]


@contextmanager
def _host_kept(cache: Any, layers: list[PackedKV]) -> Iterator[None]:
    """Undo what recording a step did to the host fields of ``cache``'s packed ``layers``: a
    recording runs the step's host code once but none of its device work, so the host must
    still describe the device afterwards. Recording never repacks (the rooms are not empty)."""
    saved = [p.host_fields() for p in layers]
    try:
        yield
    finally:  # a recording that fails leaves the cache as it found it
        for packed, fields in zip(layers, saved, strict=True):
            packed.set_host_fields(fields)
    if any(a is not b for a, b in zip(_packed_layers(cache), layers, strict=True)):
        raise RuntimeError("a layer was repacked while its decode step was being recorded")
