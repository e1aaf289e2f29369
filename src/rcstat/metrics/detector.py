"""One detector on one data set: per-group AUROC and a report with bootstrap intervals.

Convention: ``labels`` are booleans, ``True`` = hallucinated / unsupported (the positive
class); ``scores`` are floats where HIGHER means MORE LIKELY HALLUCINATED (negate a
grounding score before calling).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from rcstat.metrics.bootstrap import bootstrap_values, percentile_interval
from rcstat.metrics.inputs import as_groups, one_class, validate
from rcstat.metrics.ranking import auc_pr, auroc
from rcstat.metrics.thresholds import threshold_transfer

__all__ = ["DetectorReport", "breakdown", "evaluate"]


def breakdown(scores: Any, labels: Any, by: Sequence[str]) -> pd.DataFrame:
    """Per-group size, positives and AUROC (e.g. per summarizer model or source dataset).

    Parameters
    ----------
    scores, labels
        As in :func:`~rcstat.metrics.ranking.auroc`; a single class overall is allowed.
    by
        ``[n]`` group name of every example.

    Returns
    -------
    pandas.DataFrame
        One row per group, sorted by name: ``group``, ``n``, ``positives``, ``auroc`` (NaN
        where the group has a single class) and ``note`` (why AUROC is NaN, else ``""``).

    Examples
    --------
    >>> table = breakdown([0.9, 0.1, 0.5], [1, 0, 1], by=["m1", "m1", "m2"])
    >>> table[["group", "n", "positives", "auroc"]]
      group  n  positives  auroc
    0    m1  2          1    1.0
    1    m2  1          1    NaN
    >>> table.note[1]
    'AUROC needs both classes: all 1 labels are True'
    """
    s, y = validate(scores, labels)
    names = as_groups(np.asarray(by, dtype=object), s.size)
    rows = []
    for name in sorted(set(names.tolist())):
        mask = names == name
        y_g = y[mask]
        note = one_class(y_g, "AUROC")
        value = float("nan") if note is not None else auroc(s[mask], y_g)
        rows.append(
            {
                "group": name,
                "n": int(mask.sum()),
                "positives": int(y_g.sum()),
                "auroc": value,
                "note": note or "",
            }
        )
    return pd.DataFrame(rows, columns=["group", "n", "positives", "auroc", "note"])


@dataclass(frozen=True)
class DetectorReport:
    """One detector on one data set: ranking metrics with bootstrap intervals."""

    n: int
    positives: int
    auroc: float
    auroc_interval: tuple[float, float]
    """95 % percentile bootstrap interval (cluster bootstrap when ``groups`` were given)."""
    auc_pr: float
    auc_pr_interval: tuple[float, float]
    n_resamples: int
    skipped_resamples: int
    """Resamples with a single class, left out of both intervals."""
    transfer_balanced_accuracy: float | None = None
    """:attr:`~rcstat.metrics.thresholds.TransferResult.mean_balanced_accuracy` when
    ``groups`` were given (and ``transfer``)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable values (intervals as two-element lists)."""
        out = asdict(self)
        out["auroc_interval"] = list(self.auroc_interval)
        out["auc_pr_interval"] = list(self.auc_pr_interval)
        return out


def evaluate(
    scores: Any,
    labels: Any,
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    transfer: bool = True,
) -> DetectorReport:
    """AUROC and AUC-PR with 95 % bootstrap intervals, and threshold transfer over groups.

    Parameters
    ----------
    scores, labels
        As in :func:`~rcstat.metrics.ranking.auroc`.
    groups
        ``[n]`` group of every example: the intervals then come from the cluster bootstrap,
        and :func:`~rcstat.metrics.thresholds.threshold_transfer` (same ``seed``) is
        reported.
    n_resamples, seed
        As in :func:`~rcstat.metrics.bootstrap.bootstrap_interval`; both intervals use the
        same resamples.
    transfer
        With ``groups``: whether to report the threshold transfer (``False`` where a caller
        runs it apart, so that its failure on few groups leaves the intervals).

    Returns
    -------
    DetectorReport

    Examples
    --------
    >>> report = evaluate([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0], n_resamples=20)
    >>> report.auroc, report.auroc_interval, report.transfer_balanced_accuracy
    (1.0, (1.0, 1.0), None)
    """
    s, y = validate(scores, labels, needs="AUROC")
    values, skipped = bootstrap_values([auroc, auc_pr], s, y, groups, n_resamples, seed)
    transferred = None
    if groups is not None and transfer:
        transferred = threshold_transfer(s, y, groups, seed=seed).mean_balanced_accuracy
    return DetectorReport(
        n=int(s.size),
        positives=int(y.sum()),
        auroc=auroc(s, y),
        auroc_interval=percentile_interval(values[:, 0], 0.95),
        auc_pr=auc_pr(s, y),
        auc_pr_interval=percentile_interval(values[:, 1], 0.95),
        n_resamples=n_resamples,
        skipped_resamples=skipped,
        transfer_balanced_accuracy=transferred,
    )
