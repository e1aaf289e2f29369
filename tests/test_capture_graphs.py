"""What a graph replay hands out (copies of its output buffers in the outputs' own shape),
and how long graphs kept across calls live (the replays themselves: tests/test_gpu*.py)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from rcstat.capture.graphs import GraphedCalls, _cloned, kept_graphs, release_graphs
from rcstat.stats._gpu import causal_index, graph_constants


class _Pair(NamedTuple):
    first: torch.Tensor
    second: int


def test_every_tensor_is_copied_and_the_containers_kept() -> None:
    a, b, c = torch.ones(3), torch.zeros(2), torch.arange(4)
    outputs = ({"a": a, "pair": _Pair(b, 7)}, [c, "label"], 2.5)
    got = _cloned(outputs)
    assert isinstance(got, tuple) and isinstance(got[1], list) and isinstance(got[0]["pair"], _Pair)
    assert got[0]["pair"].second == 7 and got[1][1] == "label" and got[2] == 2.5
    for old, new in ((a, got[0]["a"]), (b, got[0]["pair"].first), (c, got[1][0])):
        assert torch.equal(old, new) and new.data_ptr() != old.data_ptr()
    a += 1  # the buffers are refilled by the next replay: the copies keep their values
    assert torch.equal(got[0]["a"], torch.ones(3))


def test_a_new_signature_frees_the_graphs_and_numbers_the_keys_anew() -> None:
    calls = GraphedCalls()
    first = calls.scope((2048, 256, False))
    calls._seen.add("layer key")  # as after a layer's eager call
    assert calls.scope((2048, 256, False)) == first and calls._seen
    assert calls.scope((2048, 64, False)) == first + 1 and not calls._seen


def test_cached_device_constants_are_held_by_the_graph_being_recorded() -> None:
    """What a recorded graph reads from a cache stays alive with the graph, even once the
    cache has let it go; outside a recording nothing is collected."""
    held: list = []
    token = graph_constants.set(held)
    try:
        index = causal_index(4, 10, 3, torch.device("cpu"))
    finally:
        graph_constants.reset(token)
    assert len(held) == 1 and held[0] is index
    assert causal_index(4, 10, 3, torch.device("cpu")) is index and len(held) == 1
    assert index.tolist() == [3, 13, 14, 23, 24, 25, 33, 34, 35, 36]


def test_kept_graphs_live_on_the_model_by_purpose_until_released() -> None:
    model = torch.nn.Linear(2, 2)
    graphs = kept_graphs(model, "analyze")
    assert kept_graphs(model, "analyze") is graphs
    assert kept_graphs(model, "attribution") is not graphs
    graphs._seen.add("layer key")
    release_graphs(model)
    assert not graphs._seen and kept_graphs(model, "analyze") is not graphs
