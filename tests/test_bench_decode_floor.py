"""The budget arithmetic of ``benchmarks/bench_decode_floor.py`` (CPU only, no timing)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_decode_floor as bench
from rcstat.press.cache import RaggedCache


def test_full_sequence_is_128_kib_a_token() -> None:
    assert bench.full_sequence_bytes(32768) == 4 * 2**30
    assert bench.full_sequence_bytes(1) == 128 * 2**10


def test_ragged_bytes_match_a_real_packed_layout() -> None:
    """One layer built by RaggedCache (kept ⌈(1 − ratio)·T⌉ per segment, one token appended)
    holds 1/32 of ragged_sequence_bytes, plus seg_start's one extra offset."""
    context, ratio, batch = 200, 0.5, 1
    keys, values = (torch.randn(batch, bench.KV_HEADS, context, bench.DIM) for _ in "kv")
    keep = torch.zeros(batch, bench.KV_HEADS, context, dtype=torch.bool)
    keep[..., ::2] = True  # 100 = ⌈0.5·200⌉ per segment
    cache = RaggedCache(slack=bench.SLACK)
    cache.update(keys.bfloat16(), values.bfloat16(), 0)
    cache.compress_layer(0, keep)
    (packed,) = bench.appended(cache, 1, batch, torch.device("cpu"))
    per_layer = bench.ragged_sequence_bytes(context, ratio) // bench.LAYERS
    assert bench.layout_bytes(packed) == per_layer + 8


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.8])
def test_budget_plan_is_the_largest_batch_that_fits(ratio: float) -> None:
    plan = bench.budget_plan(40, 32768, ratio)
    budget = 40 * 2**30
    seq_full = bench.full_sequence_bytes(32768)
    seq_ragged = bench.ragged_sequence_bytes(32768, ratio)
    assert plan["batch_full"] * seq_full <= budget < (plan["batch_full"] + 1) * seq_full
    assert plan["batch_ragged"] * seq_ragged <= budget < (plan["batch_ragged"] + 1) * seq_ragged
    # nothing evicted: the room and positions cost a little, so no more sequences than full
    assert plan["batch_ragged"] <= plan["batch_full"] / (1 - ratio)


def test_budget_at_32k_half_kept() -> None:
    """Hand-computed: 4 GiB per full sequence; (16384 + 64) rows × 520 B × 8 heads × 32 layers
    + 16 B × 8 × 32 per ragged one = 2.039 GiB, so 10 vs 19 sequences in 40 GiB."""
    plan = bench.budget_plan(40, 32768, 0.5)
    assert (plan["batch_full"], plan["batch_ragged"]) == (10, 19)
    assert plan["seq_ragged_gib"] == pytest.approx((16448 * 520 + 16) * 256 / 2**30)


def test_budget_below_one_sequence_is_an_error() -> None:
    with pytest.raises(ValueError, match="budget_gib"):
        bench.budget_plan(2, 32768, 0.5)


def test_fitting_layers_bounds() -> None:
    assert bench.fitting_layers(100, 1, 0, 1.0) == bench.LAYERS
    assert bench.fitting_layers(100, 10, 20, 1.0) == 8
    assert bench.fitting_layers(1, 10, 20, 1.0) == 1
