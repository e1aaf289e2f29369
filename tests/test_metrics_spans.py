"""rcstat.metrics.spans: example-level P/R/F1 against scikit-learn, character-level P/R/F1
against a per-character brute force (overlapping spans counted once), and the group
bootstrap checked by recording the indices each resample drew."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score, precision_score, recall_score

from rcstat.metrics.spans import PRF, char_overlap, char_prf, example_prf, group_bootstrap, prf


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


# ------------------------------------------------------------------------------------ prf


@pytest.mark.parametrize(
    ("hits", "predicted", "actual", "want"),
    [
        (3, 4, 6, (0.75, 0.5, 0.6)),
        (4, 4, 4, (1.0, 1.0, 1.0)),
        (0, 4, 6, (0.0, 0.0, 0.0)),  # both defined, no hit: F1 0
        (0, 0, 6, (math.nan, 0.0, math.nan)),  # nothing predicted: no precision, no F1
        (0, 5, 0, (0.0, math.nan, math.nan)),  # nothing to find
        (0, 0, 0, (math.nan, math.nan, math.nan)),
        (1, 3, 1, (1 / 3, 1.0, 0.5)),
    ],
)
def test_prf_by_hand(hits: float, predicted: float, actual: float, want: tuple) -> None:  # type: ignore[type-arg]
    got = prf(hits, predicted, actual)
    assert isinstance(got, PRF)
    for value, expected in zip((got.precision, got.recall, got.f1), want, strict=True):
        assert _same(value, expected)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=40))
def test_example_prf_equals_sklearn(pairs: list[tuple[bool, bool]]) -> None:
    flagged = np.array([p[0] for p in pairs])
    labels = np.array([p[1] for p in pairs])
    got = example_prf(flagged, labels)
    want_p = precision_score(labels, flagged, zero_division=np.nan)
    want_r = recall_score(labels, flagged, zero_division=np.nan)
    assert _same(got.precision, float(want_p))
    assert _same(got.recall, float(want_r))
    if flagged.any() and labels.any():  # sklearn's F1 is 0 where ours is undefined (NaN)
        assert _same(got.f1, float(f1_score(labels, flagged)))
    else:
        assert math.isnan(got.f1)
    # 0/1 integers read as booleans
    again = example_prf(flagged.astype(int), labels.astype(int))
    assert all(_same(a, b) for a, b in zip(vars(again).values(), vars(got).values(), strict=True))


def test_example_prf_by_hand_and_errors() -> None:
    assert example_prf([True, True, False, False], [True, False, True, False]) == PRF(0.5, 0.5, 0.5)
    with pytest.raises(ValueError, match="flagged and labels differ in length: 2 and 3"):
        example_prf([True, False], [True, False, True])
    with pytest.raises(ValueError, match="flagged must be booleans"):
        example_prf([0.5, 1.0], [True, False])
    with pytest.raises(ValueError, match="labels must be booleans"):
        example_prf([True, False], [2, 0])


# ---------------------------------------------------------------------- character level

_SPAN = st.tuples(st.integers(0, 30), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1]))
_SPANS = st.lists(_SPAN, max_size=5)


def _brute_force(
    predicted: list[tuple[int, int]], labelled: list[tuple[int, int]]
) -> tuple[int, int, int]:
    """Per character: inside some predicted span, some labelled span, both."""
    top = max([e for _, e in predicted + labelled], default=0)
    both = in_p = in_t = 0
    for c in range(top):
        p = any(s <= c < e for s, e in predicted)
        t = any(s <= c < e for s, e in labelled)
        both += p and t
        in_p += p
        in_t += t
    return both, in_p, in_t


def test_char_overlap_by_hand() -> None:
    assert char_overlap([(0, 10), (5, 12)], [(8, 20)]) == (4, 12, 12)
    assert char_overlap([(0, 4), (0, 4), (2, 3)], [(0, 4)]) == (4, 4, 4)  # counted once
    assert char_overlap([], [(3, 7)]) == (0, 0, 4)
    assert char_overlap([(3, 3)], []) == (0, 0, 0)  # an empty span has no character


@settings(max_examples=300, deadline=None)
@given(predicted=_SPANS, labelled=_SPANS)
def test_char_overlap_equals_the_per_character_count(
    predicted: list[tuple[int, int]], labelled: list[tuple[int, int]]
) -> None:
    assert char_overlap(predicted, labelled) == _brute_force(predicted, labelled)


@settings(max_examples=150, deadline=None)
@given(responses=st.lists(st.tuples(_SPANS, _SPANS), max_size=6))
def test_char_prf_sums_over_responses(
    responses: list[tuple[list[tuple[int, int]], list[tuple[int, int]]]],
) -> None:
    predicted = [p for p, _ in responses]
    labelled = [t for _, t in responses]
    got = char_prf(predicted, labelled)
    totals = np.array([_brute_force(p, t) for p, t in responses]).reshape(-1, 3).sum(axis=0)
    want = prf(*map(float, totals))
    assert all(_same(a, b) for a, b in zip(vars(got).values(), vars(want).values(), strict=True))
    # the same as one long response with every response shifted past the previous ones
    shift, flat_p, flat_t = 0, [], []
    for p, t in responses:
        flat_p += [(s + shift, e + shift) for s, e in p]
        flat_t += [(s + shift, e + shift) for s, e in t]
        shift += 100
    flat = char_prf([flat_p], [flat_t])
    assert all(_same(a, b) for a, b in zip(vars(got).values(), vars(flat).values(), strict=True))


def test_char_prf_by_hand_and_errors() -> None:
    # 2 of 4 predicted characters are labelled; 2 of 4 + 3 labelled are found
    got = char_prf([[(0, 4)], []], [[(2, 6)], [(0, 3)]])
    assert got.precision == 0.5 and got.recall == pytest.approx(2 / 7)
    assert got.f1 == pytest.approx(2 * 0.5 * (2 / 7) / (0.5 + 2 / 7))
    # a span predicted in a faithful response costs precision
    assert char_prf([[(0, 4)], [(0, 4)]], [[(0, 4)], []]).precision == 0.5
    empty = char_prf([], [])
    assert math.isnan(empty.precision) and math.isnan(empty.recall) and math.isnan(empty.f1)
    with pytest.raises(ValueError, match="predicted and labelled differ in length: 1, 2"):
        char_prf([[]], [[], []])
    with pytest.raises(ValueError, match=r"predicted span \[5, 2\) is not a range of offsets"):
        char_overlap([(5, 2)], [])
    with pytest.raises(ValueError, match=r"labelled span \[-1, 2\) is not a range of offsets"):
        char_overlap([], [(-1, 2)])


# -------------------------------------------------------------------------- group bootstrap


def test_group_bootstrap_of_a_constant_and_of_one_example() -> None:
    assert group_bootstrap(lambda i: 0.25, 7, n_resamples=50) == (0.25, 0.25)
    # one example, or one group holding everything: every resample is the whole sample, an
    # interval of width 0 that would read as certainty; refused
    values = np.array([3.0])
    with pytest.raises(ValueError, match="needs at least 2 examples, got 1"):
        group_bootstrap(lambda i: float(values[i].mean()), 1, n_resamples=30)
    data = np.arange(6.0)
    with pytest.raises(ValueError, match="needs at least 2 groups, got 1"):
        group_bootstrap(lambda i: float(data[i].sum()), 6, groups=["g"] * 6, n_resamples=20)


def test_group_bootstrap_draws_whole_groups_and_is_the_percentile_interval() -> None:
    groups = ["a", "a", "a", "b", "c", "c", "d", "e", "e", "e"]
    members = {g: [i for i, x in enumerate(groups) if x == g] for g in set(groups)}
    data = np.array([1.0, 1.0, 1.0, 5.0, 2.0, 2.0, 9.0, 0.0, 0.0, 0.0])
    seen: list[np.ndarray] = []

    def statistic(index: np.ndarray) -> float:
        seen.append(np.sort(index))
        return float(data[index].mean())

    low, high = group_bootstrap(statistic, 10, groups=groups, n_resamples=200, seed=3, level=0.9)
    assert len(seen) == 200
    for index in seen:
        counts = np.bincount(index, minlength=10)
        for rows in members.values():  # a group's members are drawn together, as often
            assert len(set(counts[rows])) == 1
        drawn = sum(int(counts[rows[0]]) for rows in members.values())
        assert drawn == len(members)  # as many groups as there are
    values = [float(data[i].mean()) for i in seen]
    assert (low, high) == pytest.approx(tuple(np.quantile(values, [0.05, 0.95])))
    # the same seed draws the same resamples
    assert group_bootstrap(
        lambda i: float(data[i].mean()), 10, groups=groups, n_resamples=200, seed=3, level=0.9
    ) == (low, high)


def test_group_bootstrap_without_groups_draws_single_examples() -> None:
    seen: list[np.ndarray] = []

    def statistic(index: np.ndarray) -> float:
        seen.append(index)
        return float(len(index))

    assert group_bootstrap(statistic, 5, n_resamples=40) == (5.0, 5.0)
    assert any(len(set(i.tolist())) < 5 for i in seen)  # with replacement


def test_group_bootstrap_skips_nan_statistics() -> None:
    data = np.array([0.0, 1.0, 2.0, 3.0])
    kept: list[float] = []
    calls = [0]

    def statistic(index: np.ndarray) -> float:
        calls[0] += 1
        if calls[0] % 3 == 0:  # every third resample has no value
            return float("nan")
        kept.append(float(data[index].mean()))
        return kept[-1]

    low, high = group_bootstrap(statistic, 4, n_resamples=90)
    assert len(kept) == 60
    assert (low, high) == pytest.approx(tuple(np.quantile(kept, [0.025, 0.975])))

    def mostly_nan(index: np.ndarray) -> float:
        return float("nan") if index[0] != 0 else 1.0

    with pytest.raises(ValueError, match=r"of 100 resamples gave no value \(more than half\)"):
        group_bootstrap(mostly_nan, 4, n_resamples=100)


@pytest.mark.parametrize(
    ("n", "options", "message"),
    [
        (0, {}, "at least 2 examples, got 0"),
        (3, {"level": 1.0}, r"level must be in \(0, 1\)"),
        (3, {"level": 0.0}, r"level must be in \(0, 1\)"),
        (3, {"groups": ["a", "b"]}, "groups has 2 entries but scores has 3"),
        (2, {"groups": [["a"], ["b"]]}, "groups must be one-dimensional"),
    ],
)
def test_group_bootstrap_errors(n: int, options: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        group_bootstrap(lambda i: 1.0, n, n_resamples=10, **options)
