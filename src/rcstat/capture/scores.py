"""Capture pre-softmax attention scores of any Hugging Face causal LM, one layer at a time.

Design: a named attention function ``"rcstat"``
is registered with transformers' ``AttentionInterface``. While a :class:`capture_scores`
context is active the model is switched to it; for every requested layer the function
computes the raw scores ``<q_j, k_i>`` of the requested query rows against all keys (post-RoPE
q and k, GQA without copying keys), hands the block to a reducer on the layer's own device,
keeps only the reducer's (small) result and frees the block. It then delegates the attention
output to the model's previous implementation (sdpa, eager, flash), so the forward pass is
unchanged. The previous implementation is restored on exit; nothing is patched at import.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from rcstat.capture.architecture import UnsupportedModelError, attention_layout
from rcstat.capture.graphs import GraphedCalls
from rcstat.capture.host import stack_on_host, upload
from rcstat.capture.switch import current_implementation, switched_attention

IMPLEMENTATION = "rcstat"
R = TypeVar("R")
# Reducer: (layer index, scores [batch, head, query, key] float32) -> per-layer result.
Reducer = Callable[[int, torch.Tensor], R]


@dataclass
class CaptureResult(Generic[R]):
    """Per-layer reducer outputs of one capture (filled when the forward pass runs)."""

    layers: tuple[int, ...]
    per_layer: dict[int, R] = field(default_factory=dict)

    def ordered(self) -> list[R]:
        """Results in layer order; raises if a requested layer was never seen."""
        missing = [layer for layer in self.layers if layer not in self.per_layer]
        if missing:
            raise UnsupportedModelError(
                f"layers {missing} never called the rcstat attention function: the model "
                "bypasses AttentionInterface for them, or no forward pass ran inside the capture"
            )
        return [self.per_layer[layer] for layer in self.layers]


@dataclass
class _Session:
    reducer: Reducer[Any]
    layers: frozenset[int]
    query_start: int
    query_end: int | None
    positions: torch.Tensor | None  # [B, Q] on the host
    scaled: bool
    finite: Callable[[Any], torch.Tensor] | None
    graph_key: Callable[[int], Hashable | None] | None
    sink: Callable[[int, Any], Any] | None
    delegate: Callable[..., Any]
    result: CaptureResult[Any]
    flags: list[tuple[int, torch.Tensor]] = field(default_factory=list)  # checked on exit
    # eager layers' smallest and largest score, tested together on exit
    extremes: list[tuple[int, torch.Tensor, torch.Tensor]] = field(default_factory=list)
    reach: int = 0  # the largest of positions
    placed: dict[torch.device, torch.Tensor] = field(default_factory=dict)  # positions there
    graphs: GraphedCalls = field(default_factory=GraphedCalls)
    owns_graphs: bool = True  # freed when the capture ends (else the caller's, kept)


_ACTIVE: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "rcstat_capture", default=None
)


def grouped_scores(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Raw scores ``q·kᵀ`` with grouped-query attention, without repeating keys.

    On CUDA, float16 / bfloat16 inputs are multiplied on tensor cores with float32 output
    (each product of two 8- or 11-bit mantissas is exact in float32 and the sums accumulate
    in float32, as in an upcast float32 product, at a fraction of its time); TF32 is never
    switched on.

    Parameters
    ----------
    query
        ``[batch, heads, q, dim]``.
    key
        ``[batch, kv_heads, k, dim]``; ``heads`` must be a multiple of ``kv_heads``.

    Returns
    -------
    torch.Tensor
        ``[batch, heads, q, k]`` in float32 (or float64 if the inputs are float64).
    """
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    half = (torch.float16, torch.bfloat16)
    if query.is_cuda and query.dtype in half and key.dtype == query.dtype and _has_out_dtype():
        q = query.reshape(batch * kv_heads, (heads // kv_heads) * q_len, dim)
        k = key.reshape(batch * kv_heads, key.shape[2], dim)
        scores = torch.bmm(q, k.transpose(1, 2), out_dtype=torch.float32)  # [B·Hkv, G·q, k]
        return scores.view(batch, heads, q_len, key.shape[2])
    dtype = torch.float64 if query.dtype == torch.float64 else torch.float32
    q = query.to(dtype).view(batch, kv_heads, heads // kv_heads, q_len, dim)
    k = key.to(dtype).unsqueeze(2)  # [batch, kv_heads, 1, k, dim]
    return (q @ k.transpose(-1, -2)).reshape(batch, heads, q_len, key.shape[2])


def all_finite(scores: torch.Tensor) -> torch.Tensor:
    """Whether every score is finite: a boolean tensor on the scores' device, read later.

    From the block's smallest and largest value (one reduction over the block: NaN carries
    into both, ``±inf`` into one), where ``isfinite(scores).all()`` takes five passes. A
    float64 sum would do too, but torch casts the whole block to float64 first.
    """
    return torch.isfinite(torch.stack(torch.aminmax(scores))).all()


@functools.cache
def _has_out_dtype() -> bool:
    """Whether this torch's ``bmm`` takes ``out_dtype`` (float32 output of half inputs)."""
    try:
        probe = torch.zeros(1, 1, 1, dtype=torch.bfloat16, device="cuda")
        torch.bmm(probe, probe, out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return False
    return True


def _attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered ``"rcstat"`` attention function (see the module docstring).

    ``dropout`` may come positionally: kvpress wraps every registered attention function at
    import and forwards it that way.
    """
    kwargs["dropout"] = dropout
    session = _ACTIVE.get()
    if session is None:  # switched model used outside a capture: behave like sdpa
        sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
        return sdpa(module, query, key, value, attention_mask, **kwargs)
    layer = int(getattr(module, "layer_idx", -1))
    if layer in session.layers:
        # query row r sits at absolute position kv_len - q_len + r (cache-aware)
        offset = key.shape[2] - query.shape[2]
        start = max(session.query_start - offset, 0)
        end = query.shape[2] if session.query_end is None else session.query_end - offset
        if session.positions is not None:
            rows = _rows_at(session, query, offset)
        elif start < end:
            rows = query[:, :, start:end]
        else:
            rows = None
        if rows is not None:
            scaling = float(kwargs.get("scaling") or module.scaling)  # type: ignore[arg-type]

            def reduce(
                rows: torch.Tensor, key: torch.Tensor, eager: bool = False
            ) -> tuple[Any, torch.Tensor | None]:
                """The layer's output and finiteness flag (None: its scores' extremes are
                kept instead, ``eager`` layers only)."""
                scores = grouped_scores(rows, key)  # [batch, head, q, k]
                if session.scaled:
                    scores = scores * scaling
                output = session.reducer(layer, scores)
                # the flag is read when the capture ends: no synchronisation per layer
                if session.finite is not None:
                    return output, session.finite(output)
                if eager:  # one reduction a layer; the extremes of all are tested on exit
                    session.extremes.append((layer, *torch.aminmax(scores)))
                    return output, None
                return output, all_finite(scores)

            graph_key = (
                None if session.graph_key is None or not query.is_cuda else session.graph_key(layer)
            )
            # a model split across GPUs: the layer's own device is the current one (kernels,
            # graphs and copies launch there)
            switch = query.is_cuda and query.device.index != torch.cuda.current_device()
            on_device = torch.cuda.device(query.device) if switch else nullcontext()
            with torch.no_grad(), on_device:
                if graph_key is None:
                    output, finite = reduce(rows, key, eager=True)
                else:
                    output, finite = session.graphs(
                        (graph_key, scaling), reduce, rows, key, hold=session.reducer
                    )
                if session.sink is not None:
                    output = session.sink(layer, output)
            if finite is not None:
                session.flags.append((layer, finite))
            session.result.per_layer[layer] = output
    return session.delegate(module, query, key, value, attention_mask, **kwargs)


def _rows_at(session: _Session, query: torch.Tensor, offset: int) -> torch.Tensor:
    """The query rows at each batch entry's own positions: ``[B, heads, Q, dim]``."""
    positions = session.positions
    assert positions is not None
    if positions.shape[0] != query.shape[0] or offset != 0 or session.reach >= query.shape[2]:
        raise ValueError(
            f"query_positions holds rows of {positions.shape[0]} sequences up to position "
            f"{session.reach} for a pass over {query.shape[0]} sequences of "
            f"{query.shape[2]} new tokens after {offset} cached ones: give one row of "
            "positions inside each sequence of a pass without a cache"
        )
    device = query.device
    if device not in session.placed:
        session.placed[device] = upload(positions, device)
    index = session.placed[device][:, None, :, None]  # [B, 1, Q, 1]
    return query.gather(2, index.expand(-1, query.shape[1], -1, query.shape[3]))


def _delegate_for(model: torch.nn.Module, implementation: str) -> Callable[..., Any]:
    if implementation in ALL_ATTENTION_FUNCTIONS:
        return ALL_ATTENTION_FUNCTIONS[implementation]
    # "eager" lives in each architecture's modeling module
    for sub in model.modules():
        module = __import__(type(sub).__module__, fromlist=["eager_attention_forward"])
        eager = getattr(module, "eager_attention_forward", None)
        if eager is not None:
            return eager
    raise UnsupportedModelError(
        f"cannot find the attention implementation {implementation!r} to delegate to"
    )


@contextmanager
def capture_scores(
    model: torch.nn.Module,
    reducer: Reducer[R],
    *,
    layers: Sequence[int] | None = None,
    query_start: int = 0,
    query_end: int | None = None,
    query_positions: torch.Tensor | None = None,
    scaled: bool = False,
    finite: Callable[[Any], torch.Tensor] | None = None,
    graph_key: Callable[[int], Hashable | None] | None = None,
    graphs: GraphedCalls | None = None,
    sink: Callable[[int, Any], Any] | None = None,
) -> Iterator[CaptureResult[R]]:
    """Run forward passes inside this context to reduce each layer's attention scores.

    Parameters
    ----------
    model
        A Hugging Face causal LM whose attention dispatches through ``AttentionInterface``.
    reducer
        ``reducer(layer, scores)`` with ``scores [batch, head, query, key]`` (float32, raw
        ``<q, k>`` unless ``scaled``; keys ``0 .. kv_len-1``, future keys included — apply
        causality in the reducer). Called once per layer, on the layer's device; return
        something small (per-head statistics), the block is freed afterwards.
    layers
        Layer indices to capture (default: all).
    query_start, query_end
        Absolute positions ``[query_start, query_end)`` of the query rows to keep.
    query_positions
        ``[batch, Q]`` int64: instead, the absolute positions of the rows to keep in each
        sequence of the batch (row ``r`` of sequence ``b`` is the query at
        ``query_positions[b, r]``), for batches of sequences of different lengths; passes
        without a cache only.
    scaled
        Multiply by the model's softmax scaling (``1/sqrt(d)``) instead of raw scores.
    finite
        ``finite(output)`` gives a layer's "no NaN / inf" flag (a boolean tensor) from its
        reducer output, for reducers whose results are non-finite whenever a score is
        (float64 sums over every score); by default every captured block is scanned, one
        extra pass over it per layer. Either way the flags are read when the capture ends.
    graph_key
        On CUDA, ``graph_key(layer)`` names the layers whose reduction may run as one CUDA
        graph (:mod:`rcstat.capture.graphs`): layers with the same key (and shapes) share a
        graph, recorded at the second such layer and replayed for the rest; ``None`` runs a
        layer eagerly. Only for reducers that never synchronise with the host and depend on
        the layer through the key alone.
    graphs
        The graphs to record into and replay from (:func:`~rcstat.capture.graphs.kept_graphs`),
        kept after the capture for later ones: a layer whose key and shapes were recorded by
        an earlier capture replays that graph (its reducer is not called), so the keys must
        then name everything the reducer's work depends on (a
        :meth:`~rcstat.capture.graphs.GraphedCalls.scope` number). ``None``: graphs of this
        capture only, freed when it ends.
    sink
        ``sink(layer, output)`` is called with each layer's reducer output (outside any
        graph) and its return value is kept instead, e.g. to move large results to the host
        as they come (:class:`~rcstat.capture.host.HostStack`).

    Yields
    ------
    CaptureResult
        Filled with the reducer outputs per layer as forward passes run.

    Raises
    ------
    FloatingPointError
        On leaving the context, if a captured layer's scores contained NaN or inf (the
        check is deferred so that the forward pass never waits for the device).
    """
    layout = attention_layout(model)
    chosen = tuple(range(layout.num_layers)) if layers is None else tuple(layers)
    bad = [layer for layer in chosen if not 0 <= layer < layout.num_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range: the model has {layout.num_layers} layers")
    if query_start < 0 or (query_end is not None and query_end <= query_start):
        raise ValueError(f"invalid query rows [{query_start}, {query_end})")
    if query_positions is not None and (
        query_positions.dim() != 2
        or query_positions.dtype != torch.long
        or not query_positions.numel()
        or bool((query_positions < 0).any())
    ):
        raise ValueError("query_positions must be a non-empty [batch, rows] int64 tensor >= 0")
    if query_positions is not None:
        query_positions = query_positions.cpu()
    if _ACTIVE.get() is not None:
        raise RuntimeError("capture_scores contexts cannot be nested")
    previous = current_implementation(model)
    # A custom name gets no mask unless a mask function is registered under it: use the
    # delegate's own (sdpa's returns None when nothing is padded; the delegate is causal then).
    mask = ALL_MASK_ATTENTION_FUNCTIONS._global_mapping.get(
        previous, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    )
    result: CaptureResult[R] = CaptureResult(layers=chosen)
    session = _Session(
        reducer=reducer,
        layers=frozenset(chosen),
        query_start=query_start,
        query_end=query_end,
        positions=query_positions,
        scaled=scaled,
        finite=finite,
        graph_key=graph_key,
        sink=sink,
        delegate=_delegate_for(model, previous),
        result=result,
        graphs=GraphedCalls() if graphs is None else graphs,
        owns_graphs=graphs is None,
        reach=0 if query_positions is None else int(query_positions.max()),
    )
    if query_positions is not None:  # copied before the pass, where a plain copy waits for nothing
        first = next((p.device for p in model.parameters() if p.is_cuda), None)
        if first is not None:
            session.placed[first] = query_positions.to(first)
    token = _ACTIVE.set(session)
    try:
        with switched_attention(model, IMPLEMENTATION, _attention, mask):
            yield result
    finally:
        _ACTIVE.reset(token)
        if session.owns_graphs:
            session.graphs.close()
    _raise_if_not_finite(session)


def _raise_if_not_finite(session: _Session) -> None:
    """Raise if a captured layer had NaN / inf scores (its reducer output is meaningless):
    the flags, and the extremes of the eager layers tested at once (as :func:`all_finite`
    tests one layer's), each copied to the host once per device."""
    layers = [layer for layer, _ in session.flags]
    ok: list[bool] = []
    if session.flags:
        ok += stack_on_host([flag for _, flag in session.flags]).tolist()
    if session.extremes:
        layers += [layer for layer, _, _ in session.extremes]
        values = stack_on_host([v for _, low, high in session.extremes for v in (low, high)])
        ok += torch.isfinite(values).view(-1, 2).all(-1).tolist()  # [n]: both extremes finite
    bad = [layer for layer, good in zip(layers, ok, strict=True) if not good]
    if bad:
        session.result.per_layer.clear()
        raise FloatingPointError(
            f"layer {min(bad)}: attention scores contain NaN or inf; the model's activations "
            "overflowed (try float32 or a shorter input)"
        )
