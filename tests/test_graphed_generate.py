"""rcstat.press.decoding: greedy generation on fixed buffers, each step replayable as a graph.

The oracle is transformers' own ``generate`` (greedy) on a copy of the same cache. Recording
is checked on the CPU with recorders whose replays keep the step's device work and drop its
host effects (``tests/_recorders.py``); with host values frozen at recording, under Triton's
interpreter (``tests/graphed_generate_cases.py``); and with real CUDA graphs on a GPU.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch
from transformers import DynamicCache, StaticCache

from rcstat.models.cache_argument import with_cache
from rcstat.press import RaggedCache, graphed_generate, ragged_attention
from rcstat.press import cache as cache_module
from rcstat.press.answer import attention_for
from rcstat.press.decoding import CHECK_EVERY, GraphedGeneration, _generate, _Step
from tests._decode_oracles import greedy_options
from tests._interpreter import run_cases
from tests._recorders import ReplayRecorder, host_fields
from tests._tiny_models import one_thread, tiny_model

_one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)

BATCH, PROMPT = 2, 20


def prompt_ids(seed: int = 0) -> torch.Tensor:
    """``[BATCH, PROMPT]`` random ids (no pad id 0)."""
    return torch.randint(1, 600, (BATCH, PROMPT), generator=torch.Generator().manual_seed(seed))


def compressed_cache(model: Any, ids: torch.Tensor, slack: int, seed: int = 1) -> RaggedCache:
    """All but the last prompt token in a RaggedCache (on the ids' device), every layer keeping
    a random ~60 % per (sequence, KV head) (the first entry always)."""
    gen = torch.Generator().manual_seed(seed)
    cache = RaggedCache(slack=slack)
    with torch.no_grad():
        model(ids[:, :-1], **with_cache(model, cache), use_cache=True)
    kv_heads = model.config.num_key_value_heads
    for layer in range(model.config.num_hidden_layers):
        keep = torch.rand(BATCH, kv_heads, PROMPT - 1, generator=gen) < 0.6
        keep[..., 0] = True
        cache.compress_layer(layer, keep.to(ids.device))
    return cache


def decode(
    model: Any,
    cache: Any,
    ids: torch.Tensor,
    new: int,
    recorder: Any,
    backend: Any,
    stops: Any = (),
) -> GraphedGeneration:
    """``graphed_generate``'s loop with the recorder and backend given."""
    return _generate(_Step.make(model, cache, ids[:, -1:], new, None, stops, 0), recorder, backend)


def generate_oracle(model: Any, cache: Any, ids: torch.Tensor, new: int) -> torch.Tensor:
    """transformers' greedy ``generate`` of exactly ``new`` tokens on ``cache``: ``[B, new]``."""
    with torch.no_grad(), attention_for(model, cache):
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), past_key_values=cache, **greedy_options(new)
        )
    return out.sequences[:, ids.shape[1] :]


def layer_state(cache: RaggedCache) -> list[tuple[Any, ...]]:
    """Everything a packed layer holds: live keys/values/positions per segment, host fields."""
    state = []
    for i in range(len(cache.layers)):
        packed = cache.layer(i).packed
        assert packed is not None
        rows = [
            torch.arange(int(packed.seg_start[s]), int(packed.seg_start[s]) + int(n))
            for s, n in enumerate(packed.seg_len.tolist())
        ]
        index = torch.cat(rows)
        state.append(
            (
                packed.keys[index],
                packed.values[index],
                packed.positions[index],
                packed.seg_len.clone(),
                int(packed.clock),
            )
        )
    return state


def assert_same_layers(a: RaggedCache, b: RaggedCache) -> None:
    assert host_fields(a) == host_fields(b)
    for left, right in zip(layer_state(a), layer_state(b), strict=True):
        for x, y in zip(left, right, strict=True):
            if isinstance(x, torch.Tensor):
                torch.testing.assert_close(x, y, rtol=0, atol=0)
            else:
                assert x == y


@pytest.mark.parametrize("slack", [1, 3, 64])
def test_eager_steps_equal_generate_on_a_compressed_cache(slack: int) -> None:
    model = tiny_model("llama")
    ids = prompt_ids()
    cache = compressed_cache(model, ids, slack)
    ours, theirs = copy.deepcopy(cache), copy.deepcopy(cache)
    result = graphed_generate(model, ours, ids[:, -1:], max_new_tokens=12)
    assert result.recorded == 0 and result.steps == 12  # CPU: eager
    assert torch.equal(result.tokens, generate_oracle(model, theirs, ids, 12))
    assert_same_layers(ours, theirs)  # appended rows, positions and host fields alike
    assert result.lengths.tolist() == [12, 12] and not result.finished.any()


def test_eager_steps_equal_generate_on_a_static_cache() -> None:
    model = tiny_model("llama")
    ids = prompt_ids(2)
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + 10)
    with torch.no_grad():
        model(ids[:, :-1], **with_cache(model, cache), use_cache=True)
    result = graphed_generate(model, cache, ids[:, -1:], max_new_tokens=10)
    assert torch.equal(result.tokens, generate_oracle(model, DynamicCache(), ids, 10))


@pytest.mark.parametrize("slack", [1, 2, 5])
def test_replays_keep_the_host_in_step_with_the_device(slack: int) -> None:
    """A recorder whose replays drop the step's host effects: the decoder's own bookkeeping
    must make the layers' host fields what eager steps make them, through every repack."""
    model = tiny_model("llama")
    ids = prompt_ids(3)
    cache = compressed_cache(model, ids, slack)
    eager, replayed = copy.deepcopy(cache), copy.deepcopy(cache)
    expected = graphed_generate(model, eager, ids[:, -1:], max_new_tokens=14, graphs=False)
    recorder = ReplayRecorder(replayed)
    result = decode(model, replayed, ids, 14, recorder, "auto")
    assert torch.equal(result.tokens, expected.tokens)
    assert_same_layers(replayed, eager)
    recordings, eager_steps = expected_recordings(slack, 14)
    assert result.recorded == recorder.recordings == recordings >= 1
    assert recorder.replays == 14 - eager_steps


@pytest.mark.parametrize("recorded", [False, True])
def test_a_repack_frees_each_layers_old_buffers_before_the_next_layers(recorded: bool) -> None:
    """All layers repack in the same step: were the old layouts held until its end, the peak
    would be two caches."""
    model = tiny_model("llama")
    ids = prompt_ids(4)
    cache = compressed_cache(model, ids, slack=1)
    replaced: list[weakref.ref[torch.Tensor]] = []
    real = cache_module.pack_rows

    def tracked(keys: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        held = sum(ref() is not None for ref in replaced)
        assert held == 0, f"{held} repacked layers' old keys are still held"
        replaced.append(weakref.ref(keys))
        return real(keys, *args, **kwargs)

    recorder = ReplayRecorder(cache) if recorded else None
    with mock.patch.object(cache_module, "pack_rows", tracked):
        decode(model, cache, ids, 8, recorder, "auto")
    assert len(replaced) >= 2 * len(cache.layers)  # two repacks of every layer


def expected_recordings(slack: int, total: int) -> tuple[int, int]:
    """(recordings, eager steps) of ``total`` steps from rooms of ``slack``: a step runs eagerly
    first and whenever a room is empty (the repack gives ``1 + max(slack, appended)`` rows);
    after it, a recording replays until the room is used up."""
    room, appended, steps, recordings, eager = slack, 0, 0, 0, 0
    while steps < total:
        if room == 0:
            room = 1 + max(slack, appended)
        room, appended, steps, eager = room - 1, appended + 1, steps + 1, eager + 1
        if room > 0 and steps < total:
            recordings += 1
            replays = min(room, total - steps)
            room, appended, steps = room - replays, appended + replays, steps + replays
    return recordings, eager


def test_a_stop_token_pads_the_rest_and_ends_when_all_are_done() -> None:
    model = tiny_model("llama")
    ids = prompt_ids(4)
    cache = compressed_cache(model, ids, 8)
    free = graphed_generate(model, copy.deepcopy(cache), ids[:, -1:], max_new_tokens=6)
    stop = int(free.tokens[0, 2])
    first = free.tokens[1].tolist().index(stop) if stop in free.tokens[1].tolist() else None
    result = graphed_generate(
        model, copy.deepcopy(cache), ids[:, -1:], max_new_tokens=6, stops={stop}, pad_token_id=0
    )
    assert result.tokens[0].tolist() == free.tokens[0, :2].tolist() + [0] * 4
    assert result.lengths[0] == 2 and bool(result.finished[0])
    assert bool(result.finished[1]) == (first is not None)
    # every sequence done: eager steps stop at once, replays at the next check
    both = {int(free.tokens[0, 0]), int(free.tokens[1, 0])}
    early = graphed_generate(
        model, copy.deepcopy(cache), ids[:, -1:], max_new_tokens=3 * CHECK_EVERY, stops=both
    )
    assert early.steps == 1 and early.finished.all()
    assert early.lengths.tolist() == [0, 0] and not early.tokens.any()
    replayed = compressed_cache(
        model, ids, 64
    )  # room for every replay: no eager step but the first
    recorder = ReplayRecorder(replayed)
    late = decode(model, replayed, ids, 3 * CHECK_EVERY, recorder, "auto", both)
    assert late.steps == CHECK_EVERY and late.finished.all() and not late.tokens.any()
    short = compressed_cache(model, ids, 8)  # the room runs out at step 8: checked before it
    recorder = ReplayRecorder(short)
    cut = decode(model, short, ids, 3 * CHECK_EVERY, recorder, "auto", both)
    assert cut.steps == 8 and cut.finished.all()


def test_positions_continue_each_rows_own_count() -> None:
    """Explicit positions (a left-padded row counts its real tokens): the tokens of a plain
    loop of forward passes with those position ids."""
    model = tiny_model("llama")
    ids = prompt_ids(5)
    cache = compressed_cache(model, ids, 4)
    start = torch.tensor([PROMPT - 1, PROMPT + 6])
    result = graphed_generate(
        model, copy.deepcopy(cache), ids[:, -1:], max_new_tokens=5, positions=start
    )
    by_hand, token = [], ids[:, -1:]
    with torch.no_grad(), ragged_attention(model):
        for step in range(5):
            logits = model(
                token, **with_cache(model, cache), position_ids=(start + step).view(2, 1)
            )
            token = logits.logits[:, -1].argmax(-1, keepdim=True)  # [B, 1]
            by_hand.append(token)
    assert torch.equal(result.tokens, torch.cat(by_hand, 1))
    default = graphed_generate(
        model, compressed_cache(model, ids, 4), ids[:, -1:], max_new_tokens=5
    )
    assert torch.equal(default.tokens[0], result.tokens[0])  # row 0 is at the default position
    assert not torch.equal(default.tokens[1], result.tokens[1])


def test_bad_input_is_refused_before_any_step() -> None:
    model = tiny_model("llama")
    ids = prompt_ids(6)
    cache = compressed_cache(model, ids, 4)
    before = host_fields(cache)
    with pytest.raises(ValueError, match=r"tokens must be \[batch, 1\] = \[2, 1\]"):
        graphed_generate(model, cache, ids[:1, -1:], max_new_tokens=4)
    with pytest.raises(TypeError, match="int64"):
        graphed_generate(model, cache, ids[:, -1:].int(), max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        graphed_generate(model, cache, ids[:, -1:], max_new_tokens=0)
    with pytest.raises(ValueError, match=r"positions must be a \[batch\] = \[2\] int64 tensor"):
        graphed_generate(model, cache, ids[:, -1:], max_new_tokens=4, positions=[19, 19])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"positions must be a \[batch\]"):
        graphed_generate(
            model, cache, ids[:, -1:], max_new_tokens=4, positions=torch.zeros(3).long()
        )
    with pytest.raises(ValueError, match="graphs=True cannot serve: the model runs on cpu"):
        graphed_generate(model, cache, ids[:, -1:], max_new_tokens=4, graphs=True)
    with pytest.raises(ValueError, match="the cache is empty"):
        graphed_generate(model, RaggedCache(), ids[:, -1:], max_new_tokens=4)
    short = StaticCache(config=model.config, max_cache_len=PROMPT + 2)
    with torch.no_grad():
        model(ids[:, :-1], **with_cache(model, short), use_cache=True)
    with pytest.raises(ValueError, match="the cache holds 22 positions: 19 cached"):
        graphed_generate(model, short, ids[:, -1:], max_new_tokens=4)
    assert host_fields(cache) == before


def test_a_failed_recording_leaves_the_cache_as_the_eager_step_left_it() -> None:
    model = tiny_model("llama")
    ids = prompt_ids(11)
    cache = compressed_cache(model, ids, 4)
    eager = copy.deepcopy(cache)
    graphed_generate(model, eager, ids[:, -1:], max_new_tokens=1)

    def failing(step: Any) -> Any:
        step()  # the host code runs, as in a CUDA recording, then the recording fails
        raise RuntimeError("recording failed")

    with pytest.raises(RuntimeError, match="recording failed"):
        decode(model, cache, ids, 4, failing, "auto")
    assert host_fields(cache)[0][0] == PROMPT  # the device clock and the host agree again
    assert [f[:2] for f in host_fields(cache)] == [f[:2] for f in host_fields(eager)]


def test_it_enters_its_own_ragged_attention() -> None:
    model = tiny_model("llama")
    ids = prompt_ids(12)
    cache = compressed_cache(model, ids, 4)
    with ragged_attention(model), pytest.raises(RuntimeError, match="call it outside one"):
        graphed_generate(model, cache, ids[:, -1:], max_new_tokens=2)
    assert host_fields(cache)[0][0] == PROMPT - 1


def test_graphs_need_a_cache_that_keeps_its_shapes() -> None:
    """Why graphs cannot serve, named (the device check aside, which the CPU cannot pass)."""
    from rcstat.press.decoding import _why_not_graphs

    cuda = torch.device("cuda")
    model = tiny_model("llama")
    ids = prompt_ids(7)
    dense = RaggedCache()
    with torch.no_grad():
        model(ids[:, :-1], **with_cache(model, dense), use_cache=True)
    dense.compress_layer(0, torch.ones(BATCH, 2, PROMPT - 1, dtype=torch.bool))
    reason = _why_not_graphs(dense, cuda)
    assert reason is not None and "layers [1, 2] of the RaggedCache are dense" in reason
    reason = _why_not_graphs(DynamicCache(), cuda)
    assert reason is not None and "a DynamicCache changes shape every step" in reason
    assert _why_not_graphs(compressed_cache(model, ids, 2), cuda) is None
    assert _why_not_graphs(StaticCache(config=model.config, max_cache_len=8), cuda) is None


@contextlib.contextmanager
def no_host_reads() -> Iterator[None]:
    """Every way Python reads a tensor's value raises: on CUDA each would wait for the device,
    which a graph recording refuses."""

    def refuse(name: str) -> Any:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"the step read a value back from the device (Tensor.{name})")

        return read

    with contextlib.ExitStack() as stack:
        for name in ("item", "tolist", "__bool__", "__int__", "__float__", "numpy"):
            stack.enter_context(mock.patch.object(torch.Tensor, name, refuse(name)))
        yield


@pytest.mark.parametrize("kind", ["ragged", "static"])
def test_a_step_reads_nothing_back_from_the_device(kind: str) -> None:
    """The step's host code — rcstat's and transformers' — never reads a tensor's value, so it
    can be recorded (the CPU runs the padded reference attention; the split kernel's launch
    reads host integers only, ``tests/test_press_decode_kernel.py``)."""
    model = tiny_model("llama")
    ids = prompt_ids(10)
    if kind == "ragged":
        cache: Any = compressed_cache(model, ids, 4)
        session: Any = ragged_attention(model)
    else:
        cache = StaticCache(config=model.config, max_cache_len=PROMPT + 4)
        with torch.no_grad():
            model(ids[:, :-1], **with_cache(model, cache), use_cache=True)
        session = contextlib.nullcontext()
    step = _Step.make(model, cache, ids[:, -1:], 3, None, {5}, 0)
    with torch.no_grad(), session:
        step()
        with no_host_reads():
            step()
        with no_host_reads(), pytest.raises(AssertionError, match=r"Tensor.__bool__"):
            bool(step.done.all())  # the check itself reads


@pytest.mark.long(seconds=35)  # under the interpreter, one core
def test_frozen_host_replays_under_the_interpreter() -> None:
    run_cases("tests/graphed_generate_cases.py")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("slack", [1, 4])
def test_cuda_graphs_equal_eager_steps(slack: int) -> None:
    """Real CUDA graphs against eager steps through the same split-KV kernel."""
    model = copy.deepcopy(tiny_model("llama")).cuda()
    ids = prompt_ids(8).cuda()
    cache = compressed_cache(model, ids, slack)
    eager, graphed = copy.deepcopy(cache), copy.deepcopy(cache)
    expected = decode(model, eager, ids, 20, None, "split")
    result = graphed_generate(model, graphed, ids[:, -1:], max_new_tokens=20, graphs=True)
    assert result.recorded >= 1
    assert torch.equal(result.tokens, expected.tokens)
    assert_same_layers(graphed, eager)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graphs_on_a_static_cache_equal_eager_steps() -> None:
    """The full-cache baseline of ``bench_generate --graphs``: real graphs on a StaticCache
    give the eager steps' tokens and leave the cache as they do."""
    model = copy.deepcopy(tiny_model("llama")).cuda()
    ids = prompt_ids(9).cuda()
    caches = []
    for _ in range(2):
        cache = StaticCache(config=model.config, max_cache_len=PROMPT + 20)
        with torch.no_grad():
            model(ids[:, :-1], **with_cache(model, cache), use_cache=True)
        caches.append(cache)
    eager = graphed_generate(model, caches[0], ids[:, -1:], max_new_tokens=20, graphs=False)
    graphed = graphed_generate(model, caches[1], ids[:, -1:], max_new_tokens=20, graphs=True)
    assert graphed.recorded == 1 and eager.recorded == 0
    assert torch.equal(graphed.tokens, eager.tokens)
    for a, b in zip(caches[0].layers, caches[1].layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
