"""rcstat.grounding.sample_weights: each dataset's weight per response and token, by hand and
as invariants (every dataset the same total when balanced, a mean of 1 in every fit)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.grounding.sample_weights import DatasetWeights


def test_by_hand() -> None:
    # a: 3 responses of 10, 10 and 20 tokens; b: one of 10 tokens and one without spans
    weights = DatasetWeights.of(
        ["a", "a", "a", "b", "b"], [10, 10, 20, None, 10], balance=True, extra={"b": 0.5}
    )
    # responses: a 3, b 2, mean 2.5 -> a 2.5/3, b 0.5 * 2.5/2; tokens: a 40, b 10, mean 25
    assert weights.response == pytest.approx({"a": 2.5 / 3, "b": 0.625})
    assert weights.token == pytest.approx({"a": 25 / 40, "b": 0.5 * 25 / 10})
    raw = np.array([2.5 / 3, 0.625, 0.625])
    np.testing.assert_allclose(weights.of_responses(["a", "b", "b"]), raw * 3 / raw.sum())
    tokens = weights.of_tokens(["a", "b"], [2, 1])
    raw = np.array([0.625, 0.625, 1.25])
    np.testing.assert_allclose(tokens, raw * 3 / raw.sum())
    plain = DatasetWeights.of(["a", "b", "b"], [1, 2, 3], balance=False, extra={"a": 3.0})
    assert plain.response == plain.token == {"a": 3.0, "b": 1.0}


def test_a_subset_keeps_its_datasets_weights() -> None:
    """The few responses of a dataset in a subset weigh what they weigh in the whole set,
    relative to the others (balancing inside the subset would give them the dataset's total)."""
    datasets = ["big"] * 100 + ["small"] * 100
    weights = DatasetWeights.of(datasets, [5] * 200, balance=True, extra={"small": 0.1})
    subset = weights.of_responses(["big"] * 95 + ["small"] * 5)
    assert subset[-1] / subset[0] == pytest.approx(0.1)
    assert subset.mean() == pytest.approx(1.0)


def test_refusals() -> None:
    with pytest.raises(ValueError, match="2 datasets for 1 token counts"):
        DatasetWeights.of(["a", "b"], [1], balance=True, extra={})
    with pytest.raises(KeyError):
        DatasetWeights.of(["a"], [1], balance=True, extra={}).of_responses(["b"])


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.dictionaries(st.sampled_from("abcd"), st.integers(1, 30), min_size=1),
    extra=st.dictionaries(st.sampled_from("abcd"), st.floats(0.01, 100.0)),
    balance=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_invariants(
    sizes: dict[str, int], extra: dict[str, float], balance: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    datasets = [d for d, n in sizes.items() for _ in range(n)]
    counts = [int(c) for c in rng.integers(1, 9, size=len(datasets))]
    weights = DatasetWeights.of(datasets, counts, balance=balance, extra=extra)
    w = weights.of_responses(datasets)
    assert w.shape == (len(datasets),) and (w > 0).all() and w.mean() == pytest.approx(1.0)
    t = weights.of_tokens(datasets, counts)
    assert t.shape == (sum(counts),) and t.mean() == pytest.approx(1.0)
    totals = {d: w[[x == d for x in datasets]].sum() / extra.get(d, 1.0) for d in sizes}
    token_totals = {}
    at = np.cumsum([0, *counts])
    for d in sizes:
        picked = [i for i, x in enumerate(datasets) if x == d]
        token_totals[d] = sum(t[at[i] : at[i + 1]].sum() for i in picked) / extra.get(d, 1.0)
    if balance:  # every dataset the same total, apart from its extra weight
        for values in (totals, token_totals):
            assert np.allclose(list(values.values()), next(iter(values.values())))
    else:  # every response (token) of a dataset weighs its extra weight, relative to the others
        ratio = w / np.array([extra.get(d, 1.0) for d in datasets])
        assert np.allclose(ratio, ratio[0])
