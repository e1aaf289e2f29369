"""Replay a per-layer reduction as a CUDA graph when its shapes repeat.

A reduction of one layer's scores launches tens of small kernels; on short inputs their
launch cost, not their work, is what the statistics add to a forward pass. Every layer of a
model has the same shapes, so the capture records the reduction of one layer as a CUDA graph
and replays it for the others: the first call of a key runs eagerly (it compiles kernels and
fills caches), the second is captured and replayed, later ones are replayed. Inputs are copied
into the graph's static buffers; outputs are cloned out of them. Graphs live as long as the
:class:`GraphedCalls` (one capture context), so their memory is one layer's reduction.

A function run this way must not synchronise with the host and must depend on its inputs
only (any other dependence belongs in the key). A key whose capture fails runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class _Graph:
    inputs: list[torch.Tensor]
    graph: torch.cuda.CUDAGraph
    outputs: Any


class GraphedCalls:
    """Calls of functions of CUDA tensors, replayed as CUDA graphs per key (see module doc)."""

    def __init__(self) -> None:
        self._graphs: dict[Hashable, _Graph | None] = {}  # None: eager only
        self._seen: set[Hashable] = set()
        self._streams: dict[torch.device, torch.cuda.Stream] = {}

    def __call__(self, key: Hashable, fn: Callable[..., Any], *inputs: torch.Tensor) -> Any:
        """``fn(*inputs)``, eagerly the first time ``key`` is seen, from a graph afterwards."""
        device = inputs[0].device
        full_key = (key, device, *((x.shape, x.dtype) for x in inputs))
        if full_key not in self._seen:
            self._seen.add(full_key)
            return fn(*inputs)
        if full_key not in self._graphs:
            self._graphs[full_key] = self._capture(device, fn, inputs)
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

    def _stream(self, device: torch.device) -> torch.cuda.Stream:
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    def _capture(
        self, device: torch.device, fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]
    ) -> _Graph | None:
        stream, current = self._stream(device), torch.cuda.current_stream(device)
        static = [value.clone() for value in inputs]
        graph = torch.cuda.CUDAGraph()
        stream.wait_stream(current)
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
        current.wait_stream(stream)
        return _Graph(static, graph, outputs)


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
