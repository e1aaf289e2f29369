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
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.stats import _gpu, rc_statistics
from rcstat.stats._triton import _bucket, _key
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


@pytest.mark.parametrize("bracket", [False, True])
def test_ragged_self_samples_match_the_reference(
    bracket: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if bracket:  # the crossing point from a sample's bracket, self sets padded
        monkeypatch.setattr(_gpu, "_SAMPLED_FROM", 1)
        monkeypatch.setattr(_gpu, "_SAMPLES", 32)
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


def test_rows_past_the_grid_limit_launch_in_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """More rows than CUDA's second grid axis takes (``_MAX_ROWS``, 2 here) run in parts,
    each reading its own rows' self samples: the same statistics as one launch."""
    block = _block(5, 4, 13, seed=6, ties=True)
    x, y = block[:, :, :13], _self(block, 13)
    valid = torch.rand(y.shape, generator=torch.Generator().manual_seed(7)) < 0.6
    valid[:, 0] = True
    whole = _gpu.dense_statistics(x, y, valid)
    monkeypatch.setattr(_gpu, "_MAX_ROWS", 2)
    parts = _gpu.dense_statistics(x, y, valid)
    want = rc_statistics(x.reshape(5, -1), y, y_valid=valid)
    for got in (whole, parts):
        torch.testing.assert_close(got[0], want.expected, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[1], want.upper, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[2], want.mean_gap, rtol=1e-12, atol=1e-12)


def _minimises_the_split_objective(x: torch.Tensor, y: torch.Tensor, t: torch.Tensor) -> None:
    """``t[r]`` is a sample value minimising ``E(X - t)⁺ + E(t - Y)⁺`` (brute force)."""
    for row in range(x.shape[0]):
        xs, yv = x[row].double().numpy().ravel(), y[row].double().numpy()
        candidates = np.concatenate([xs, yv])
        objective = [
            np.maximum(xs - c, 0).mean() + np.maximum(c - yv, 0).mean() for c in candidates
        ]
        assert float(t[row]) in set(candidates.tolist())
        value = float(t[row])
        chosen = np.maximum(xs - value, 0).mean() + np.maximum(value - yv, 0).mean()
        assert chosen == pytest.approx(min(objective), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("path", ["radix", "bracket", "narrow bracket"])
@pytest.mark.parametrize("ties", [False, True])
def test_crossing_is_the_minimiser_of_the_split_objective(
    path: str, ties: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways to the crossing point: the radix selection, and a bracket from a sample of
    ``x`` (narrowed to a few values, so that most rows fall back to the radix selection)."""
    if path != "radix":
        monkeypatch.setattr(_gpu, "_SAMPLED_FROM", 1)
        monkeypatch.setattr(_gpu, "_SAMPLES", 16)
    if path == "narrow bracket":
        monkeypatch.setattr(_gpu, "_SIGMAS", 0.0)
    block = _block(5, 4, 30, seed=5, ties=ties)
    x, y = block[:, :, :30], _self(block, 30)
    samples = _gpu.prepared_self(y, None)
    t = _gpu.crossing(x, samples.ys, samples.count)  # [H]
    _minimises_the_split_objective(x, y, t)


def test_the_bracket_settles_ordinary_rows_and_only_exact_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On smooth data every row is settled by the bracket; with a bracket too narrow to hold
    the crossing some rows are not, and the settled ones are still exact."""
    monkeypatch.setattr(_gpu, "_SAMPLES", 64)
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, 40, 50, generator=gen) - torch.linspace(-2, 2, 6)[:, None, None]
    y = torch.randn(6, 300, generator=gen)
    samples = _gpu.prepared_self(y, None)
    for sigmas in (4.0, 0.0):
        monkeypatch.setattr(_gpu, "_SIGMAS", sigmas)
        t, done = _gpu._bracketed(x, samples.ys, samples.count)
        assert bool(done.all()) if sigmas else not bool(done.all())
        settled = done.bool()
        _minimises_the_split_objective(x[settled], y[settled], t[settled])


@triton.jit
def _keys_of(values_ptr, out_ptr, N: tl.constexpr) -> None:
    index = tl.arange(0, N)
    tl.store(out_ptr + index, _key(tl.load(values_ptr + index)))


@triton.jit
def _buckets_of(values_ptr, out_ptr, low, scale, buckets, N: tl.constexpr) -> None:
    index = tl.arange(0, N)
    tl.store(out_ptr + index, _bucket(tl.load(values_ptr + index), low, scale, buckets))


def _bucket_of(values: torch.Tensor, low: float, scale: float, buckets: int) -> torch.Tensor:
    """The kernels' bucket of each float32 value (``_triton._bucket``), int64 ``[N]``."""
    size = 1 << max(values.numel() - 1, 0).bit_length()
    padded = torch.zeros(size, dtype=torch.float32)
    padded[: values.numel()] = values.float()
    out = torch.zeros(size, dtype=torch.int32)
    _buckets_of[(1,)](padded, out, float(low), float(scale), buckets, N=size)
    return out[: values.numel()].long()


def test_keys_sort_like_the_values() -> None:
    """The kernels' radix key of a float32 (int32 bits read as unsigned) sorts like it."""
    values = torch.tensor([-np.inf, -3e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, 3e38, np.inf])
    values = torch.cat([values, torch.zeros(6)])  # a power of two; the zeros are not compared
    out = torch.zeros(16, dtype=torch.int32)
    _keys_of[(1,)](values, out, N=16)
    keys = out[:10].long() % 2**32  # the unsigned keys
    assert bool((keys[1:] > keys[:-1]).all())  # -0.0 and 0.0 apart, nothing merged


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


def _records(below: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The buckets' records of ``SelfSamples.table`` ``[R, B + 2, 2]`` int64 from the counts
    ``below[r, b]`` = #{valid y : s(y) < b} ``[R, B + 3]`` and the sorted samples ``ys``:
    ``start | end << 32`` (``below`` at ``b`` and ``b + 1``), then the bits of the bucket's
    first and last sample ``first | last << 32`` (0 for an empty bucket)."""
    start, end = below[:, :-1].long(), below[:, 1:].long()
    filled = start < end
    first = torch.where(filled, ys.gather(1, start.clamp_max(ys.shape[1] - 1)), 0.0)
    last = torch.where(filled, ys.gather(1, (end - 1).clamp_min(0)), 0.0)
    bits = first.view(torch.int32).long() & 0xFFFFFFFF
    return torch.stack([start | end << 32, bits | last.view(torch.int32).long() << 32], -1)


def test_bucket_table_counts_the_samples_below_each_bucket() -> None:
    """Bucket ``b``'s record starts at #{valid y : s(y) < b} and ends at #{s(y) < b + 1}, by
    brute force, with ``s`` never decreasing in the value and the valid samples inside
    ``[1, B + 1]``; its first and last sample are those of the sorted samples there."""
    y = torch.tensor([[-3.0, -0.5, 0.0, 0.25, 0.3, 7.0, 1e30], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])
    valid = torch.ones_like(y, dtype=torch.bool)
    valid[0, -1] = False
    samples = _gpu.prepared_self(y, valid)
    if samples.table is None:
        pytest.skip("no table when the sets are searched whole")
    width = samples.buckets + 3
    for row in range(2):
        inside = y[row][valid[row]]
        s = _bucket_of(inside, samples.low[row], samples.scale[row], samples.buckets)
        assert int(s.min()) >= 1 and int(s.max()) <= samples.buckets + 1
        order = torch.argsort(inside)
        assert bool((s[order][1:] >= s[order][:-1]).all())
        want = torch.tensor([int((s < b).sum()) for b in range(width)])
        ends = samples.table[row, :, 0]
        torch.testing.assert_close(ends & 0xFFFFFFFF, want[:-1])
        torch.testing.assert_close(ends >> 32, want[1:])
        assert torch.equal(samples.table[row], _records(want[None], samples.ys[row, None])[0])


def _prepared_by_tensors(y: torch.Tensor, valid: torch.Tensor | None, buckets: int) -> dict:
    """What ``prepare_kernel`` computes, by tensor operations: sort, float64 running sums, the
    buckets of every sample (the kernels' function) counted below each table entry, and the
    buckets' records from these counts."""
    inside = torch.ones_like(y, dtype=torch.bool) if valid is None else valid
    ys = torch.sort(torch.where(inside, y.float(), torch.inf), dim=-1).values
    count = inside.sum(-1, dtype=torch.int32)
    first = torch.arange(y.shape[1]) < count[:, None]  # [R, M] the valid ones, sorted first
    center = torch.where(first, ys.double(), 0.0).sum(-1) / count
    centred = torch.where(first, ys.double() - center[:, None], 0.0)
    prefix = torch.nn.functional.pad(centred.cumsum(-1), (1, 0))
    want = {"ys": ys, "count": count, "center": center, "prefix": prefix, "table": None}
    if not buckets:
        return want | {"low": torch.zeros(len(ys)), "scale": torch.zeros(len(ys))}
    low = ys[:, 0]
    span = (ys.gather(1, (count.long() - 1)[:, None])[:, 0] - low).clamp_min(0.0)
    scale = torch.where(span > 0, buckets / span, 0.0).clamp_max(1e30)
    table = []
    for row in range(len(ys)):  # table[b] = #{s < b}: the samples counted per bucket, summed
        s = _bucket_of(ys[row, : count[row]], low[row], scale[row], buckets)
        per_bucket = torch.bincount(s, minlength=buckets + 2)
        table.append(torch.nn.functional.pad(per_bucket.cumsum(0), (1, 0)))
    return want | {"low": low, "scale": scale, "table": _records(torch.stack(table), ys)}


def _prepares_as_the_tensor_operations(
    y: torch.Tensor, valid: torch.Tensor | None, spread: int
) -> None:
    """The kernel's fields equal :func:`_prepared_by_tensors`': the tables and float32 fields
    bit for bit, the float64 sums up to their order."""
    got = _gpu.prepared_self(y, valid, spread=spread)
    want = _prepared_by_tensors(y, valid, got.buckets)
    for name in ("ys", "count", "low", "scale", "table"):
        a, b = getattr(got, name), want[name]
        assert (a is None) == (b is None), name
        assert a is None or torch.equal(a, b), name
    torch.testing.assert_close(got.center, want["center"], rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(got.prefix, want["prefix"], rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("spread", [2, -2])
@pytest.mark.parametrize("padded", [False, True])
def test_prepare_kernel_equals_the_tensor_operations(padded: bool, spread: int) -> None:
    """The one-launch preparation of sorted self samples (centres, prefix sums, bucket
    origin, scale and table) gives the tensor operations' fields: the tables and the float32
    fields bit for bit, the float64 sums up to their order. Rows with ties, a constant row,
    padding, one valid sample, and rows long enough for several steps of the kernel."""
    gen = torch.Generator().manual_seed(12)
    y = torch.randn(5, 2600, generator=gen) * 7
    y[0, :900] = 1.5  # ties
    y[1] = -2.0  # one value: an empty span, scale 0
    valid = torch.rand(5, 2600, generator=gen) < 0.6 if padded else None
    if valid is not None:
        valid[:, 0] = True
        valid[3] = False
        valid[3, 7] = True  # one sample
    _prepares_as_the_tensor_operations(y, valid, spread)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    y=arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 40)), elements=_value),
    data=st.data(),
)
def test_property_prepare_kernel_equals_the_tensor_operations(
    y: np.ndarray, data: st.DataObject
) -> None:
    """Any values (ties, one value, signed zeros) and any padding with a valid sample a row."""
    valid = data.draw(arrays(np.bool_, y.shape))
    valid[:, 0] = True
    _prepares_as_the_tensor_operations(torch.from_numpy(y), torch.from_numpy(valid), 2)


def _split_equals_one_program(ys: torch.Tensor, count: torch.Tensor, spread: int) -> None:
    """``prepared_sorted`` with its running sums split over blocks equals its one program a
    row field by field, bit for bit (the same float64 operations in the same order)."""
    got = _gpu.prepared_sorted(ys, count, spread=spread, split=True)
    want = _gpu.prepared_sorted(ys, count, spread=spread, split=False)
    assert got.buckets == want.buckets
    for name in ("ys", "count", "prefix", "center", "table", "low", "scale"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        assert a is None or (
            a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        ), name


@pytest.mark.parametrize("spread", [2, -2])
@pytest.mark.parametrize("padded", [False, True])
def test_split_running_sums_equal_one_programs(padded: bool, spread: int) -> None:
    """Rows of 2,500 samples (three blocks, the last part full): ties, one value, padding,
    one valid sample."""
    gen = torch.Generator().manual_seed(13)
    y = torch.randn(5, 2500, generator=gen) * 7
    y[0, :1250] = 1.5  # ties
    y[1] = -2.0  # one value
    y[4] = torch.round(y[4])  # ties of integers, signed zeros among them
    y[4, ::7] = -0.0
    valid = torch.rand(5, 2500, generator=gen) < 0.6 if padded else None
    if valid is not None:
        valid[:, 0] = True
        valid[3] = False
        valid[3, 7] = True  # one sample
    ys, count, _ = _gpu.sorted_self(y, valid)
    _split_equals_one_program(ys, count, spread)


def test_few_long_rows_are_split_by_default() -> None:
    """Rows of ``_SPLIT_FROM`` samples or more, few a processor, take the split running sums
    by default, with the one program's results."""
    y = torch.randn(2, _gpu._SPLIT_FROM + 5, generator=torch.Generator().manual_seed(14))
    ys, count, _ = _gpu.sorted_self(y, None)
    assert 2 <= _gpu._SPLIT_ROWS * _gpu.sm_count(ys.device)
    default = _gpu.prepared_sorted(ys, count, spread=-2)
    want = _gpu.prepared_sorted(ys, count, spread=-2, split=False)
    assert torch.equal(default.prefix.view(torch.uint8), want.prefix.view(torch.uint8))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    y=arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 1500)), elements=_value),
    data=st.data(),
)
def test_property_split_running_sums_equal_one_programs(y: np.ndarray, data: st.DataObject) -> None:
    """Any values and padding, with and without a table (sets under 1,024 samples)."""
    valid = data.draw(arrays(np.bool_, y.shape))
    valid[:, 0] = True
    ys, count, _ = _gpu.sorted_self(torch.from_numpy(y), torch.from_numpy(valid))
    _split_equals_one_program(ys, count, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("padded", [False, True])
def test_sixteen_bit_samples_prepare_as_their_float32_values(
    dtype: torch.dtype, padded: bool
) -> None:
    """16-bit self samples are sorted in their own type and widened after: every field is
    the one of the same values given as float32."""
    gen = torch.Generator().manual_seed(13)
    y = (torch.randn(3, 1500, generator=gen) * 5).to(dtype)
    y[0, :400] = 0.5  # ties
    valid = torch.rand(3, 1500, generator=gen) < 0.7 if padded else None
    if valid is not None:
        valid[:, 0] = True
    got = _gpu.prepared_self(y, valid)
    want = _gpu.prepared_self(y.float(), valid)
    assert got.ys.dtype == torch.float32 and got.buckets == want.buckets
    for name in ("ys", "count", "prefix", "center", "low", "scale", "table"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        assert a is None or torch.equal(a, b), name


@settings(max_examples=50, deadline=None)
@given(
    values=arrays(np.float32, st.integers(2, 40), elements=st.floats(width=32, allow_nan=False)),
    low=st.floats(-1e6, 1e6, width=32),
    span=st.floats(0, 1e6, width=32),
)
def test_property_buckets_never_decrease_and_stay_in_range(
    values: np.ndarray, low: float, span: float
) -> None:
    """The kernels compare a value only with the samples of its own bucket: that is exact
    only if ``s`` never decreases with the value, for any origin and scale."""
    scale = float(np.float32(min(64 / span, 1e30) if span > 0 else 0.0))
    v = torch.sort(torch.from_numpy(values)).values
    s = _bucket_of(v, float(np.float32(low)), scale, 64)
    assert bool((s[1:] >= s[:-1]).all())
    assert int(s.min()) >= 0 and int(s.max()) <= 65
    with_nan = _bucket_of(torch.tensor([float("nan")]), float(v[0]), scale, 64)
    assert 0 <= int(with_nan) <= 65


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


def test_a_large_concentrated_self_set_ranks_exactly() -> None:
    """A few thousand self samples, most in a narrow peak and a few far out (the buckets are
    equal in value, so the peak's buckets are crowded): E equals the pairwise sum."""
    gen = torch.Generator().manual_seed(10)
    y = torch.randn(2, 3000, generator=gen) * 0.01
    y[:, :5] = torch.tensor([-500.0, -40.0, 30.0, 800.0, 1e4])
    x = torch.randn(2, 1, 400, 1, generator=gen) * 0.02
    x[:, 0, :3, 0] = torch.tensor([-1e3, 0.0, 2e4])
    got = _gpu.shared_expected(x, y, None)[:, 0]
    for row in range(2):
        want = naive_expected_rc(x[row].double().numpy().ravel(), y[row].double().numpy())
        assert float(got[row]) == pytest.approx(want, rel=1e-12)


def _strided_case(size: int, rest: float) -> torch.Tensor:
    """``x [1, 1, size]``: ``0, 1, 2, ...`` at the positions the bracket's sample reads,
    ``rest`` elsewhere."""
    x = torch.full((1, 1, size), rest)
    sampled = x[0, 0, :: _gpu._sample_step(size)]
    sampled.copy_(torch.arange(float(sampled.numel())))
    return x


@pytest.mark.parametrize(
    "case", ["sample above the crossing", "sample below the crossing", "bracket overflows"]
)
def test_a_misleading_sample_leaves_the_row_to_the_radix_selection(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bracket settles a row only when the weight at its low end falls short and every
    ``x`` inside was kept; otherwise the crossing still comes out exact."""
    monkeypatch.setattr(_gpu, "_SAMPLED_FROM", 1)
    monkeypatch.setattr(_gpu, "_SIGMAS", 0.0)  # a bracket of a few sample values
    if case == "sample above the crossing":  # the sample misses the many low x
        monkeypatch.setattr(_gpu, "_SAMPLES", 16)
        x = _strided_case(144, -1000.0)
        y = torch.arange(16.0)[None]
    elif case == "sample below the crossing":  # the sample misses the many high x
        monkeypatch.setattr(_gpu, "_SAMPLES", 16)
        x = _strided_case(144, 1000.0)
        y = torch.arange(16.0)[None]
    else:  # hundreds of x between two neighbouring sample values
        monkeypatch.setattr(_gpu, "_SAMPLES", 64)
        x = _strided_case(576, 31.5)
        y = torch.cat([torch.arange(53.0), torch.full((40,), 33.0)])[None]
    samples = _gpu.prepared_self(y, None)
    _, done = _gpu._bracketed(x, samples.ys, samples.count)
    assert not bool(done[0])
    _minimises_the_split_objective(x, y, _gpu.crossing(x, samples.ys, samples.count))


@pytest.mark.parametrize("filled", [[40, 25, 7], [1, 40, 2]])
def test_the_radix_selection_reads_only_the_filled_values(filled: list[int]) -> None:
    """A buffer filled up to ``filled[r]`` (the bracket's collected values): the values after
    it are never counted, the last one always is. With every ``y`` above every ``x``, the
    crossing is the largest ``x`` (written last), and lower values past the filled part would
    move it."""
    width, m = 40, 6
    gen = torch.Generator().manual_seed(17)
    buffer = torch.full((3, width), -1e6)  # [R, C]: what was never written
    for row, size in enumerate(filled):
        values = torch.rand(size, generator=gen) * 10 - 5
        top = int(values.argmax())
        values[[top, size - 1]] = values[[size - 1, top]]  # the largest at the end
        buffer[row, :size] = values
    ys = torch.full((3, m), 10.0)
    count = torch.full((3,), m, dtype=torch.int32)
    below = torch.tensor([width - size for size in filled])  # as if under every value
    held = torch.tensor(filled, dtype=torch.int32)

    def crossing(part: torch.Tensor | None) -> torch.Tensor:
        split = torch.empty(3, dtype=torch.float32)
        return _gpu._radix_crossing(buffer[:, None], ys, count, split, None, below, width, part)

    expected = torch.stack([buffer[row, size - 1] for row, size in enumerate(filled)])
    assert torch.equal(crossing(held), expected)
    assert not torch.equal(crossing(None), expected)  # the unwritten values would count
