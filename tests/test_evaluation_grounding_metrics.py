"""Detector metrics against independent oracles: pairwise AUROC by counting pairs (and
scipy's Mann–Whitney U), balanced accuracy and the best threshold by looping over every
rule in exact fractions, average precision by hand, the cluster bootstrap by recording
which examples each resample saw."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

from rcstat.evaluation.grounding_metrics import (
    DetectorReport,
    auc_pr,
    auroc,
    balanced_accuracy,
    best_threshold,
    bootstrap_interval,
    breakdown,
    evaluate,
    threshold_transfer,
    token_auroc,
)

# ------------------------------------------------------------------------------- oracles


def pairwise_auroc(scores: list[float], labels: list[bool]) -> Fraction:
    """Count (positive, negative) pairs: 1 when the positive scores higher, ½ on a tie."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(Fraction(1) if p > q else Fraction(1, 2) if p == q else 0 for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def loop_balanced_accuracy(scores: list[float], labels: list[bool], t: float) -> Fraction:
    """(TPR + TNR) / 2 of ``score >= t``, one example at a time, in exact fractions."""
    tp = sum(1 for s, y in zip(scores, labels, strict=True) if y and s >= t)
    tn = sum(1 for s, y in zip(scores, labels, strict=True) if not y and s < t)
    positives = sum(labels)
    negatives = len(labels) - positives
    return (Fraction(tp, positives) + Fraction(tn, negatives)) / 2


def brute_best(scores: list[float], labels: list[bool]) -> tuple[Fraction, float]:
    """(best balanced accuracy over every rule, smallest documented candidate reaching it).

    The maximum is taken over every distinct rule: ``score >= u`` for each unique score
    ``u`` and "flag nothing" (``inf``). The candidates are the documented ones: lowest
    score, midpoints, a value above the highest score.
    """
    unique = sorted(set(scores))
    best = max(loop_balanced_accuracy(scores, labels, t) for t in [*unique, float("inf")])
    mids = [(a + b) / 2 for a, b in itertools.pairwise(unique)]
    candidates = [unique[0], *mids, float("inf")]
    winner = min(t for t in candidates if loop_balanced_accuracy(scores, labels, t) == best)
    return best, winner


@st.composite
def scored_data(draw: st.DrawFn, max_size: int = 20) -> tuple[list[float], list[bool]]:
    """Small data sets with both classes and many ties (integers mixed with floats)."""
    n = draw(st.integers(2, max_size))
    value = st.one_of(
        st.integers(-3, 3).map(float),
        # on a grid: no two scores are adjacent floats, midpoints are the oracle's
        st.floats(-10, 10, allow_nan=False).map(lambda x: round(x, 3)),
    )
    scores = draw(st.lists(value, min_size=n, max_size=n))
    labels = [True, False, *draw(st.lists(st.booleans(), min_size=n - 2, max_size=n - 2))]
    return scores, labels


def separated(n: int = 120, seed: int = 0, shift: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Noisy but informative scores: positives shifted up by ``shift``."""
    rng = np.random.default_rng(seed)
    labels = rng.random(n) < 0.4
    labels[:2] = [True, False]
    return rng.normal(size=n) + shift * labels, labels


# --------------------------------------------------------------------------------- AUROC


@settings(max_examples=150, deadline=None)
@given(scored_data())
def test_auroc_equals_pairwise_count(data: tuple[list[float], list[bool]]) -> None:
    scores, labels = data
    expected = float(pairwise_auroc(scores, labels))
    assert auroc(np.array(scores), np.array(labels)) == pytest.approx(expected, abs=1e-12)
    # 0/1 integer labels are the same labels
    assert auroc(np.array(scores), np.array(labels, dtype=int)) == pytest.approx(expected)
    # reversing the ranking reflects the area (ties stay ½)
    assert auroc(-np.array(scores), np.array(labels)) == pytest.approx(1 - expected)


def test_auroc_is_mann_whitney_u_over_pairs() -> None:
    scores, labels = separated()
    scores = np.round(scores, 1)  # ties
    u = mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert auroc(scores, labels) == pytest.approx(u / (labels.sum() * (~labels).sum()))


def test_auroc_by_hand() -> None:
    assert auroc(np.array([0.9, 0.4, 0.4, 0.1]), np.array([1, 1, 0, 0])) == 0.875
    assert auroc(np.array([1.0, 2.0]), np.array([False, True])) == 1.0
    assert auroc(np.array([1.0, 2.0]), np.array([True, False])) == 0.0
    assert auroc(np.array([5.0, 5.0, 5.0]), np.array([True, False, True])) == 0.5


# -------------------------------------------------------------------------------- AUC-PR


@pytest.mark.parametrize(
    ("scores", "labels", "expected"),
    [
        # ranked T F T F: precision 1 at recall ½, 2/3 at recall 1
        ([0.9, 0.8, 0.7, 0.6], [True, False, True, False], 0.5 * 1 + 0.5 * 2 / 3),
        # ranked F T F T T: precisions ½, 2/4, 3/5 at recalls ⅓, ⅔, 1
        ([0.9, 0.8, 0.7, 0.6, 0.5], [False, True, False, True, True], (0.5 + 0.5 + 0.6) / 3),
        # perfect ranking
        ([0.3, 0.2, 0.1], [True, True, False], 1.0),
        # all tied: one step, precision = positive rate
        ([0.5, 0.5, 0.5, 0.5], [True, False, False, False], 0.25),
        # a tie across classes at the top: precision ½ at recall ½, then ⅔ at recall 1
        ([0.9, 0.9, 0.1, 0.5], [True, False, False, True], 0.5 * 0.5 + 0.5 * 2 / 3),
    ],
)
def test_auc_pr_by_hand(scores: list[float], labels: list[bool], expected: float) -> None:
    assert auc_pr(np.array(scores), np.array(labels)) == pytest.approx(expected)


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


def grouped(n_groups: int = 7, per_group: int = 6, seed: int = 1) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"doc{i}" for i in range(n_groups)], per_group)
    labels = np.tile([True, False], n_groups * per_group // 2)
    scores = rng.normal(size=labels.size) + labels
    return scores, labels, groups


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


# ---------------------------------------------------------------------------- bootstrap


def test_bootstrap_interval_contains_the_estimate() -> None:
    scores, labels = separated(n=150)
    point = auroc(scores, labels)
    low, high = bootstrap_interval(auroc, scores, labels, n_resamples=300)
    assert low < point < high
    assert 0.5 < low and high < 1.0
    narrow = bootstrap_interval(auroc, scores, labels, n_resamples=300, level=0.5)
    assert low < narrow[0] < narrow[1] < high


def test_bootstrap_interval_degenerate_when_every_resample_agrees() -> None:
    scores, labels = np.array([0.9, 0.8, 0.7, 0.2, 0.1]), np.array([1, 1, 1, 0, 0])
    assert bootstrap_interval(auroc, scores, labels, n_resamples=100) == (1.0, 1.0)
    assert bootstrap_interval(lambda s, y: 0.3, scores, labels, n_resamples=20) == (0.3, 0.3)


def test_bootstrap_interval_is_seeded() -> None:
    scores, labels = separated()
    first = bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=7)
    assert bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=7) == first
    assert bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=8) != first


def recorder() -> tuple[list[Counter[int]], Callable[[np.ndarray, np.ndarray], float]]:
    """A metric that records the example ids (= the scores) of every resample it sees."""
    seen: list[Counter[int]] = []

    def metric(scores: np.ndarray, labels: np.ndarray) -> float:
        seen.append(Counter(scores.astype(int).tolist()))
        return float(labels.mean())

    return seen, metric


def test_cluster_bootstrap_keeps_groups_together() -> None:
    sizes = [1, 2, 3, 4, 5]
    groups = np.repeat(["e", "a", "d", "b", "c"], sizes)
    ids = np.arange(groups.size, dtype=float)  # the score of each example is its index
    labels = np.arange(groups.size) % 2 == 0
    labels[0] = False  # the one-example group "e" stays negative; others may be mixed
    seen, metric = recorder()
    bootstrap_interval(metric, ids, labels, groups=groups, n_resamples=60, seed=2)
    assert len(seen) > 30
    for counts in seen:
        drawn = 0
        for name in set(groups.tolist()):
            members = np.flatnonzero(groups == name).tolist()
            times = {counts[m] for m in members}
            assert len(times) == 1, f"group {name} split in a resample: {counts}"
            drawn += times.pop()
        assert drawn == len(sizes)  # as many groups drawn as there are groups
    # without groups single examples are drawn: some resample splits a group
    seen, metric = recorder()
    bootstrap_interval(metric, ids, labels, n_resamples=20, seed=2)
    assert all(sum(c.values()) == ids.size for c in seen)
    assert any(c[13] != c[14] for c in seen)  # two members of group "c"


def test_bootstrap_skips_single_class_resamples() -> None:
    scores, labels = np.array([0.0, 1.0]), np.array([False, True])
    outcomes = []
    for seed in range(20):
        try:
            bootstrap_interval(auroc, scores, labels, n_resamples=1, seed=seed)
            outcomes.append("kept")
        except ValueError as error:
            assert "1 of 1 bootstrap resamples had a single class" in str(error)
            outcomes.append("skipped")
    # two examples: a resample is single-class with probability ½
    assert set(outcomes) == {"kept", "skipped"}
    # three examples: a third of the resamples is single-class, skipped and counted; the
    # others all separate perfectly
    scores, labels = np.array([0.0, 1.0, 2.0]), np.array([False, True, True])
    assert bootstrap_interval(auroc, scores, labels, n_resamples=60) == (1.0, 1.0)
    report = evaluate(scores, labels, n_resamples=60)
    assert 5 < report.skipped_resamples < 30
    assert report.auroc_interval == (1.0, 1.0)


# ------------------------------------------------------------------------- token AUROC


def test_token_auroc_pools_tokens() -> None:
    token_scores = [np.array([0.9, 0.1, 0.2]), np.array([0.3]), np.array([0.6, 0.8])]
    token_labels = [np.array([1, 0, 0]), np.array([0]), np.array([False, True])]
    pooled = token_auroc(token_scores, token_labels)
    expected = pairwise_auroc([0.9, 0.1, 0.2, 0.3, 0.6, 0.8], [1, 0, 0, 0, 0, 1])
    assert pooled == pytest.approx(float(expected))
    # an example of one class is fine when the pool has both
    assert token_auroc([np.array([0.2]), np.array([0.9])], [np.array([0]), np.array([1])]) == 1.0


def test_token_auroc_errors() -> None:
    with pytest.raises(ValueError, match="token_scores has 2 examples but token_labels has 1"):
        token_auroc([np.zeros(2), np.zeros(1)], [np.array([0, 1])])
    with pytest.raises(ValueError, match="example 1: 3 token scores but 2 token labels"):
        token_auroc([np.zeros(2), np.zeros(3)], [np.array([0, 1]), np.array([0, 1])])
    with pytest.raises(ValueError, match=r"token_scores\[1\] has 1 non-finite .* index 2"):
        token_auroc([np.zeros(2), np.array([0.0, 1.0, np.nan])], [[0, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match=r"token_labels\[0\] must be booleans"):
        token_auroc([np.zeros(2)], [np.array([0.5, 1.0])])
    with pytest.raises(ValueError, match="AUROC needs both classes: all 3 labels are False"):
        token_auroc([np.zeros(2), np.zeros(1)], [np.array([0, 0]), np.array([0])])


# ------------------------------------------------------------------------ breakdown


def test_breakdown() -> None:
    scores = np.array([0.9, 0.1, 0.8, 0.5, 0.4, 0.3, 0.7])
    labels = np.array([1, 0, 1, 0, 1, 1, 0])
    by = ["m2", "m2", "m1", "m1", "m1", "m3", "m1"]
    table = breakdown(scores, labels, by)
    assert table["group"].tolist() == ["m1", "m2", "m3"]
    assert table["n"].tolist() == [4, 2, 1]
    assert table["positives"].tolist() == [2, 1, 1]
    m1 = np.array(by) == "m1"
    assert table["auroc"][0] == pytest.approx(float(pairwise_auroc(scores[m1], labels[m1])))
    assert table["auroc"][1] == 1.0
    assert np.isnan(table["auroc"][2])
    assert table["note"].tolist() == ["", "", "AUROC needs both classes: all 1 labels are True"]
    with pytest.raises(ValueError, match="groups has 2 entries but scores has 7"):
        breakdown(scores, labels, by[:2])


# -------------------------------------------------------------------------- evaluate


def test_evaluate_without_groups() -> None:
    scores, labels = separated()
    report = evaluate(scores, labels, n_resamples=150, seed=4)
    assert isinstance(report, DetectorReport)
    assert report.n == scores.size and report.positives == int(labels.sum())
    assert report.auroc == auroc(scores, labels)
    assert report.auc_pr == auc_pr(scores, labels)
    assert report.auroc_interval[0] < report.auroc < report.auroc_interval[1]
    assert report.auc_pr_interval[0] < report.auc_pr < report.auc_pr_interval[1]
    assert report.transfer_balanced_accuracy is None
    assert report.skipped_resamples == 0
    # the same resamples as bootstrap_interval with the same seed
    expected = bootstrap_interval(auroc, scores, labels, n_resamples=150, seed=4)
    assert report.auroc_interval == expected
    as_dict = json.loads(json.dumps(report.to_dict()))
    assert as_dict["auroc_interval"] == list(report.auroc_interval)
    assert as_dict["transfer_balanced_accuracy"] is None


def test_evaluate_with_groups_uses_the_cluster_bootstrap_and_transfer() -> None:
    scores, labels, groups = grouped(n_groups=10, per_group=4)
    report = evaluate(scores, labels, groups=groups, n_resamples=100, seed=2)
    transfer = threshold_transfer(scores, labels, groups, seed=2)
    assert report.transfer_balanced_accuracy == transfer.mean_balanced_accuracy
    expected = bootstrap_interval(auc_pr, scores, labels, groups=groups, n_resamples=100, seed=2)
    assert report.auc_pr_interval == expected
    assert (
        report.auc_pr_interval != evaluate(scores, labels, n_resamples=100, seed=2).auc_pr_interval
    )


# ------------------------------------------------------------------- input validation

SCORED: list[Callable[[np.ndarray, np.ndarray], Any]] = [
    auroc,
    auc_pr,
    best_threshold,
    lambda s, y: balanced_accuracy(s, y, 0.5),
    lambda s, y: bootstrap_interval(auroc, s, y, n_resamples=5),
    lambda s, y: evaluate(s, y, n_resamples=5),
    lambda s, y: threshold_transfer(s, y, np.arange(len(s))),
]
NAMES = [
    "auroc",
    "auc_pr",
    "best_threshold",
    "balanced_accuracy",
    "bootstrap",
    "evaluate",
    "transfer",
]


@pytest.mark.parametrize("function", SCORED, ids=NAMES)
@pytest.mark.parametrize(
    ("scores", "labels", "match"),
    [
        ([0.1, 0.2, 0.3], [True, False], "scores has 3 entries but labels has 2"),
        ([], [], "scores and labels are empty"),
        (
            [0.1, np.nan, 0.3, np.inf],
            [True, False, True, False],
            r"scores has 2 non-finite values \(NaN or inf\), the first at index 1",
        ),
        ([0.1, 0.2], [1.0, 0.0], "labels must be booleans .* got dtype float64"),
        ([0.1, 0.2, 0.3], [0, 1, 2], "got 1 other values, the first 2 at index 2"),
        ([[0.1, 0.2]], [[True, False]], "scores must be one-dimensional"),
        ([0.1, 0.2, 0.3], [True, True, True], "needs both classes: all 3 labels are True"),
        ([0.1, 0.2], [0, 0], "needs both classes: all 2 labels are False"),
    ],
)
def test_bad_input(function: Callable[..., Any], scores: Any, labels: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        function(np.array(scores, dtype=float), np.array(labels))


def test_the_one_class_message_of_auroc() -> None:
    with pytest.raises(ValueError, match=r"^AUROC needs both classes: all 4 labels are True$"):
        auroc(np.arange(4.0), np.ones(4, dtype=bool))


def test_breakdown_validates_but_allows_one_class() -> None:
    table = breakdown(np.array([0.1, 0.2]), np.array([True, True]), ["a", "b"])
    assert table["auroc"].isna().all()
    with pytest.raises(ValueError, match="non-finite"):
        breakdown(np.array([np.nan, 0.2]), np.array([True, False]), ["a", "b"])


@pytest.mark.parametrize("threshold", [np.nan, np.inf, -np.inf])
def test_threshold_must_be_finite(threshold: float) -> None:
    with pytest.raises(ValueError, match="threshold must be finite"):
        balanced_accuracy(np.array([0.1, 0.2]), np.array([0, 1]), threshold)


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5, -0.1])
def test_level_must_be_in_the_open_unit_interval(level: float) -> None:
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        bootstrap_interval(auroc, np.array([0.1, 0.2]), np.array([0, 1]), level=level)


@pytest.mark.parametrize("n_resamples", [0, -3])
def test_n_resamples_must_be_positive(n_resamples: int) -> None:
    with pytest.raises(ValueError, match=f"n_resamples must be at least 1, got {n_resamples}"):
        bootstrap_interval(auroc, np.array([0.1, 0.2]), np.array([0, 1]), n_resamples=n_resamples)
    with pytest.raises(ValueError, match="n_resamples must be at least 1"):
        evaluate(np.array([0.1, 0.2]), np.array([0, 1]), n_resamples=n_resamples)
