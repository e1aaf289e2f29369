"""Metrics of detectors and paired comparisons, below every application that scores one.

Convention: ``labels`` are booleans, ``True`` = hallucinated / unsupported (the positive
class); ``scores`` are floats where HIGHER means MORE LIKELY HALLUCINATED (negate a grounding
score before calling). Everything takes numpy arrays and returns plain floats or dataclasses.

- :mod:`~rcstat.metrics.ranking` — AUROC (ties count ½; one score or every column of a
  matrix at once) and AUC-PR (average precision).
- :mod:`~rcstat.metrics.thresholds` — balanced accuracy, the best threshold (one tie rule:
  the smallest maximiser, compared exactly) and threshold transfer between halves of groups.
- :mod:`~rcstat.metrics.bootstrap` — percentile bootstrap intervals, whole groups resampled.
- :mod:`~rcstat.metrics.detector` — per-group AUROC and one detector's report.
- :mod:`~rcstat.metrics.paired` — the difference of two methods on the same examples.

Only numpy, scipy, pandas and scikit-learn are imported (scikit-learn when a ranking metric is
first computed); grounding and evaluation both build on this package.
"""

from rcstat.metrics.bootstrap import bootstrap_interval
from rcstat.metrics.detector import DetectorReport, breakdown, evaluate
from rcstat.metrics.paired import PairedDifference, paired_difference
from rcstat.metrics.ranking import auc_pr, auroc, auroc_columns, token_auroc
from rcstat.metrics.thresholds import (
    TransferResult,
    balanced_accuracy,
    balanced_accuracy_of_predictions,
    best_threshold,
    false_alarm_threshold,
    threshold_transfer,
)

__all__ = [
    "DetectorReport",
    "PairedDifference",
    "TransferResult",
    "auc_pr",
    "auroc",
    "auroc_columns",
    "balanced_accuracy",
    "balanced_accuracy_of_predictions",
    "best_threshold",
    "bootstrap_interval",
    "breakdown",
    "evaluate",
    "false_alarm_threshold",
    "paired_difference",
    "threshold_transfer",
    "token_auroc",
]
