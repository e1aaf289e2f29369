"""rcstat.metrics.detector (per-group AUROC, one detector's report) and the input checks that
every detector metric shares."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from rcstat.metrics.bootstrap import bootstrap_interval
from rcstat.metrics.detector import DetectorReport, breakdown, evaluate
from rcstat.metrics.ranking import auc_pr, auroc
from rcstat.metrics.thresholds import balanced_accuracy, best_threshold, threshold_transfer
from tests._metrics_oracles import grouped, pairwise_auroc, separated

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


def test_evaluate_without_the_transfer_keeps_the_intervals() -> None:
    """``transfer=False``: the same resamples and intervals, no transfer; and where the
    transfer cannot run (a half of the groups holds one class), the intervals still can."""
    scores, labels, groups = grouped(n_groups=10, per_group=4)
    full = evaluate(scores, labels, groups=groups, n_resamples=100, seed=2)
    alone = evaluate(scores, labels, groups=groups, n_resamples=100, seed=2, transfer=False)
    assert alone.transfer_balanced_accuracy is None
    assert (alone.auroc_interval, alone.auc_pr_interval, alone.skipped_resamples) == (
        full.auroc_interval,
        full.auc_pr_interval,
        full.skipped_resamples,
    )
    # three groups, two of one class: with seed 0 half B is group b alone, all False
    scores3 = np.array([0.9, 0.8, 0.2, 0.1, 0.7, 0.3])
    labels3 = np.array([True, True, False, False, True, False])
    groups3 = ["a", "a", "b", "b", "c", "c"]
    with pytest.raises(ValueError, match=r"half B .* needs both classes"):
        evaluate(scores3, labels3, groups=groups3, n_resamples=50, seed=0)
    report = evaluate(scores3, labels3, groups=groups3, n_resamples=50, seed=0, transfer=False)
    low, high = report.auroc_interval
    assert low <= report.auroc <= high


def test_a_bootstrap_over_one_group_is_refused() -> None:
    """One group: every resample is the data itself, an interval of width 0; refused."""
    scores, labels = np.array([0.9, 0.2, 0.8, 0.1]), np.array([True, False, True, False])
    with pytest.raises(ValueError, match="needs at least 2 groups, got 1"):
        bootstrap_interval(auroc, scores, labels, groups=["g"] * 4, n_resamples=10)
    with pytest.raises(ValueError, match="needs at least 2 groups, got 1"):
        evaluate(scores, labels, groups=["g"] * 4, n_resamples=10, transfer=False)
    assert bootstrap_interval(auroc, scores, labels, groups=["g", "g", "h", "h"], n_resamples=10)


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
