"""rcstat.press.decode_kernel: the split-KV decode kernel of the packed cache.

On the CPU: its cases under Triton's interpreter (``tests/decode_kernel_cases.py``, run in a
fresh process), the split plan from host integers, and the dispatch of ``packed_attention``.
On a GPU (``pytest -m gpu``): fp16/bf16 against a float64 oracle, CUDA-graph replay, no host
synchronisation, and greedy decoding of a model against the dense cache."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from rcstat.press import RaggedCache, packed_attention, ragged_attention
from tests._decode_oracles import (
    decode_logits,
    greedy_options,
    naive_attention,
    padded_generate,
    ragged_layout,
)
from tests._interpreter import run_cases
from tests._tiny_models import tiny_model

ROOT = Path(__file__).resolve().parents[1]
CASES = "tests/decode_kernel_cases.py"


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The query shape of every call of the split kernel (CUDA tests)."""
    import rcstat.press.decode_kernel as kernel

    calls: list[Any] = []
    original = kernel.split_decode_attention

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(kernel, "split_decode_attention", spy)
    return calls


@pytest.mark.long(seconds=110)  # under the interpreter, one core
def test_kernel_cases_under_the_interpreter_match_the_oracles() -> None:
    out = run_cases(CASES, PYTHONWARNINGS="ignore::DeprecationWarning")
    assert "skipped" not in out, out[-2000:]


def test_the_cpu_path_does_not_load_the_kernel() -> None:
    """``import rcstat.press`` loads nothing; the CPU path never imports the kernel's module
    (transformers' ``modeling_utils`` may import Triton itself where it is installed)."""
    code = (
        "import sys, torch\n"
        "import rcstat.press\n"
        "assert 'triton' not in sys.modules, 'rcstat.press imported triton'\n"
        "from rcstat.press import RaggedCache, packed_attention\n"
        "cache = RaggedCache(slack=2)\n"
        "kv = torch.randn(1, 2, 5, 8)\n"
        "cache.update(kv, kv.clone(), 0)\n"
        "cache.compress_layer(0, torch.ones(1, 2, 5, dtype=torch.bool))\n"
        "cache.layer(0).update(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8))\n"
        "packed_attention(torch.randn(1, 4, 1, 8), cache.layer(0).packed, scaling=0.3)\n"
        "assert 'rcstat.press.decode_kernel' not in sys.modules, 'kernel loaded on the CPU'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


def test_split_backend_needs_cuda_or_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    packed = ragged_layout([3, 4], 2, 8, torch.Generator().manual_seed(0), kv_heads=2)
    query = torch.randn(1, 4, 1, 8)
    with pytest.raises(RuntimeError, match="split-KV"):
        packed_attention(query, packed, scaling=0.3, backend="split")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="one query per head"):  # a continuation: q = 2
        packed_attention(torch.randn(1, 4, 2, 8), packed, scaling=0.3, backend="split")
    with pytest.raises(ValueError, match="'split'"):
        packed_attention(query, packed, scaling=0.3, backend="flash")  # type: ignore[arg-type]


def test_the_kernel_refuses_what_it_cannot_read() -> None:
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import split_decode_attention

    packed = ragged_layout([3, 4], 2, 16, torch.Generator().manual_seed(0), kv_heads=2)
    with pytest.raises(ValueError, match="bfloat16"):  # a tl.dot of mixed dtypes
        split_decode_attention(torch.randn(1, 4, 1, 16).bfloat16(), packed, 0.25)
    with pytest.raises(ValueError, match="one query per head"):
        split_decode_attention(torch.randn(1, 4, 3, 16), packed, 0.25)


# -- the split plan: host integers only ----------------------------------------------------------


def test_the_split_plan_takes_host_integers_only() -> None:
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import split_plan

    with pytest.raises(TypeError, match="rows must be a host int"):
        split_plan(8, torch.tensor(4096), 9000, 128, 132)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capacity must be a host int"):
        split_plan(8, 4096, torch.tensor(9000), 128, 132)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="segments must be a host int"):
        split_plan(torch.tensor(8), 4096, 9000, 128, 132)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sms must be >= 1"):
        split_plan(8, 4096, 9000, 128, 0)
    with pytest.raises(ValueError, match="capacity must be >= 0"):
        split_plan(8, 4096, -1, 128, 132)


@settings(deadline=None)  # the first example imports Triton and the kernel module
@given(
    segments=st.integers(1, 1024),
    rows=st.integers(0, 300_000),
    dim=st.sampled_from([16, 64, 128, 256]),
    sms=st.integers(1, 200),
)
def test_the_split_plan_covers_every_row_and_fills_the_device(
    segments: int, rows: int, dim: int, sms: int
) -> None:
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import _MAX_SPLITS, _WAVES, split_plan

    plan = split_plan(segments, rows, segments * rows, dim, sms)
    assert plan.work_list == (4 * segments <= sms)  # few segments: a work list
    if plan.work_list:
        return  # its own test below
    assert plan.splits * plan.chunk >= rows  # every live row is read
    assert plan.chunk % plan.block_n == 0 and plan.chunk >= plan.block_n
    assert rows == 0 or (plan.splits - 1) * plan.chunk < rows  # no split past the bound
    assert 1 <= plan.splits <= _MAX_SPLITS
    # about _WAVES programs per SM, unless the segments are too short to split further
    tiles = -(-rows // plan.block_n)
    floor = min(_WAVES * sms, segments * _MAX_SPLITS, segments * tiles)
    assert floor <= 2 * segments * plan.splits <= 2 * (_WAVES * sms + segments)


def test_the_default_config_is_the_launch_of_a_head_dim() -> None:
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import KernelConfig, kernel_config, split_plan

    assert kernel_config(64) == KernelConfig(block_n=128, num_warps=4, num_stages=3)
    assert kernel_config(128).block_n == 64 and kernel_config(256).block_n == 32
    assert kernel_config(128).pv == "auto"
    assert kernel_config(128).for_dtype(torch.bfloat16).pv == "half2"
    assert kernel_config(128).for_dtype(torch.float16).pv == "half2"
    for dim in (64, 128, 256):
        for segments in (8, 64):
            plan = split_plan(segments, 12_000, 65_600, dim, 132)
            config = kernel_config(dim)
            assert plan == split_plan(segments, 12_000, 65_600, dim, 132, config=config)
            assert plan.work_list == (segments == 8)
    for bad in (
        dict(block_n=48),
        dict(block_n=8),
        dict(block_n=64, num_warps=3),
        dict(block_n=64, num_stages=0),
        dict(block_n=64, waves=0),
        dict(block_n=64, pv="bf16"),
    ):
        with pytest.raises(ValueError):
            KernelConfig(**bad)  # type: ignore[arg-type]


@settings(deadline=None)  # the first example imports Triton and the kernel module
@given(
    segments=st.integers(1, 1024),
    rows=st.integers(0, 300_000),
    block_n=st.sampled_from([16, 32, 64, 128, 256]),
    waves=st.sampled_from([1, 2, 4, 8]),
    sms=st.integers(1, 200),
)
def test_a_plan_from_any_config_covers_every_row_and_aims_at_its_waves(
    segments: int, rows: int, block_n: int, waves: int, sms: int
) -> None:
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import _MAX_SPLITS, KernelConfig, split_plan

    config = KernelConfig(block_n=block_n, waves=waves, work_list=False)
    plan = split_plan(segments, rows, segments * rows, 128, sms, config=config)
    assert plan.block_n == block_n and not plan.work_list
    assert plan.splits * plan.chunk >= rows
    assert plan.chunk % block_n == 0 and plan.chunk >= block_n
    assert rows == 0 or (plan.splits - 1) * plan.chunk < rows
    assert 1 <= plan.splits <= _MAX_SPLITS
    tiles = -(-rows // block_n)
    floor = min(waves * sms, segments * _MAX_SPLITS, segments * tiles)
    assert floor <= 2 * segments * plan.splits <= 2 * (waves * sms + segments)


@settings(deadline=None)  # the first example imports Triton and the kernel module
@given(
    lengths=st.lists(st.integers(0, 5000), min_size=1, max_size=64),
    room=st.integers(0, 300),
    block_n=st.sampled_from([16, 64, 128]),
    waves=st.sampled_from([None, 1, 2, 4]),
    sms=st.integers(1, 200),
)
def test_a_work_list_has_a_program_for_every_chunk_and_about_waves_per_sm(
    lengths: list[int], room: int, block_n: int, waves: int | None, sms: int
) -> None:
    """The plan is made from the capacity (live rows + room of every segment) before any token
    is appended; the chunks of the lengths at any later step (each segment grown by at most its
    room) fit in its programs, counted here one segment at a time."""
    pytest.importorskip("triton")
    from rcstat.press.decode_kernel import KernelConfig, split_plan

    segments, capacity = len(lengths), sum(lengths) + len(lengths) * room
    config = KernelConfig(block_n=block_n, waves=waves, work_list=True)
    plan = split_plan(segments, max(lengths) + room, capacity, 128, sms, config=config)
    assert plan.work_list and plan.block_n == block_n and plan.chunk % 16 == 0
    full = sum(-(-(n + room) // plan.chunk) for n in lengths)  # every room filled
    assert sum(-(-n // plan.chunk) for n in lengths) <= full <= plan.splits
    slots = (1 if waves is None else waves) * sms
    assert plan.splits <= slots + segments - 1  # at most one short chunk per segment beyond
    if capacity >= 16 * slots:  # chunks as short as the capacity allows
        assert -(-capacity // plan.chunk) >= slots // 2


# -- CUDA --------------------------------------------------------------------------------------


def _lengths(segments: int, longest: int, gen: torch.Generator) -> list[int]:
    lengths = torch.randint(0, longest + 1, (segments,), generator=gen).tolist()
    lengths[0], lengths[-1], lengths[segments // 2] = 0, 1, longest
    return lengths


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("splits", ["plan", "one", "per segment"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_half_precision_on_cuda_within_2e_3_of_float64(
    dtype: torch.dtype, dim: int, group: int, splits: str
) -> None:
    """Relative error ``‖out − r(oracle)‖ / ‖oracle‖ <= 2e-3``, with ``r`` the rounding to the
    output dtype (rounding alone costs bf16 ~1.7e-3 against the exact oracle), and every element
    within one unit in the last place of it."""
    from rcstat.press.decode_kernel import KernelConfig, SplitPlan, split_decode_attention

    gen = torch.Generator().manual_seed(dim * group)
    batch, kv_heads = 2, 4
    lengths = _lengths(batch * kv_heads, 3000, gen)
    packed = ragged_layout(lengths, 7, dim, gen, kv_heads=kv_heads, dtype=dtype, device="cuda")
    query = torch.randn(batch, kv_heads * group, 1, dim, generator=gen).to("cuda", dtype)
    block_n = 64 if dim < 256 else 32
    plan = SplitPlan(1, 3072, block_n) if splits == "one" else None  # "plan": a work list here
    config = KernelConfig(block_n, work_list=False) if splits == "per segment" else None
    got = split_decode_attention(query, packed, dim**-0.5, plan, config=config).cpu()
    want = naive_attention(query, packed, dim**-0.5)
    rounded = want.to(dtype).double()
    assert (got.double() - rounded).norm() <= 2e-3 * want.norm()
    ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    torch.testing.assert_close(got.double(), want, rtol=ulp, atol=1e-4)
    if splits == "plan":  # at least as accurate as the padded reference in the same dtype
        ref = packed_attention(query, packed, scaling=dim**-0.5, backend="reference").cpu()
        live = torch.tensor(lengths).view(batch, kv_heads).repeat_interleave(group, 1) > 0
        exact = want[:, 0][live]
        error = (got[:, 0][live].double() - exact).norm()
        assert error <= max((ref[:, 0][live].double() - exact).norm(), 2e-3 * exact.norm())


def _decode_layer(dtype: torch.dtype, slack: int) -> tuple[RaggedCache, torch.Generator]:
    gen = torch.Generator().manual_seed(7)
    batch, kv_heads, length, dim = 2, 8, 2000, 128
    keys, values = (torch.randn(batch, kv_heads, length, dim, generator=gen) for _ in "kv")
    shares = torch.rand(batch, kv_heads, 1, generator=gen)
    keep = torch.rand(batch, kv_heads, length, generator=gen) < shares
    keep[..., -1] = True
    cache = RaggedCache(slack=slack)
    cache.update(keys.to("cuda", dtype), values.to("cuda", dtype), 0)
    cache.compress_layer(0, keep.cuda())
    return cache, gen


def _token(gen: torch.Generator, dtype: torch.dtype, heads: int = 8) -> torch.Tensor:
    return torch.randn(2, heads, 1, 128, generator=gen).to("cuda", dtype)


@pytest.mark.parametrize("work_list", [True, False])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graph_replay_of_later_steps_equals_eager(work_list: bool) -> None:
    """A graph recorded at one step replays the next ones (appended in place, no repack): the
    plan depends on ``max_len + room`` and the capacity only, the kernels read ``seg_len`` on the
    device. Both layouts of the plan; the work list's chunks grow in number as tokens come."""
    from rcstat.press.decode_kernel import KernelConfig, split_decode_attention

    config = KernelConfig(block_n=64, work_list=work_list)

    def attend(query: torch.Tensor, packed: Any) -> torch.Tensor:
        return split_decode_attention(query, packed, 128**-0.5, config=config)

    dtype = torch.bfloat16
    cache, gen = _decode_layer(dtype, slack=16)
    layer = cache.layer(0)
    layer.update(_token(gen, dtype), _token(gen, dtype))
    packed = layer.packed
    assert packed is not None
    query = _token(gen, dtype, heads=32)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        attend(query, packed)  # compiles
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attend(query, packed)
    for _ in range(10):
        layer.update(_token(gen, dtype), _token(gen, dtype))
        assert layer.packed is packed  # in place
        query.copy_(_token(gen, dtype, heads=32))
        graph.replay()
        assert torch.equal(out, attend(query, packed))
        if work_list:  # the default plan here (16 segments)
            eager = packed_attention(query, packed, scaling=128**-0.5, backend="split")
            assert torch.equal(out, eager)
        reference = packed_attention(query, packed, scaling=128**-0.5, backend="reference")
        torch.testing.assert_close(out, reference, rtol=2e-2, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_decode_step_never_waits_for_the_device() -> None:
    dtype = torch.bfloat16
    cache, gen = _decode_layer(dtype, slack=8)
    layer = cache.layer(0)
    layer.update(_token(gen, dtype), _token(gen, dtype))
    assert layer.packed is not None
    query = _token(gen, dtype, heads=32)
    packed_attention(query, layer.packed, scaling=128**-0.5, backend="auto")  # compiles
    tokens = [(_token(gen, dtype), _token(gen, dtype)) for _ in range(4)]  # copies that wait
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for key, value in tokens:  # append in place + attention, as a decode step of one layer
            layer.update(key, value)
            packed_attention(query, layer.packed, scaling=128**-0.5, backend="auto")
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _llama64() -> LlamaForCausalLM:
    """A tiny Llama with head dim 64 (what ``"auto"`` sends to the split kernel), GQA group 2."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=640,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(8.0)
    model.set_attn_implementation("sdpa")
    return model.eval()


def _generate(model: Any, ids: torch.Tensor, backend: Any | None, steps: int) -> Any:
    options: dict[str, Any] = greedy_options(steps)
    if backend is None:
        return model.generate(ids, past_key_values=DynamicCache(), **options)
    layers, kv_heads = model.config.num_hidden_layers, model.config.num_key_value_heads
    cache = RaggedCache(slack=5)  # repacks during the generation too
    model(ids[:, :-1], past_key_values=cache)
    for layer in range(layers):
        keep = torch.ones(1, kv_heads, ids.shape[1] - 1, dtype=torch.bool, device=ids.device)
        cache.compress_layer(layer, keep)
    with ragged_attention(model, backend=backend):
        return model.generate(ids, past_key_values=cache, **options)


@pytest.mark.parametrize("arch", ["llama", "llama64"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_greedy_generation_with_nothing_evicted_equals_the_dense_cache(arch: str) -> None:
    """float32 (exact products in the kernel): the same tokens as the dense cache, logits within
    1e-4, over 24 steps with repacks."""
    model = copy.deepcopy(tiny_model("llama") if arch == "llama" else _llama64()).cuda()
    ids = torch.randint(0, 600, (1, 40), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        want = _generate(model, ids, None, 24)
        got = _generate(model, ids, "split", 24)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(want.logits, got.logits, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_decodes_bf16_with_the_split_kernel(kernel_calls: list[Any]) -> None:
    """On CUDA in bf16 with half the prompt evicted, ``"auto"`` sends every decode step to the
    split kernel (the question, a continuation, to varlen) and the logits follow the padded
    reference fed the same tokens."""
    model = copy.deepcopy(_llama64()).to("cuda", torch.bfloat16)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 600, (2, 200), generator=gen).cuda()
    question = torch.randint(0, 600, (2, 5), generator=gen).cuda()
    keeps = [torch.rand(2, 2, 200, generator=gen) < 0.5 for _ in range(2)]
    for keep in keeps:
        keep[..., -1] = True

    def run(backend: Any, tokens: list[torch.Tensor]) -> torch.Tensor:
        """Question, then 12 decode steps (greedy when ``tokens`` is empty, else forced)."""
        cache = RaggedCache(slack=4)
        model(ids, past_key_values=cache)
        for layer, keep in enumerate(keeps):
            cache.compress_layer(layer, keep.cuda())
        with ragged_attention(model, backend=backend):
            return decode_logits(model, cache, question, tokens, 12)

    tokens: list[torch.Tensor] = []
    with torch.no_grad():
        fast = run("auto", tokens)
        assert len(kernel_calls) == 2 * 12  # every layer at every decode step
        slow = run("reference", tokens)
    assert len(kernel_calls) == 2 * 12
    torch.testing.assert_close(fast, slow, rtol=0, atol=5e-2)


@pytest.mark.parametrize("arch", ["llama", "llama64"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_padded_batch_decodes_through_the_kernel(arch: str, kernel_calls: list[Any]) -> None:
    """Prompts of 40, 27 and 9 tokens, left-padded: float32 ``"split"`` (which refuses masks)
    generates the dense cache's tokens; in bf16 at head dim 64, ``"auto"`` sends every step to
    the kernel and follows the reference."""
    model = copy.deepcopy(tiny_model("llama") if arch == "llama" else _llama64()).cuda()
    gen = torch.Generator().manual_seed(3)
    rows = [torch.randint(3, 600, (n,), generator=gen).cuda() for n in (40, 27, 9)]
    want = padded_generate(model, rows, None, 12)
    got = padded_generate(model, rows, "split", 12)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(want.logits, got.logits, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
    if arch == "llama":  # head dim 16: "auto" keeps such heads off the kernel
        return
    kernel_calls.clear()
    model = model.to(torch.bfloat16)
    fast = padded_generate(model, rows, "auto", 12)
    assert len(kernel_calls) == model.config.num_hidden_layers * 12  # every layer, every step
    slow = padded_generate(model, rows, "reference", 12)
    torch.testing.assert_close(fast.logits[0], slow.logits[0], rtol=0, atol=5e-2)
