"""Tests of rcstat.stats against independent oracles, invariants and hand-computed cases."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.stats import (
    block_statistics,
    cross_self_samples,
    expected_rc,
    expected_rc_shared,
    iot_expected_rc,
    markov_bound,
    normalized_rc,
    normalized_rc_shared,
    rc_lower_bound,
    rc_statistics,
    rc_upper_bound,
)
from tests._reference import algorithm1, eq6_block, iot_block, naive_expected_rc

# Samples with many ties (small integer grid) or continuous values, up to |f| ~ 1e3.
# Magnitudes below 1e-6 are excluded: shifting them by O(1) in the affine-invariance tests
# would round them away in the input itself (attention scores never live there).
_values = st.one_of(
    st.integers(-5, 5).map(float),
    st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64).filter(
        lambda v: v == 0.0 or abs(v) > 1e-6
    ),
)
samples = arrays(np.float64, st.integers(1, 40), elements=_values)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(a, dtype=torch.float64)


def _close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1.0)


# ---------------------------------------------------------------- oracles


@pytest.mark.parametrize("dtype,rel", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
@pytest.mark.parametrize("n,m", [(1, 1), (7, 3), (200, 50), (3000, 500)])
def test_matches_naive_oracle(dtype: torch.dtype, rel: float, n: int, m: int) -> None:
    gen = torch.Generator().manual_seed(n * 1000 + m)
    x = (torch.randn(4, n, generator=gen) * 300 + 5).to(dtype)
    y = (torch.randn(4, m, generator=gen) * 300).to(dtype)
    stats = rc_statistics(x, y)
    for b in range(4):
        xb, yb = x[b].double().numpy(), y[b].double().numpy()
        assert _close(float(stats.expected[b]), naive_expected_rc(xb, yb), rel)
        assert _close(float(stats.upper[b]), algorithm1(xb, yb, "upper"), rel)
        assert _close(float(stats.lower[b]), algorithm1(xb, yb, "lower"), rel)
    assert stats.expected.dtype == torch.float64


def test_large_scores_float32_against_float64_oracle() -> None:
    """Raw scores of real heads reach |f| ~ 1e3; float32 input, float64 oracle."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(64, 128, generator=gen) * 4
    k = torch.randn(300, 128, generator=gen) * 4
    scores = (q @ k.T).float()  # [64, 300], |f| up to ~1e3
    x, y = scores[:, :250].reshape(-1), scores[:, 250:].reshape(-1)
    got = rc_statistics(x, y)
    xn, yn = x.double().numpy(), y.double().numpy()
    assert _close(float(got.expected), naive_expected_rc(xn, yn), 1e-9)
    assert _close(float(got.upper), algorithm1(xn, yn, "upper"), 1e-9)
    assert _close(float(got.lower), algorithm1(xn, yn, "lower"), 1e-9)


@pytest.mark.parametrize("fraction_inside", [0.0, 0.3, 1.0])
def test_x_below_inside_and_above_the_range_of_y(fraction_inside: float) -> None:
    """x mostly below, mostly inside or around the range of y (the closed-form tails)."""
    gen = torch.Generator().manual_seed(7)
    y = torch.rand(3, 100, generator=gen)
    n = 1000
    inside = int(fraction_inside * n)
    x = torch.cat(
        [torch.rand(3, inside, generator=gen), torch.rand(3, n - inside, generator=gen) * 5 - 6],
        dim=-1,
    )
    x[:, :5] += 3  # a few above max(y)
    got = rc_statistics(x, y)
    for b in range(3):
        xb, yb = x[b].numpy(), y[b].numpy()
        assert _close(float(got.expected[b]), naive_expected_rc(xb, yb), 1e-9)
        assert _close(float(got.upper[b]), algorithm1(xb, yb, "upper"), 1e-9)
        assert _close(float(got.lower[b]), algorithm1(xb, yb, "lower"), 1e-9)


def test_masks_equal_dropping_samples() -> None:
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(5, 60, generator=gen), torch.randn(5, 40, generator=gen)
    xv = torch.rand(5, 60, generator=gen) > 0.4
    yv = torch.rand(5, 40, generator=gen) > 0.6
    xv[:, 0] = yv[:, 0] = True
    x_masked = x.masked_fill(~xv, float("nan"))  # invalid entries are never read
    got = rc_statistics(x_masked, y, x_valid=xv, y_valid=yv)
    for b in range(5):
        want = rc_statistics(x[b][xv[b]], y[b][yv[b]])
        for field in ("expected", "upper", "lower"):
            assert _close(float(getattr(got, field)[b]), float(getattr(want, field)), 1e-12)


def test_broadcast_batch_shapes() -> None:
    x = torch.randn(2, 3, 50)
    y = torch.randn(3, 20)
    got = expected_rc(x, y)
    assert got.shape == (2, 3)
    assert _close(float(got[1, 2]), naive_expected_rc(x[1, 2].numpy(), y[2].numpy()), 1e-9)


def test_chunking_does_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    import rcstat.stats.rc as rc

    x, y = torch.randn(9, 300), torch.randn(9, 80)
    whole = rc_statistics(x, y)
    monkeypatch.setattr(rc, "_CHUNK_SAMPLES", 500)  # one row per chunk
    chunked = rc_statistics(x, y)
    assert torch.equal(whole.expected, chunked.expected)
    assert torch.equal(whole.upper, chunked.upper)


# ---------------------------------------------------------------- invariants (hypothesis)


@settings(max_examples=150, deadline=None)
@given(samples, samples)
def test_invariants(x: np.ndarray, y: np.ndarray) -> None:
    s = rc_statistics(_t(x), _t(y))
    e, upper, lower = float(s.expected), float(s.upper), float(s.lower)
    tol = 1e-9 * max(1.0, float(np.abs(np.concatenate([x, y])).max()))
    assert -tol <= lower <= e + tol
    assert e <= upper + tol
    assert _close(e, naive_expected_rc(x, y), 1e-9)
    assert _close(upper, algorithm1(x, y, "upper"), 1e-9)
    assert _close(lower, algorithm1(x, y, "lower"), 1e-9)
    # E(x, y) - E(y, x) = mean(x) - mean(y)
    reverse = float(expected_rc(_t(y), _t(x)))
    assert abs((e - reverse) - (x.mean() - y.mean())) <= tol


@settings(max_examples=80, deadline=None)
@given(samples, samples, st.floats(-1e3, 1e3), st.floats(1e-3, 1e3))
def test_shift_and_scale(x: np.ndarray, y: np.ndarray, shift: float, scale: float) -> None:
    base = rc_statistics(_t(x), _t(y))
    shifted = rc_statistics(_t(x + shift), _t(y + shift))
    scaled = rc_statistics(_t(x * scale), _t(y * scale))
    span = max(1.0, float(np.abs(np.concatenate([x, y])).max()) + abs(shift))
    for field in ("expected", "upper", "lower"):
        b = float(getattr(base, field))
        assert abs(float(getattr(shifted, field)) - b) <= 1e-9 * span
        assert _close(float(getattr(scaled, field)), scale * b, 1e-9)


@settings(max_examples=80, deadline=None)
@given(samples, samples)
def test_normalized_rc_is_scale_free_and_bounded(x: np.ndarray, y: np.ndarray) -> None:
    r = float(normalized_rc(_t(x), _t(y)))
    assert 0.0 <= r <= 1.0
    assert _close(float(normalized_rc(_t(3 * x + 2), _t(3 * y + 2))), r, 1e-9)
    forward, reverse = naive_expected_rc(x, y), naive_expected_rc(y, x)
    want = 0.5 if forward + reverse == 0 else forward / (forward + reverse)
    assert _close(r, want, 1e-9)


@settings(deadline=None)  # correctness, not timing: a loaded CI machine must not fail it
@given(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3))
def test_single_samples(a: float, b: float) -> None:
    s = rc_statistics(
        torch.tensor([a], dtype=torch.float64), torch.tensor([b], dtype=torch.float64)
    )
    want = max(a - b, 0.0)
    for field in ("expected", "upper", "lower"):
        assert _close(float(getattr(s, field)), want, 1e-12)


# ---------------------------------------------------------------- hand-computed cases


def test_hand_computed() -> None:
    # x = {3, 1}, y = {0, 2}: pairs 3, 1, 1, 0 -> E = 5/4.
    # F_y = 1/2 on [0, 2), 1 after; S_x = 1 before 1, 1/2 on [1, 3), 0 after.
    # A = ∫_0^3 min = 0.5 * 3 = 1.5; a = ∫ (F_y - F_x)+ = 0.5 on [0,1) + 0.5 on [2,3) = 1.0.
    x, y = torch.tensor([3.0, 1.0]), torch.tensor([0.0, 2.0])
    s = rc_statistics(x, y)
    assert float(s.expected) == pytest.approx(1.25, abs=1e-15)
    assert float(s.upper) == pytest.approx(1.5, abs=1e-15)
    assert float(s.lower) == pytest.approx(1.0, abs=1e-15)
    # Fully separated: x above y -> all three equal mean(x) - mean(y).
    s = rc_statistics(torch.tensor([10.0, 12.0]), torch.tensor([1.0, 3.0, 5.0]))
    for v in (s.expected, s.upper, s.lower):
        assert float(v) == pytest.approx(11.0 - 3.0, abs=1e-12)
    # Fully below: all zero.
    s = rc_statistics(torch.tensor([-5.0, -4.0]), torch.tensor([1.0, 3.0]))
    assert float(s.expected) == float(s.upper) == float(s.lower) == 0.0


def test_markov_bound() -> None:
    assert float(markov_bound(torch.tensor(0.5), 0.25)) == 2.0
    with pytest.raises(ValueError, match="delta"):
        markov_bound(0.5, 0.0)
    with pytest.raises(ValueError, match="non-negative"):
        markov_bound(-1.0, 0.5)


def test_markov_bound_holds_empirically() -> None:
    """P(Z >= A/δ) <= δ for Z = max(X - Y, 0) over all pairs."""
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(500, generator=gen) + 0.5, torch.randn(400, generator=gen)
    upper = rc_upper_bound(x, y)
    z = (x[:, None] - y[None, :]).clamp_min(0)
    for delta in (0.05, 0.2, 0.5):
        assert float((z >= markov_bound(upper, delta)).double().mean()) <= delta


# ---------------------------------------------------------------- generation blocks


@pytest.mark.parametrize("m,g", [(1, 1), (3, 2), (5, 4), (2, 6)])
def test_block_statistics_equal_eq6(m: int, g: int) -> None:
    gen = torch.Generator().manual_seed(m * 10 + g)
    scores = torch.randn(3, g, m + g, generator=gen, dtype=torch.float64) * 4
    stats = block_statistics(scores, m)
    for h in range(3):
        assert _close(float(stats.expected[h]), eq6_block(scores[h].numpy(), m), 1e-9)


def test_block_samples_and_bounds() -> None:
    scores = torch.arange(2 * 5, dtype=torch.float64).reshape(2, 5)  # g = 2, m = 3
    x, xv, y, yv = cross_self_samples(scores, 3)
    assert x.tolist() == [0, 1, 2, 5, 6, 7]
    assert y.tolist() == [3, 8, 9]  # f(k, l), k <= l: (3,3), (3,4), (4,4)
    assert xv is None and yv is None
    stats = block_statistics(scores, 3)
    xs, ys = np.array([0, 1, 2, 5, 6, 7.0]), np.array([3, 8, 9.0])
    assert _close(float(stats.upper), algorithm1(xs, ys, "upper"), 1e-12)


@pytest.mark.parametrize("m,g", [(1, 1), (4, 3), (6, 7)])
def test_iot_matches_loops(m: int, g: int) -> None:
    gen = torch.Generator().manual_seed(m + 100 * g)
    scores = torch.randn(2, g, m + g, generator=gen, dtype=torch.float64)
    got = iot_expected_rc(scores, m)
    for h in range(2):
        assert _close(float(got[h]), iot_block(scores[h].numpy(), m), 1e-9)


def test_block_errors() -> None:
    with pytest.raises(ValueError, match="key columns"):
        block_statistics(torch.zeros(2, 4, 9), 4)
    with pytest.raises(ValueError, match="prompt_len"):
        block_statistics(torch.zeros(2, 4, 4), 0)
    with pytest.raises(ValueError, match="generation is empty"):
        block_statistics(torch.zeros(2, 0, 3), 3)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "x,y,match",
    [
        (torch.zeros(0), torch.ones(3), "x is empty"),
        (torch.ones(3), torch.zeros(2, 0), "y is empty"),
        (torch.tensor([1.0, float("nan")]), torch.ones(2), "non-finite"),
        (torch.ones(2), torch.tensor([float("inf")]), "non-finite"),
        (torch.tensor(1.0), torch.ones(2), "sample axis"),
        (torch.ones(2, 3), torch.ones(3, 3), "do not broadcast"),
    ],
)
def test_bad_input(x: torch.Tensor, y: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rc_statistics(x, y)


def test_bad_masks() -> None:
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="no valid sample in batch entry"):
        expected_rc(x, y, x_valid=torch.tensor([[True, False, False], [False] * 3]))
    with pytest.raises(ValueError, match="must match"):
        expected_rc(x, y, y_valid=torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(TypeError, match="boolean"):
        expected_rc(x, y, x_valid=torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"torch\.Tensor"):
        expected_rc([1.0, 2.0], y)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"real scores, got torch\.complex64"):
        expected_rc(x, y.to(torch.complex64))  # the imaginary part would be dropped


def test_lower_and_upper_functions_agree_with_statistics() -> None:
    x, y = torch.randn(4, 30), torch.randn(4, 10)
    s = rc_statistics(x, y)
    assert torch.equal(rc_upper_bound(x, y), s.upper)
    assert torch.equal(rc_lower_bound(x, y), s.lower)


def test_stats_does_not_import_transformers() -> None:
    code = "import sys, rcstat.stats; assert 'transformers' not in sys.modules, 'leak'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("flat", [False, True])
def test_row_cumsum_keeps_one_row_accuracy(flat: bool) -> None:
    """The kernel's prefix sums, including the one-scan (GPU) variant over many rows."""
    from rcstat.stats._kernel import _row_cumsum

    gen = torch.Generator().manual_seed(9)
    values = torch.randn(4000, 257, generator=gen, dtype=torch.float64) * 50 - 300
    got = _row_cumsum(values.clone(), flat=flat)
    want = values.cumsum(-1)
    assert float((got - want).abs().max()) <= 1e-13 * float(want.abs().max())


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 8)), elements=_values), samples
)
def test_expected_rc_shared_equals_pairwise(x: np.ndarray, y: np.ndarray) -> None:
    got = expected_rc_shared(_t(x), _t(y))
    for row in range(x.shape[0]):
        assert _close(float(got[row]), naive_expected_rc(x[row], y), 1e-9)


def test_expected_rc_shared_batched_and_errors() -> None:
    gen = torch.Generator().manual_seed(11)
    x, y = torch.randn(3, 4, 50, 8, generator=gen) * 30, torch.randn(3, 4, 36, generator=gen) * 30
    got = expected_rc_shared(x, y)
    assert got.shape == (3, 4, 50)
    want = expected_rc(x, y.unsqueeze(-2))
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="same leading shape"):
        expected_rc_shared(x, y[0])
    with pytest.raises(ValueError, match="non-finite"):
        expected_rc_shared(x, y.clone().fill_(float("nan")))


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 6)), elements=_values),
    arrays(np.float64, st.integers(1, 7), elements=_values),
    st.data(),
)
def test_expected_rc_shared_ragged_y_equals_pairwise(
    x: np.ndarray, y: np.ndarray, data: st.DataObject
) -> None:
    """With ``y_valid`` only the marked self samples count (the masked ones may be anything)."""
    valid = np.array(data.draw(st.lists(st.booleans(), min_size=len(y), max_size=len(y))))
    valid[data.draw(st.integers(0, len(y) - 1))] = True
    garbage = np.where(valid, y, 1e6)
    got = expected_rc_shared(_t(x), _t(garbage), y_valid=torch.tensor(valid))
    for row in range(x.shape[0]):
        assert _close(float(got[row]), naive_expected_rc(x[row], y[valid]), 1e-9)


def test_expected_rc_shared_ragged_rows_and_empty_set() -> None:
    """Per-row causal masks (the grounding layout) and a set without a valid sample."""
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(2, 6, 1, 40, generator=gen), torch.randn(2, 6, 6, generator=gen)
    valid = torch.ones(6, 6, dtype=torch.bool).tril()  # row j sees y[:j+1]
    got = expected_rc_shared(x, y, y_valid=valid.expand(2, 6, 6))
    for row in range(6):
        want = expected_rc(x[:, row], y[:, row, None, : row + 1])
        torch.testing.assert_close(got[:, row], want, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="no valid sample"):
        expected_rc_shared(x, y, y_valid=torch.zeros(2, 6, 6, dtype=torch.bool))


def test_normalized_rc_shared_equals_normalized_rc() -> None:
    """The searched variant against the sorted one, ragged causal rows included."""
    gen = torch.Generator().manual_seed(8)
    x, y = torch.randn(3, 5, 1, 30, generator=gen) * 4, torch.randn(3, 5, 5, generator=gen)
    valid = torch.ones(5, 5, dtype=torch.bool).tril()
    got = normalized_rc_shared(x, y, y_valid=valid.expand(3, 5, 5))
    want = normalized_rc(x[..., 0, :], y, y_valid=valid.expand(3, 5, 5))
    torch.testing.assert_close(got[..., 0], want, rtol=1e-9, atol=1e-9)
    same = torch.zeros(1, 1, 3)
    assert float(normalized_rc_shared(same, torch.zeros(1, 2))) == 0.5


def test_units_key_expected_matches_pairwise_sums() -> None:
    """``t_h(g', i)`` of every unit, head and key vs the literal double sum over Y(g, g')."""
    from rcstat.stats import unit_rows, units_key_expected

    gen = torch.Generator().manual_seed(11)
    prompt, g = 9, 6
    block = (torch.randn(2, g, prompt + g, generator=gen) * 5).round(decimals=1)
    units = [(0, 2), (2, 3), (3, 6)]
    rows = unit_rows(units, prompt + g, prompt)
    got = units_key_expected(block, rows, (1, 8))  # [U, H, K]
    assert got.shape == (3, 2, 7) and got.dtype == torch.float64
    for u, (a, b) in enumerate(units):
        for h in range(2):
            y = [float(block[h, q, prompt + k]) for q in range(a, b) for k in range(q + 1)]
            for i in range(1, 8):
                x = block[h, a:b, i].double().numpy()
                want = naive_expected_rc(x, np.array(y))
                assert float(got[u, h, i - 1]) == pytest.approx(want, rel=1e-12, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 7), st.integers(1, 6)),
    units=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 7)), min_size=1, max_size=4),
    ties=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_block_units_expected_equals_the_two_searches(
    shape: tuple[int, int, int], units: list[tuple[int, int]], ties: bool, seed: int
) -> None:
    """One search of each cross sample in ``Y(g, g)`` gives the head's ranking and every
    unit's key values: those of :func:`block_expected` and :func:`units_key_expected` (units
    anywhere in the rows: overlapping, nested, with gaps), ties and all; and the pairwise sums
    for the head's."""
    from rcstat.stats import block_expected, block_units_expected, unit_rows, units_key_expected

    heads, g, prompt = shape
    ranges = sorted({(min(a, g - 1), min(min(a, g - 1) + n, g)) for a, n in units})
    gen = torch.Generator().manual_seed(seed)
    block = torch.randn(heads, g, prompt + g, generator=gen) * 3
    if ties:
        block = block.round()
    rows = unit_rows(ranges, prompt + g, prompt)
    keys = (min(1, prompt - 1), prompt)
    expected, per_key = block_units_expected(block, prompt, rows, keys)
    torch.testing.assert_close(expected, block_expected(block, prompt), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        per_key, units_key_expected(block, rows, keys), rtol=1e-10, atol=1e-10
    )
    for h in range(heads):
        x = block[h, :, :prompt].double().numpy()
        y = np.array([float(block[h, q, prompt + k]) for q in range(g) for k in range(q + 1)])
        assert float(expected[h]) == pytest.approx(naive_expected_rc(x, y), rel=1e-10, abs=1e-10)


def test_block_units_expected_refuses_a_batch_of_blocks() -> None:
    from rcstat.stats import block_units_expected, unit_rows

    rows = unit_rows([(0, 2)], 7, 5)
    with pytest.raises(ValueError, match="one block"):
        block_units_expected(torch.zeros(2, 3, 2, 7), 5, rows, (0, 5))


def test_unit_rows_rejects_empty_units() -> None:
    from rcstat.stats import unit_rows

    with pytest.raises(ValueError, match="empty"):
        unit_rows([], 10, 4)
    with pytest.raises(ValueError, match=r"\[3, 3\)"):
        unit_rows([(0, 2), (3, 3)], 10, 4)


def test_block_expected_and_self_samples_agree_with_the_block_statistics() -> None:
    from rcstat.stats import block_expected, self_samples

    gen = torch.Generator().manual_seed(5)
    block = torch.randn(3, 2, 5, 12, generator=gen) * 4  # [..., g = 5, m + g = 12]
    stats = block_statistics(block, 7)
    torch.testing.assert_close(block_expected(block, 7), stats.expected, rtol=1e-12, atol=1e-12)
    _, _, y, _ = cross_self_samples(block, 7)
    torch.testing.assert_close(self_samples(block, 7), y)
    assert self_samples(block, 7).shape == (3, 2, 15)
    without = rc_statistics(block[..., :7].reshape(3, 2, -1), y, lower=False)
    assert without.lower is None
    torch.testing.assert_close(without.upper, stats.upper)
    with pytest.raises(ValueError, match="key columns"):
        self_samples(block, 6)


@given(
    units=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 6)), min_size=1, max_size=5),
    prompt=st.integers(0, 9),
)
def test_unit_rows_index_every_causal_self_sample_of_each_unit(
    units: list[tuple[int, int]], prompt: int
) -> None:
    """Unit ``[a, b)`` holds the flat positions ``j·columns + m + k`` of every pair
    ``a <= j < b``, ``k <= j``, query after query, in a ``[g, columns]`` block."""
    from rcstat.stats import unit_rows

    ranges = [(a, a + length) for a, length in units]
    columns = prompt + max(b for _, b in ranges) + 3
    rows = unit_rows(ranges, columns, prompt)
    for (a, b), index, valid in zip(ranges, rows.index, rows.valid, strict=True):
        want = [j * columns + prompt + k for j in range(a, b) for k in range(j + 1)]
        assert index[valid].tolist() == want
    assert rows.starts.tolist() == [a for a, _ in ranges]
    assert rows.lengths.tolist() == [b - a for a, b in ranges]
    assert rows.longest == max(b - a for a, b in ranges)
