"""Paired comparisons: hand cases, invariants and a plain-numpy bootstrap as the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.metrics.paired import paired_difference

scores = st.lists(st.floats(0, 100, allow_nan=False), min_size=2, max_size=30)


def test_hand_case() -> None:
    found = paired_difference([80.0, 50.0, 100.0], [50.0, 50.0, 0.0], weights=[2, 1, 1])
    assert found.difference == pytest.approx((2 * 30 + 0 + 100) / 4)
    assert (found.wins, found.ties, found.losses, found.examples) == (2, 1, 0, 3)
    assert found.win_share == pytest.approx(2 / 3)
    assert found.low <= found.difference <= found.high
    errors = paired_difference([0.1, 0.3], [0.2, 0.2], higher_is_better=False)
    assert (errors.wins, errors.losses) == (1, 1)  # a lower error wins


def test_a_constant_difference_has_a_point_interval() -> None:
    found = paired_difference([3.0, 5.0, 9.0], [1.0, 3.0, 7.0])
    assert (found.difference, found.low, found.high) == (2.0, 2.0, 2.0)
    assert found.excludes_zero and found.wins == 3
    single = paired_difference([1.0], [0.0])
    assert single.difference == 1.0 and np.isnan(single.low) and not single.excludes_zero


@settings(max_examples=40, deadline=None)
@given(data=st.data(), a=scores)
def test_swapping_negates_and_weights_default_to_one(data: st.DataObject, a: list[float]) -> None:
    b = data.draw(st.lists(st.floats(0, 100), min_size=len(a), max_size=len(a)))
    ab, ba = paired_difference(a, b), paired_difference(b, a)
    assert ab.difference == pytest.approx(-ba.difference, abs=1e-9)
    assert ab.low == pytest.approx(-ba.high, abs=1e-9) and ab.high == pytest.approx(
        -ba.low, abs=1e-9
    )
    assert (ab.wins, ab.ties, ab.losses) == (ba.losses, ba.ties, ba.wins)
    assert ab.wins + ab.ties + ab.losses == len(a)
    ones = paired_difference(a, b, weights=np.ones(len(a)))
    assert (ones.difference, ones.low, ones.high) == (ab.difference, ab.low, ab.high)
    shifted = paired_difference(np.add(a, 7.0), b)
    assert shifted.difference == pytest.approx(ab.difference + 7.0, abs=1e-9)


def test_interval_matches_a_plain_bootstrap() -> None:
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 100, 40)
    b = a - 5 + rng.normal(0, 10, 40)
    w = rng.integers(1, 6, 40).astype(float)
    found = paired_difference(a, b, weights=w, n_resamples=20000)
    picks = rng.integers(0, 40, size=(20000, 40))  # resample whole examples
    diffs = ((a - b)[picks] * w[picks]).sum(1) / w[picks].sum(1)
    low, high = np.percentile(diffs, [2.5, 97.5])
    assert found.low == pytest.approx(low, abs=0.3) and found.high == pytest.approx(high, abs=0.3)
    assert found.difference == pytest.approx(((a - b) * w).sum() / w.sum())


@pytest.mark.parametrize(
    ("a", "b", "weights", "message"),
    [
        ([1.0, 2.0], [1.0], None, "equal 1-D lengths"),
        ([], [], None, "no pair"),
        ([1.0, float("nan")], [1.0, 2.0], None, "must be finite"),
        ([1.0, 2.0], [1.0, 2.0], [1.0, 0.0], "weights must be finite and positive"),
    ],
)
def test_bad_input(
    a: list[float], b: list[float], weights: list[float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        paired_difference(a, b, weights=weights)
    with pytest.raises(ValueError, match="level"):
        paired_difference([1.0, 2.0], [0.0, 1.0], level=1.0)
