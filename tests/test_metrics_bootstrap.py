"""rcstat.metrics.bootstrap: percentile intervals, seeds, and the cluster bootstrap checked by
recording which examples each resample saw."""

from __future__ import annotations

import numpy as np
import pytest

from rcstat.metrics.bootstrap import Metric, bootstrap_interval
from rcstat.metrics.detector import evaluate
from rcstat.metrics.ranking import auc_pr, auroc
from tests._metrics_oracles import recorder, separated


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


def _counting() -> tuple[list[float], Metric]:
    """A metric whose value on the k-th resample it sees is k (0, 1, 2, …)."""
    values: list[float] = []

    def metric(scores: np.ndarray, labels: np.ndarray) -> float:
        values.append(float(len(values)))
        return values[-1]

    return values, metric


@pytest.mark.parametrize(
    ("level", "interval"),
    [
        # the values 0 … 99: the p quantile (linear) lies at 99 · p
        (0.95, (2.475, 96.525)),  # 99 · 0.025, 99 · 0.975
        (0.9, (4.95, 94.05)),
        (0.5, (24.75, 74.25)),
    ],
)
def test_bootstrap_interval_is_at_the_percentiles_of_its_level(
    level: float, interval: tuple[float, float]
) -> None:
    """Known by hand: a metric worth 0, 1, …, 99 on the 100 resamples (none single-class)."""
    labels = np.arange(40) % 2 == 0
    scores = np.linspace(0.0, 1.0, 40)
    values, metric = _counting()
    got = bootstrap_interval(metric, scores, labels, n_resamples=100, level=level)
    assert values == [float(k) for k in range(100)]
    assert got == pytest.approx(interval, rel=1e-12)


def test_bootstrap_interval_is_the_numpy_percentiles_of_the_resampled_metric() -> None:
    """The interval of a real statistic: ``numpy.percentile`` of the values the metric took on
    the resamples (recorded as it returned them), at ``50 ∓ 50 · level``."""
    scores, labels = separated(n=60)
    returned: list[float] = []

    def recording_auroc(s: np.ndarray, y: np.ndarray) -> float:
        returned.append(auroc(s, y))
        return returned[-1]

    for level in (0.95, 0.8):
        returned.clear()
        low, high = bootstrap_interval(
            recording_auroc, scores, labels, n_resamples=400, seed=3, level=level
        )
        assert len(returned) == 400 and len(set(returned)) > 50
        want = np.percentile(returned, [50 - 50 * level, 50 + 50 * level])
        assert (low, high) == pytest.approx(tuple(want), rel=1e-12)
        assert low < np.median(returned) < high


def test_bootstrap_interval_is_seeded() -> None:
    scores, labels = separated()
    first = bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=7)
    assert bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=7) == first
    assert bootstrap_interval(auc_pr, scores, labels, n_resamples=100, seed=8) != first


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
