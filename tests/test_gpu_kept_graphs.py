"""Graphs kept on a model from one call to the next (``rcstat.capture.graphs.kept_graphs``):
a later call of the same lengths replays every layer from the first call's graphs, and its
statistics are those of eager layers; other lengths or spans record anew."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rcstat.analysis import analyze_segmented
from rcstat.capture.graphs import kept_graphs, release_graphs
from rcstat.segments import Segmented
from rcstat.stats import _gpu
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

FIELDS = ("expected", "upper", "normalized")


def _example(prompt: int, gen: int, seed: int) -> Segmented:
    ids = torch.randint(0, 600, (1, prompt + gen), generator=torch.Generator().manual_seed(seed))
    return Segmented(ids, prompt, "", ((0, 0),) * (prompt + gen), {})


def _overwrite_freed_memory() -> None:
    """Fill the allocator's free blocks with NaN: a graph that read a freed tensor would
    replay garbage."""
    junk = [torch.full((1 << 16,), float("nan"), device="cuda") for _ in range(64)]
    del junk


def test_later_analyses_of_the_same_lengths_replay_the_first_calls_graphs() -> None:
    model = copy.deepcopy(tiny_model("llama")).cuda()
    layers = model.config.num_hidden_layers
    eager_layers = [(layer, 0) for layer in range(layers)]  # kept samples: every layer eager
    first = analyze_segmented(model, _example(40, 12, seed=0))
    graphs = kept_graphs(model, "analyze")
    recorded = dict(graphs._graphs)
    assert recorded and all(graph is not None for graph in recorded.values())
    _gpu._causal_index.cache_clear()  # the graph holds the index its replays read
    _overwrite_freed_memory()
    for seed in (1, 2):
        example = _example(40, 12, seed)
        again = analyze_segmented(model, example)
        assert all(graphs._graphs[key] is graph for key, graph in recorded.items())  # replayed
        assert graphs._graphs.keys() == recorded.keys()  # nothing recorded anew
        eager = analyze_segmented(model, example, keep_samples=eager_layers)
        for field in FIELDS:
            np.testing.assert_array_equal(getattr(again, field), getattr(eager, field))
            assert not np.array_equal(getattr(again, field), getattr(first, field))
    other = analyze_segmented(model, _example(30, 9, seed=3))  # other lengths: recorded anew
    assert graphs._graphs and not set(graphs._graphs) & set(recorded)
    eager = analyze_segmented(model, _example(30, 9, seed=3), keep_samples=eager_layers)
    for field in FIELDS:
        np.testing.assert_array_equal(getattr(other, field), getattr(eager, field))
    release_graphs(model)
    assert not graphs._graphs and kept_graphs(model, "analyze") is not graphs


def test_attributions_replaying_kept_graphs_equal_the_cpu() -> None:
    """The same call twice (the second replays every layer), another answer (recorded anew)
    and the first again: each equals the CPU's."""
    from rcstat.attribution import Attributor

    tok = make_tiny_tokenizer()
    chunks = ["The cat sat on the mat by the door.", "The dog slept in the garden all day."]
    calls = [
        (chunks, "Where did the dog sleep?", "The dog slept in the garden. The cat sat down."),
        (chunks, "Where did the cat sit?", "The cat sat on the mat."),
    ]
    cpu = Attributor(tiny_model("llama"), tok, top_k=5)
    model = copy.deepcopy(tiny_model("llama")).cuda()
    gpu = Attributor(model, tok, top_k=5)
    for args in (calls[0], calls[0], calls[1], calls[0]):
        _overwrite_freed_memory()
        got, want = gpu.attribute(*args), cpu.attribute(*args)
        for field in ("per_head", "ranking", "token_scores", "attention"):
            np.testing.assert_allclose(
                getattr(got, field), getattr(want, field), rtol=1e-4, atol=1e-5
            )
        assert got.attributed == want.attributed
    assert kept_graphs(model, "attribution")._graphs
