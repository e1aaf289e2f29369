"""rcstat.metrics.thresholds against independent oracles: balanced accuracy and the best
threshold by looping over every rule in exact fractions, threshold transfer recomputed."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import balanced_accuracy_score

from rcstat.metrics.thresholds import (
    balanced_accuracy,
    balanced_accuracy_of_predictions,
    best_threshold,
    false_alarm_threshold,
    threshold_transfer,
)
from tests._metrics_oracles import brute_best, grouped, loop_balanced_accuracy, scored_data

# ------------------------------------------------------------------- balanced accuracy


@settings(max_examples=100, deadline=None)
@given(scored_data(), st.floats(-12, 12, allow_nan=False), st.booleans())
def test_balanced_accuracy_equals_loop(
    data: tuple[list[float], list[bool]], threshold: float, at_a_score: bool
) -> None:
    scores, labels = data
    if at_a_score:  # thresholds equal to a score: ">=" must flag it
        threshold = scores[0]
    expected = float(loop_balanced_accuracy(scores, labels, threshold))
    got = balanced_accuracy(np.array(scores), np.array(labels), threshold)
    assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=150, deadline=None)
@given(scored_data())
def test_best_threshold_is_the_brute_force_maximiser(
    data: tuple[list[float], list[bool]],
) -> None:
    scores, labels = data
    best, winner = brute_best(scores, labels)
    t = best_threshold(np.array(scores), np.array(labels))
    assert np.isfinite(t)
    # reaches the best balanced accuracy over every possible rule ...
    assert loop_balanced_accuracy(scores, labels, t) == best
    assert balanced_accuracy(np.array(scores), np.array(labels), t) == pytest.approx(float(best))
    # ... and is the smallest documented candidate that does
    assert winner != float("inf")  # never: the lowest score also gives ½, and is smaller
    assert t == pytest.approx(winner, rel=1e-15, abs=0)


def test_best_threshold_by_hand() -> None:
    # separable: any t in (0.3, 0.7] is perfect; the midpoint is returned
    assert best_threshold(np.array([0.9, 0.7, 0.3, 0.1]), np.array([1, 1, 0, 0])) == 0.5
    # reversed ranking: no rule beats ½; the lowest score (flag everything) wins the tie
    assert best_threshold(np.array([0.1, 0.3, 0.7, 0.9]), np.array([1, 1, 0, 0])) == 0.1
    # tie between "flag >= 3" (t = 2) and "flag >= 7" (t = 6), both ¾: the smaller
    scores, labels = np.array([1.0, 3.0, 5.0, 7.0]), np.array([0, 1, 0, 1])
    assert best_threshold(scores, labels) == 2.0
    assert balanced_accuracy(scores, labels, 2.0) == balanced_accuracy(scores, labels, 6.0)
    # adjacent floats: the threshold still separates them
    a = 1.0
    b = float(np.nextafter(a, 2.0))
    t = best_threshold(np.array([a, b]), np.array([False, True]))
    assert a < t <= b


# -------------------------------------------------------------------- threshold transfer


def test_threshold_transfer_halves_and_values() -> None:
    scores, labels, groups = grouped()
    result = threshold_transfer(scores, labels, groups, seed=3)
    a, b = set(result.groups_a), set(result.groups_b)
    assert a.isdisjoint(b)
    assert a | b == set(groups.tolist())
    assert len(a) == 4 and len(b) == 3  # ceil(7 / 2) in half A
    in_a, in_b = np.isin(groups, list(a)), np.isin(groups, list(b))
    assert result.threshold_a == best_threshold(scores[in_a], labels[in_a])
    assert result.threshold_b == best_threshold(scores[in_b], labels[in_b])
    s_a, y_a = scores[in_a].tolist(), labels[in_a].tolist()
    s_b, y_b = scores[in_b].tolist(), labels[in_b].tolist()
    a_to_b = float(loop_balanced_accuracy(s_b, y_b, result.threshold_a))
    b_to_a = float(loop_balanced_accuracy(s_a, y_a, result.threshold_b))
    assert result.balanced_accuracy_a_to_b == pytest.approx(a_to_b)
    assert result.balanced_accuracy_b_to_a == pytest.approx(b_to_a)
    assert result.mean_balanced_accuracy == pytest.approx((a_to_b + b_to_a) / 2)
    assert json.loads(json.dumps(result.to_dict()))["groups_a"] == result.groups_a


def test_threshold_transfer_is_seeded() -> None:
    scores, labels, groups = grouped()
    first = threshold_transfer(scores, labels, groups, seed=5)
    assert threshold_transfer(scores, labels, groups, seed=5) == first
    splits = {tuple(threshold_transfer(scores, labels, groups, seed=s).groups_a) for s in range(8)}
    assert len(splits) > 1  # the seed chooses the split


def test_threshold_transfer_errors() -> None:
    scores, labels, groups = grouped()
    with pytest.raises(ValueError, match="at least 2 groups, got 1"):
        threshold_transfer(scores, labels, ["one"] * scores.size)
    with pytest.raises(ValueError, match="groups has 3 entries but scores has 42"):
        threshold_transfer(scores, labels, groups[:3])
    # one group positive only, the other negative only: each half has a single class
    with pytest.raises(ValueError, match=r"half A \(1 groups\) needs both classes"):
        threshold_transfer(np.arange(4.0), np.array([1, 1, 0, 0]), ["p", "p", "n", "n"])


# ------------------------------------------------------ balanced accuracy of predictions


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=2, max_size=30))
def test_balanced_accuracy_of_predictions_is_sklearns(pairs: list[tuple[bool, bool]]) -> None:
    predicted = np.array([p for p, _ in pairs])
    labels = np.array([True, False, *[y for _, y in pairs[2:]]])
    got = balanced_accuracy_of_predictions(predicted, labels)
    assert got == balanced_accuracy_score(labels, predicted)  # exactly, not approximately
    tp = sum(p and y for p, y in zip(predicted, labels, strict=True))
    tn = sum(not p and not y for p, y in zip(predicted, labels, strict=True))
    expected = (Fraction(int(tp), int(labels.sum())) + Fraction(int(tn), int((~labels).sum()))) / 2
    assert got == pytest.approx(float(expected), abs=1e-15)


def test_balanced_accuracy_of_predictions_by_hand_and_errors() -> None:
    labels = np.array([True, True, False, False])
    assert balanced_accuracy_of_predictions(labels, labels) == 1.0
    assert balanced_accuracy_of_predictions(~labels, labels) == 0.0
    assert balanced_accuracy_of_predictions(np.ones(4, dtype=bool), labels) == 0.5
    assert balanced_accuracy_of_predictions([1, 0, 0, 0], [1, 1, 0, 0]) == 0.75
    with pytest.raises(ValueError, match="balanced accuracy needs both classes"):
        balanced_accuracy_of_predictions([True, False], [True, True])
    with pytest.raises(ValueError, match="one-dimensional of one length"):
        balanced_accuracy_of_predictions([True, False, True], [True, False])
    with pytest.raises(ValueError, match="predicted must be booleans"):
        balanced_accuracy_of_predictions([0.2, 0.8], [True, False])


def test_the_false_alarm_threshold_by_hand() -> None:
    # ten faithful at 20 %: two may lie above; five: one; two (too few for one at 20 %): one
    ten = [0.05 * k for k in range(1, 11)]
    assert false_alarm_threshold([ten], 0.2) == pytest.approx(0.4)
    assert false_alarm_threshold([ten[:5]], 0.2) == pytest.approx(0.2)
    assert false_alarm_threshold([ten[:5], [0.7, 0.9]], 0.2) == pytest.approx(0.7)
    # at 5 %, eight faithful responses may have one above, not none: the 2nd highest sets it
    eight = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    assert false_alarm_threshold([eight], 0.05) == pytest.approx(0.7)
    assert false_alarm_threshold([eight * 3], 0.05) == pytest.approx(0.8)  # 24: one allowed
    assert false_alarm_threshold([[0.3, 0.3, 0.3]], 0.2) == pytest.approx(0.3)  # ties
    with pytest.raises(ValueError, match="no faithful response"):
        false_alarm_threshold([], 0.2)
    with pytest.raises(ValueError, match="without faithful responses"):
        false_alarm_threshold([[0.1], []], 0.2)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 20).map(lambda k: k / 20), min_size=1, max_size=40),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([0.05, 0.1, 0.2, 0.3]),
)
def test_the_false_alarm_threshold_is_the_smallest_score_that_holds(
    faithful: list[list[float]], rate: float
) -> None:
    """Brute force: the smallest score under which no dataset has more than
    ``max(rate · n, 1)`` of its ``n`` scores above it."""
    t = false_alarm_threshold(faithful, rate)

    def holds(v: float) -> bool:
        return all(
            sum(x > v for x in d) <= max(math.floor(rate * len(d) + 1e-9), 1) for d in faithful
        )

    assert holds(t)
    assert t == min(v for d in faithful for v in d if holds(v))
