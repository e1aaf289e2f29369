"""Cases for the split-KV decode kernel (``rcstat.press.decode_kernel``) under Triton's
interpreter on the CPU, in float32 against two oracles: the padded sdpa reference
(``attention._reference_attention``) and a per-head softmax loop written here.

The interpreter must be chosen before ``triton`` is first imported, so
``tests/test_press_decode_kernel.py`` runs this file in a fresh process with
``TRITON_INTERPRET=1`` (it is not collected on its own: the name does not start with
``test_``). The compiled kernel is checked on a GPU by the ``gpu`` tests of that file."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from rcstat.press import RaggedCache, packed_attention, ragged_attention
from rcstat.press.attention import _reference_attention
from rcstat.press.decode_kernel import (
    PV,
    KernelConfig,
    SplitPlan,
    list_bound,
    split_decode_attention,
    split_plan,
)
from tests._decode_oracles import greedy_options, naive_attention, padded_generate, ragged_layout
from tests._tiny_models import tiny_model


@pytest.fixture(autouse=True)
def interpreted() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through tests/test_press_decode_kernel.py (needs TRITON_INTERPRET=1)")


def _lengths(segments: int, gen: torch.Generator, longest: int) -> list[int]:
    lengths = torch.randint(0, longest + 1, (segments,), generator=gen).tolist()
    lengths[0], lengths[-1] = 0, 1  # an empty and a one-entry segment in every case
    lengths[segments // 2] = longest
    return lengths


PLANS: dict[str, tuple[int, int, int] | None] = {  # chunk, block_n, spare programs
    "default": None,  # split_plan with 4 "SMs": a few splits per segment
    "one split": (96, 32, 0),
    "chunks mid-tile": (11, 16, 0),
    "work list": (16, 16, 0),
    "work list, chunks mid-tile": (11, 16, 5),  # 5 programs past the last chunk
    "work list, one chunk per segment": (96, 32, 0),
}


def _plan(name: str, segments: int, capacity: int) -> SplitPlan | None:
    if PLANS[name] is None:
        return None
    chunk, block_n, spare = PLANS[name]  # type: ignore[misc]
    if name.startswith("work list"):
        return SplitPlan(list_bound(segments, capacity, chunk) + spare, chunk, block_n, True)
    return SplitPlan(-(-96 // chunk), chunk, block_n)  # 96 >= the longest segment + room


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("dim", [64, 128])
def test_split_kernel_equals_the_reference_and_a_softmax_loop(
    dim: int, group: int, plan: str
) -> None:
    gen = torch.Generator().manual_seed(dim + group)
    batch, kv_heads, room = 2, 3, 5
    packed = ragged_layout(_lengths(batch * kv_heads, gen, 90), room, dim, gen, kv_heads=kv_heads)
    query = torch.randn(batch, kv_heads * group, 1, dim, generator=gen)
    scaling = dim**-0.5
    got = split_decode_attention(
        query, packed, scaling, _plan(plan, batch * kv_heads, packed.capacity)
    )
    assert got.shape == (batch, 1, kv_heads * group, dim) and got.dtype == torch.float32
    assert not got.isnan().any()  # empty segments give zeros
    torch.testing.assert_close(
        got.double(), naive_attention(query, packed, scaling), rtol=1e-5, atol=1e-5
    )
    live = packed.seg_len.view(batch, kv_heads).repeat_interleave(group, 1) > 0  # [B, H]
    ref = _reference_attention(query, packed, scaling, None)  # sdpa: NaN rows where empty
    torch.testing.assert_close(got[:, 0][live], ref[:, 0][live], rtol=1e-5, atol=1e-5)
    assert torch.equal(got[:, 0][~live], torch.zeros_like(got[:, 0][~live]))


@pytest.mark.parametrize("work_list", [False, True])
@pytest.mark.parametrize("block_n", [16, 64])
@pytest.mark.parametrize("group", [1, 3, 4])
@pytest.mark.parametrize("pv", ["half2", "tf32x3", "tf32", "half", "fma"])
def test_every_launch_config_equals_a_softmax_loop(
    pv: PV, group: int, block_n: int, work_list: bool
) -> None:
    """Each ``p·v`` variant (fp32 inputs: exact products whatever the variant), tile size, plan
    aim (``waves``) and layout; ``fma`` pads the group to a power of two only (3 → 4, 1 → 1)."""
    gen = torch.Generator().manual_seed(block_n + group)
    batch, kv_heads, dim = 2, 2, 64
    packed = ragged_layout(_lengths(batch * kv_heads, gen, 150), 3, dim, gen, kv_heads=kv_heads)
    query = torch.randn(batch, kv_heads * group, 1, dim, generator=gen)
    config = KernelConfig(block_n, 2, 1, pv=pv, waves=2, work_list=work_list)
    rows, capacity = packed.max_len + packed.room, packed.capacity
    plan = split_plan(batch * kv_heads, rows, capacity, dim, 4, config=config)
    assert plan.block_n == block_n and plan.splits > 1 and plan.work_list == work_list
    got = split_decode_attention(query, packed, 0.125, config=config)
    torch.testing.assert_close(
        got.double(), naive_attention(query, packed, 0.125), rtol=1e-5, atol=1e-5
    )
    assert torch.equal(got, split_decode_attention(query, packed, 0.125, plan, config=config))


@pytest.mark.parametrize("work_list", [False, True])
def test_more_than_32_chunks_of_one_segment_merge_with_rescaling(work_list: bool) -> None:
    """One segment of 1,100 rows in chunks of 16: 69 chunks, so the merge reads them in three
    tiles of 32 (``_SPLIT_TILE``). Keys lined up with the query in the second and the third
    tile raise the running maximum twice: the sum and the accumulator of the tiles before
    must be rescaled to the new maximum, or the output is far from the softmax loop's."""
    gen = torch.Generator().manual_seed(11)
    dim, group, length, room, chunk = 64, 2, 1100, 3, 16
    packed = ragged_layout([length], room, dim, gen, kv_heads=1)
    query = torch.randn(1, group, 1, dim, generator=gen)
    direction = query[0, :, 0].sum(0) / query[0, :, 0].sum(0).norm()  # both heads score it high
    start = int(packed.seg_start[0])
    for row, size in ((40 * chunk + 5, 3.0), (length - 7, 5.0)):  # tile 2, then tile 3
        packed.keys[start + row] = size * direction * dim**0.5
    chunks = -(-length // chunk)
    assert chunks > 2 * 32
    rows = packed.max_len + packed.room
    if work_list:
        plan = SplitPlan(list_bound(1, packed.capacity, chunk), chunk, chunk, True)
    else:
        plan = SplitPlan(-(-rows // chunk), chunk, chunk)
    scaling = dim**-0.5
    got = split_decode_attention(query, packed, scaling, plan)
    want = naive_attention(query, packed, scaling)
    weights = torch.softmax(
        packed.keys[start : start + length].double() @ query[0, :, 0].double().T * scaling, 0
    )
    assert (weights[: 32 * chunk].max(0).values < weights.max(0).values).all()  # later maxima
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    ref = _reference_attention(query, packed, scaling, None)
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_a_config_that_disagrees_with_the_plan_is_refused() -> None:
    packed = ragged_layout([5, 40], 3, 64, torch.Generator().manual_seed(6), kv_heads=1)
    with pytest.raises(ValueError, match="disagree on block_n"):
        split_decode_attention(
            torch.randn(2, 1, 1, 64),
            packed,
            0.125,
            SplitPlan(3, 16, 16),
            config=KernelConfig(block_n=32),
        )


def test_query_read_through_its_strides() -> None:
    """transformers hands over ``[batch, heads, 1, dim]`` views of ``[batch, 1, heads, dim]``."""
    gen = torch.Generator().manual_seed(3)
    packed = ragged_layout([7, 0, 33, 1], 2, 64, gen, kv_heads=2)
    query = torch.randn(2, 1, 8, 64, generator=gen).transpose(1, 2)  # non-contiguous
    got = split_decode_attention(query, packed, 0.125)
    torch.testing.assert_close(got, split_decode_attention(query.contiguous(), packed, 0.125))
    torch.testing.assert_close(
        got.double(), naive_attention(query, packed, 0.125), rtol=1e-5, atol=1e-5
    )


def test_a_plan_that_misses_rows_is_refused() -> None:
    packed = ragged_layout([5, 40], 3, 64, torch.Generator().manual_seed(4), kv_heads=1)
    query = torch.randn(2, 1, 1, 64)
    with pytest.raises(ValueError, match="does not cover"):
        split_decode_attention(query, packed, 0.125, SplitPlan(2, 16, 16))
    # 51 rows in all: chunks of 16 need up to ceil(51 / 16) + 1 = 5 programs
    assert list_bound(2, packed.capacity, 16) == 5
    with pytest.raises(ValueError, match="does not cover"):
        split_decode_attention(query, packed, 0.125, SplitPlan(4, 16, 16, work_list=True))
    with pytest.raises(ValueError, match="does not cover"):
        split_decode_attention(query, packed, 0.125, SplitPlan(9, 0, 16, work_list=True))
    got = split_decode_attention(query, packed, 0.125, SplitPlan(5, 16, 16, work_list=True))
    torch.testing.assert_close(
        got.double(), naive_attention(query, packed, 0.125), rtol=1e-5, atol=1e-5
    )


def test_in_place_appends_keep_the_plan_until_the_repack() -> None:
    """Decode steps append in place: the plan (from ``max_len + room``) stays the same while the
    kernel reads the growing ``seg_len`` on the device; a repack changes it."""
    gen = torch.Generator().manual_seed(5)
    batch, kv_heads, group, length, dim = 1, 2, 4, 40, 64
    keys, values = (torch.randn(batch, kv_heads, length + 6, dim, generator=gen) for _ in "kv")
    keep = torch.rand(batch, kv_heads, length, generator=gen) < 0.5
    keep[..., -1] = True
    cache = RaggedCache(slack=3)
    cache.update(keys[:, :, :length], values[:, :, :length], 0)
    cache.compress_layer(0, keep)
    layer = cache.layer(0)
    bounds, plans = [], []
    for step in range(6):  # 3 in place, then a repack
        new = slice(length + step, length + step + 1)
        layer.update(keys[:, :, new], values[:, :, new])
        packed = layer.packed
        assert packed is not None
        query = torch.randn(batch, kv_heads * group, 1, dim, generator=gen)
        bounds.append((packed.max_len + packed.room, packed.capacity))
        for work_list in (False, True):
            config = KernelConfig(64, work_list=work_list)
            plans.append(split_plan(batch * kv_heads, *bounds[-1], dim, 4, config=config))
        got = packed_attention(query, packed, scaling=0.125, backend="split")
        want = naive_attention(query, packed, 0.125)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    assert bounds[0] == bounds[1] == bounds[2] != bounds[3]  # the room doubles at the repack
    assert bounds[2][0] < bounds[3][0] and bounds[2][1] < bounds[3][1]
    assert plans[0:2] == plans[2:4] == plans[4:6]


def test_greedy_generation_with_nothing_evicted_equals_the_dense_cache() -> None:
    """The tiny Llama (head dim 16, GQA group 2) decoding with ``backend="split"``."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    ids = torch.randint(0, 600, (1, 20), generator=torch.Generator().manual_seed(1))
    options: dict[str, Any] = greedy_options(8)
    with torch.no_grad():
        want = model.generate(ids, past_key_values=DynamicCache(), **options)
        cache = RaggedCache(slack=3)  # 8 steps: repacks too
        model(ids[:, :-1], past_key_values=cache)
        for layer in range(3):
            cache.compress_layer(layer, torch.ones(1, 2, 19, dtype=torch.bool))
        with ragged_attention(model, backend="split"):
            got = model.generate(ids, past_key_values=cache, **options)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(want.logits, got.logits, strict=True):  # every step went through the kernel
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)


def test_a_padded_batch_decodes_through_the_kernel_like_the_dense_cache() -> None:
    """Three prompts of 20, 13 and 6 tokens, left-padded: the padding-free packed layers take
    every step without a mask (``backend="split"`` refuses masks), as the dense cache does."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(2)
    rows = [torch.randint(3, 600, (n,), generator=gen) for n in (20, 13, 6)]
    want = padded_generate(model, rows, None, 6)
    got = padded_generate(model, rows, "split", 6)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(want.logits, got.logits, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
