"""rcstat.attribution.consensus against brute-force ranks and single-example rankings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rcstat.attribution import consensus_heads, mean_head_ranks


def _brute_ranks(values: np.ndarray) -> np.ndarray:
    """1 + the number of larger values + half the ties (mean rank), one by one."""
    flat = values.reshape(-1)
    return np.array([1 + (flat > v).sum() + ((flat == v).sum() - 1) / 2 for v in flat]).reshape(
        values.shape
    )


_rankings = st.integers(1, 4).flatmap(
    lambda n: st.lists(
        arrays(np.float64, (3, 4), elements=st.floats(-5, 5, allow_nan=False, width=32)),
        min_size=n,
        max_size=n,
    )
)


@settings(max_examples=60, deadline=None)
@given(rankings=_rankings, k=st.integers(1, 12))
def test_mean_ranks_and_consensus_against_brute_force(rankings, k) -> None:
    mean = mean_head_ranks(rankings)
    want = np.mean([_brute_ranks(r) for r in rankings], axis=0)
    np.testing.assert_allclose(mean, want)
    heads = consensus_heads(rankings, k)
    assert len(heads) == len(set(heads)) == k
    chosen = {la * 4 + h for la, h in heads}
    flat = want.reshape(-1)
    worst_chosen = max(flat[i] for i in chosen)
    assert all(flat[i] >= worst_chosen for i in range(12) if i not in chosen)


def test_one_example_gives_its_own_top_heads() -> None:
    values = np.array([[0.1, 0.9, 0.3], [0.7, 0.2, 0.5]])
    assert consensus_heads([values], 3) == [(0, 1), (1, 0), (1, 2)]
    # ranks, not values: one example with a large scale does not decide alone
    loud = np.array([[100.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    quiet = [np.array([[0.0, 0.2, 0.1], [0.0, 0.0, 0.0]])] * 2
    assert consensus_heads([loud, *quiet], 1) == [(0, 1)]


@pytest.mark.parametrize(
    ("rankings", "match"),
    [
        ([], "at least one"),
        ([np.zeros((2, 3)), np.zeros((3, 2))], "one shape"),
        ([np.zeros(6)], r"\[layers, heads\]"),
        ([np.array([[0.0, np.nan]])], "NaN"),
    ],
)
def test_bad_rankings_are_refused(rankings, match) -> None:
    with pytest.raises(ValueError, match=match):
        mean_head_ranks(rankings)


def test_top_k_outside_the_heads_is_refused() -> None:
    with pytest.raises(ValueError, match="top_k must be an integer in"):
        consensus_heads([np.zeros((2, 2))], 5)
