"""rcstat.evaluation.grounding_summary's metrics table on hand-made score frames: each metric
is given where it can be computed, and a note names each one a small run could not give."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rcstat.evaluation.grounding_summary import metrics_table
from rcstat.metrics.ranking import auc_pr, auroc

# hallucination scores (the table negates the method's score), labels True = unsupported
SCORES = np.array([0.9, 0.8, 0.2, 0.1, 0.7, 0.3])
LABELS = np.array([True, True, False, False, True, False])


def _frame(groups: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"rcstat": -SCORES, "label": LABELS, "group": groups})


def test_one_group_gives_the_point_values_and_says_why_there_is_no_interval() -> None:
    row = metrics_table(_frame(["g"] * 6), ["rcstat"], n_resamples=50, seed=0).iloc[0]
    assert row["auroc"] == auroc(SCORES, LABELS)
    assert row["auc_pr"] == auc_pr(SCORES, LABELS)  # no interval needed for the value itself
    assert np.isnan([row["auroc_lo"], row["auroc_hi"], row["auc_pr_lo"], row["auc_pr_hi"]]).all()
    notes = row["note"].split("; ")
    assert notes[0] == "intervals: a bootstrap over groups needs at least 2 groups, got 1"
    assert notes[1] == "threshold transfer needs at least 2 groups, got 1"


def test_a_failed_threshold_transfer_leaves_the_intervals() -> None:
    """Three groups, two of one class: with seed 0 the transfer's half B is a group of one
    class, but the cluster bootstrap still gives both intervals."""
    row = metrics_table(_frame(["a", "a", "b", "b", "c", "c"]), ["rcstat"], n_resamples=50, seed=0)
    row = row.iloc[0]
    assert row["auroc_lo"] <= row["auroc"] <= row["auroc_hi"]
    assert row["auc_pr_lo"] <= row["auc_pr"] <= row["auc_pr_hi"]
    assert np.isnan(row["balanced_accuracy_transfer"])
    assert row["note"].startswith("threshold transfer: half B (1 groups) needs both classes")
