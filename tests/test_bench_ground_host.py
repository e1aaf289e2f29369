"""``benchmarks/bench_ground_host.py`` on a tiny tokenizer (no timing asserted): every stage
runs on the inputs of ``bench_gpu``'s grounding rows and the row names them."""

from __future__ import annotations

import pytest

from benchmarks import bench_ground_host as bench
from tests._tiny_models import one_thread
from tests._tiny_tokenizer import make_tiny_tokenizer

_one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


def test_each_host_stage_is_timed_for_the_asked_sizes() -> None:
    grounder = bench._grounder(make_tiny_tokenizer())
    row = bench.stages(grounder, prompt=96, gen=24, rounds=2)
    assert (row["prompt"], row["gen"]) == (96, 24)
    assert row["tokens"] > 96 + 24  # the context, the response and the template
    stages = ("tokenize_ms", "prepare_ms", "texts_during_pass_ms", "combine_ms")
    assert all(row[name] > 0 for name in stages)
