"""Cases for the Triton kernels of the CUDA path (``rcstat.stats._gpu``), run by Triton's
interpreter on the CPU against independent oracles: pairwise sums for E, the paper's
Algorithm 1 for A, a brute-force minimum for the crossing point.

The interpreter must be chosen before ``triton`` is first imported, so
``tests/test_stats_triton.py`` runs this file in a fresh process with ``TRITON_INTERPRET=1``
(it is not collected on its own: the name does not start with ``test_``). The same kernels
compiled for a GPU are compared with the CPU reference in ``tests/test_gpu.py``."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.stats import _gpu, rc_statistics
from tests._reference import algorithm1, naive_expected_rc


@pytest.fixture(autouse=True, params=["bucket table", "whole search"])
def interpreted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case twice: self sets indexed by a bucket table, and searched whole."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.fail("run through tests/test_stats_triton.py (needs TRITON_INTERPRET=1)")
    monkeypatch.setattr(_gpu, "_TABLE_FROM", 1 if request.param == "bucket table" else 1 << 30)


def _block(heads: int, gen: int, prompt: int, seed: int, ties: bool) -> torch.Tensor:
    gen_ = torch.Generator().manual_seed(seed)
    block = torch.randn(heads, gen, prompt + gen, generator=gen_) * 30
    return block.round() if ties else block  # [H, g, m + g]


def _self(block: torch.Tensor, prompt: int) -> torch.Tensor:
    gen = block.shape[1]
    rows = [block[:, j, prompt : prompt + j + 1] for j in range(gen)]
    return torch.cat(rows, dim=-1)  # [H, g(g+1)/2], key <= query


@pytest.mark.parametrize("ties", [False, True])
def test_block_expected_and_upper_match_pairwise_and_algorithm1(ties: bool) -> None:
    prompt = 23
    block = _block(3, 6, prompt, seed=1, ties=ties)
    x, y = block[:, :, :prompt], _self(block, prompt)
    expected, upper, gap = _gpu.dense_statistics(x, y, None)  # x read through its strides
    for head in range(3):
        xs, ys = x[head].double().numpy().ravel(), y[head].double().numpy()
        assert float(expected[head]) == pytest.approx(naive_expected_rc(xs, ys), rel=1e-12)
        assert float(upper[head]) == pytest.approx(algorithm1(xs, ys, "upper"), rel=1e-12)
        assert float(gap[head]) == pytest.approx(xs.mean() - ys.mean(), rel=1e-12, abs=1e-12)


def test_ragged_self_samples_match_the_reference() -> None:
    block = _block(4, 7, 31, seed=2, ties=True)
    x, y = block[:, :, :31], _self(block, 31)
    valid = torch.rand(y.shape, generator=torch.Generator().manual_seed(3)) < 0.5
    valid[:, 0] = True
    expected, upper, gap = _gpu.dense_statistics(x, y, valid)
    want = rc_statistics(x.reshape(4, -1), y, y_valid=valid)
    torch.testing.assert_close(expected, want.expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(upper, want.upper, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gap, want.mean_gap, rtol=1e-12, atol=1e-12)


def test_shared_expected_per_group_matches_pairwise() -> None:
    """Press / attribution layout: every prompt key's scores (a strided, transposed view)
    against one shared, ragged self set per head."""
    block = _block(2, 5, 40, seed=4, ties=False)
    x = block[:, :, :40].transpose(1, 2)  # [H, m, g]: group i = key i's scores
    y = _self(block, 40)
    valid = torch.ones_like(y, dtype=torch.bool)
    valid[1, ::2] = False
    got = _gpu.shared_expected(x[..., None], y, valid)  # [H, m]
    for head in range(2):
        ys = y[head][valid[head]].double().numpy()
        for key in (0, 17, 39):
            want = naive_expected_rc(x[head, key].double().numpy(), ys)
            assert float(got[head, key]) == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_crossing_is_the_minimiser_of_the_split_objective() -> None:
    """``t*`` minimises ``E(X - t)⁺ + E(t - Y)⁺`` over every sample value (brute force)."""
    block = _block(5, 4, 30, seed=5, ties=True)
    x, y = block[:, :, :30], _self(block, 30)
    samples = _gpu.prepared_self(y, None)
    t = _gpu.crossing(x, samples.ys, samples.count)  # [H]
    for head in range(5):
        xs, yv = x[head].double().numpy().ravel(), y[head].double().numpy()
        candidates = np.concatenate([xs, yv])
        objective = [
            np.maximum(xs - c, 0).mean() + np.maximum(c - yv, 0).mean() for c in candidates
        ]
        assert float(t[head]) in set(candidates.tolist())
        chosen = (
            np.maximum(xs - float(t[head]), 0).mean() + np.maximum(float(t[head]) - yv, 0).mean()
        )
        assert chosen == pytest.approx(min(objective), rel=1e-12, abs=1e-12)


def test_keys_sort_like_the_values() -> None:
    values = torch.tensor([-np.inf, -3e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, 3e38, np.inf])
    keys = _gpu._keys(values)
    assert bool((keys[1:] >= keys[:-1]).all()) and keys.min() >= 0 and keys.max() < 2**32
    assert len(set(keys.tolist())) == len(values)  # -0.0 and 0.0 apart, nothing merged


def test_non_finite_samples_make_the_sums_non_finite() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        block = _block(2, 3, 9, seed=6, ties=False)
        block[1, 2, 4] = bad
        x, y = block[:, :, :9], _self(block, 9)
        expected, _, gap = _gpu.dense_statistics(x, y, None)  # A ignores a -inf sample
        for values in (expected, gap):
            assert bool(torch.isfinite(values[0])) and not bool(torch.isfinite(values[1]))


_value = st.one_of(st.integers(-4, 4).map(float), st.floats(-1e3, 1e3, width=32))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    x=arrays(np.float32, st.tuples(st.just(2), st.integers(1, 30)), elements=_value),
    y=arrays(np.float32, st.tuples(st.just(2), st.integers(1, 12)), elements=_value),
)
def test_property_equal_to_the_cpu_kernel(x: np.ndarray, y: np.ndarray) -> None:
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    expected, upper, gap = _gpu.dense_statistics(xt[:, :, None], yt, None)
    want = rc_statistics(xt, yt)
    torch.testing.assert_close(expected, want.expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(upper, want.upper, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(gap, want.mean_gap, rtol=1e-9, atol=1e-9)
    assert bool((upper >= expected - 1e-9).all())


def test_bucket_table_counts_the_samples_below_each_bucket() -> None:
    """``table[r, b]`` = #{y : top bits of key(y) < b}, by brute force."""
    y = torch.tensor([[-3.0, -0.5, 0.0, 0.25, 0.3, 7.0, 1e30], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])
    valid = torch.ones_like(y, dtype=torch.bool)
    valid[0, -1] = False
    samples = _gpu.prepared_self(y, valid)
    if samples.table is None:
        pytest.skip("no table when the sets are searched whole")
    bits = 32 - samples.bucket_shift
    for row in range(2):
        keys = _gpu._keys(y[row][valid[row]]) >> samples.bucket_shift
        want = torch.tensor([int((keys < b).sum()) for b in range(2**bits + 1)])
        torch.testing.assert_close(samples.table[row].long(), want)


def test_dense_buckets_fall_back_to_a_full_search() -> None:
    """All self samples in one bucket (heavy ties) still rank every cross sample exactly."""
    y = torch.full((1, 300), 5.0)
    y[0, ::3] = 5.0000005  # same bucket, different values
    x = torch.tensor([[[4.0, 5.0, 5.0000002, 5.0000005, 5.1, 6.0]]])
    got = _gpu.shared_expected(x[:, :, :, None].expand(1, 1, 6, 1), y, None)
    want = naive_expected_rc(x.double().numpy(), y.double().numpy())
    assert float(got[0, 0]) == pytest.approx(want, rel=1e-12)


def test_units_key_expected_kernel_path_equals_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ragged units in one launch (per-row offsets and lengths) vs one search per unit."""
    from rcstat.stats import unit_rows, units_key_expected

    block = _block(3, 9, 20, seed=8, ties=True)
    rows = unit_rows([(0, 1), (1, 5), (5, 9)], 29, 20)
    want = units_key_expected(block, rows, (2, 18))
    monkeypatch.setattr(_gpu, "available", lambda *tensors: True)
    got = units_key_expected(block, rows, (2, 18))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
