"""Cases for rcstat.press.decoding under Triton's interpreter: replays that see the host as it
was when their step was recorded (as a CUDA graph's kernels do), through the split-KV kernel.

Run in a fresh process with ``TRITON_INTERPRET=1`` by ``tests/test_graphed_generate.py`` (the
name does not start with ``test_``, so the main run does not collect it)."""

from __future__ import annotations

import copy
import os

import pytest

from tests._recorders import ReplayRecorder
from tests._tiny_models import tiny_model
from tests.test_graphed_generate import assert_same_layers, compressed_cache, decode, prompt_ids


@pytest.fixture(autouse=True)
def interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through tests/test_graphed_generate.py (needs TRITON_INTERPRET=1)")


@pytest.mark.parametrize("slack", [1, 3])
def test_replays_with_frozen_host_values_equal_eager_steps(slack: int) -> None:
    """A recorded step replays until a room runs out; it may read from the host only what
    stays fixed till then (the kernel's row bound), and appends at the device clock."""
    model = tiny_model("llama")
    ids = prompt_ids(9)
    cache = compressed_cache(model, ids, slack)
    eager, replayed = copy.deepcopy(cache), copy.deepcopy(cache)
    expected = decode(model, eager, ids, 9, None, "split")
    recorder = ReplayRecorder(replayed, stale=True)
    result = decode(model, replayed, ids, 9, recorder, "split")
    assert recorder.replays > 0
    assert (result.tokens == expected.tokens).all()
    assert_same_layers(replayed, eager)
