"""Replay a per-layer reduction as a CUDA graph when its shapes repeat.

A reduction of one layer's scores launches tens of small kernels; on short inputs their
launch cost, not their work, is what the statistics add to a forward pass. Every layer of a
model has the same shapes, so the capture records the reduction of one layer as a CUDA graph
and replays it for the others: the first call of a key runs eagerly (it compiles kernels and
fills caches), the second is captured and replayed, later ones are replayed. Inputs are copied
into the graph's static buffers; outputs are cloned out of them. Graphs live as long as the
:class:`GraphedCalls` — one capture context, so their memory is one layer's reduction — or,
from :func:`kept_graphs`, as long as calls of one signature follow each other on a model:
the eager first layer and the recording took an analyze call at 2,048 + 256 tokens about
18 ms of its 109 (H200, docs/benchmarks.md §6.14), which later calls of the same shapes no
longer pay.

A function run this way must not synchronise with the host and must depend on its inputs
only (any other dependence belongs in the key). A key whose capture fails runs eagerly. What a
graph reads besides its inputs stays alive with it: the ``hold`` object of the call that
recorded it (the reducer and the constants it uploaded) and the cached device constants of
:mod:`rcstat.stats` it used (``stats._gpu.graph_constants``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from rcstat.stats._gpu import graph_constants


@dataclass
class _Graph:
    inputs: list[torch.Tensor]
    graph: torch.cuda.CUDAGraph
    outputs: Any
    held: list[Any]  # what the graph reads besides its inputs and its own memory


class GraphedCalls:
    """Calls of functions of CUDA tensors, replayed as CUDA graphs per key (see module doc)."""

    def __init__(self) -> None:
        self._graphs: dict[Hashable, _Graph | None] = {}  # None: eager only
        self._seen: set[Hashable] = set()
        self._streams: dict[torch.device, torch.cuda.Stream] = {}
        self._signature: Hashable = None
        self._generation = 0

    def __call__(
        self, key: Hashable, fn: Callable[..., Any], *inputs: torch.Tensor, hold: Any = None
    ) -> Any:
        """``fn(*inputs)``, eagerly the first time ``key`` is seen, from a graph afterwards.

        ``hold`` is kept alive as long as the graph recorded by this call (e.g. the object
        whose tensors ``fn`` reads), for graphs that outlive the call.
        """
        device = inputs[0].device
        full_key = (key, device, *((x.shape, x.dtype) for x in inputs))
        if full_key not in self._seen:
            self._seen.add(full_key)
            return fn(*inputs)
        if full_key not in self._graphs:
            self._graphs[full_key] = self._capture(device, fn, inputs, hold)
        entry = self._graphs[full_key]
        if entry is None:
            return fn(*inputs)
        for static, value in zip(entry.inputs, inputs, strict=True):
            static.copy_(value)
        entry.graph.replay()
        return _cloned(entry.outputs)

    def close(self) -> None:
        """Free every graph and its memory."""
        self._graphs.clear()
        self._seen.clear()

    def scope(self, signature: Hashable) -> int:
        """Keep the graphs while calls share ``signature`` (whatever, besides the keys and
        shapes, decides the work of the functions run): a different one frees every graph
        first. Returns the signature's number, to be put in the keys, so that a key names
        one signature's work (compared once here, not at every call)."""
        if signature != self._signature:
            self.close()
            self._signature = signature
            self._generation += 1
        return self._generation

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    def _capture(
        self,
        device: torch.device,
        fn: Callable[..., Any],
        inputs: tuple[torch.Tensor, ...],
        hold: Any,
    ) -> _Graph | None:
        stream, current = self._stream(device), torch.cuda.current_stream(device)
        static = [value.clone() for value in inputs]
        graph = torch.cuda.CUDAGraph()
        constants: list[torch.Tensor] = []  # the cached device constants fn reads
        stream.wait_stream(current)
        token = graph_constants.set(constants)
        try:
            with torch.cuda.stream(stream):
                graph.capture_begin()
                try:
                    outputs = fn(*static)
                finally:
                    graph.capture_end()
        except RuntimeError:  # the function synchronises or is not capturable
            current.wait_stream(stream)
            return None
        finally:
            graph_constants.reset(token)
        current.wait_stream(stream)
        return _Graph(static, graph, outputs, [hold, constants])


#: Per model, the graphs kept across calls by purpose (see :func:`kept_graphs`).
_KEPT: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, GraphedCalls]] = (
    weakref.WeakKeyDictionary()
)


def kept_graphs(model: torch.nn.Module, purpose: str) -> GraphedCalls:
    """The graphs that calls of one ``purpose`` (``"analyze"``, ``"attribution"``) keep on
    ``model`` from one call to the next (:meth:`GraphedCalls.scope` says for how long). They
    hold one layer's reduction of GPU memory each after a call; :func:`release_graphs` frees
    them, as does deleting the model."""
    return _KEPT.setdefault(model, {}).setdefault(purpose, GraphedCalls())


def release_graphs(model: torch.nn.Module) -> None:
    """Free the graphs that calls kept on ``model`` (:func:`kept_graphs`) and their memory."""
    for graphs in _KEPT.pop(model, {}).values():
        graphs.close()


def _cloned(outputs: Any) -> Any:
    """``outputs`` with every tensor cloned out of the graph's buffers (tensors inside dicts,
    tuples and lists; anything else as is). A walk of these few containers costs less host
    time a layer than a general pytree map."""
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if isinstance(outputs, dict):
        return {name: _cloned(value) for name, value in outputs.items()}
    if isinstance(outputs, tuple) and hasattr(outputs, "_fields"):  # a named tuple
        return type(outputs)(*(_cloned(value) for value in outputs))
    if isinstance(outputs, tuple | list):
        return type(outputs)(_cloned(value) for value in outputs)
    return outputs
