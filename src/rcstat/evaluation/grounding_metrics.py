"""Scores of hallucination detectors: ranking metrics, thresholds, bootstrap intervals.

Convention: ``labels`` are booleans, ``True`` = hallucinated / unsupported (the positive
class); ``scores`` are floats where HIGHER means MORE LIKELY HALLUCINATED (negate a
grounding score before calling). Everything takes numpy arrays and returns plain floats or
dataclasses; the ranking metrics are scikit-learn's.

- **AUROC** = P(score of a random positive > score of a random negative)
  + ½ P(the two scores tie) — the Mann–Whitney statistic divided by ``P · N``.
- **AUC-PR** is average precision, ``AP = Σ_k (R_k - R_{k-1}) P_k`` over the distinct
  score thresholds in decreasing order (precision ``P_k`` and recall ``R_k`` when every
  score ``>=`` the k-th threshold is flagged); a step sum, not the trapezoid.
- **Balanced accuracy** of the rule ``score >= t -> hallucinated`` is ``(TPR + TNR) / 2``;
  it is 0.5 for a constant rule whatever the class balance.
- **Threshold transfer**: the threshold that maximises balanced accuracy on one half of the
  groups (documents, source datasets) is applied to the other half, and vice versa — how
  well a threshold fixed on one part carries over to another.
- **Cluster bootstrap**: with ``groups``, a resample draws whole groups with replacement
  (a group drawn twice contributes all its examples twice), so that examples of one group,
  which are not independent, stay together. Intervals are percentile intervals; resamples
  with a single class (where AUROC and balanced accuracy are undefined) are skipped and
  counted.

All validation lives in one helper that raises ``ValueError``s naming the argument.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, balanced_accuracy_score, roc_auc_score

Metric = Callable[[np.ndarray, np.ndarray], float]


# ------------------------------------------------------------------------------ validation


def _as_labels(labels: Any, name: str = "labels") -> np.ndarray:
    """Boolean copy of ``labels`` (bool or 0/1 integers), else a ``ValueError``."""
    array = np.asarray(labels)
    if array.dtype == np.bool_:
        return array.astype(bool, copy=True)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{name} must be booleans (True = hallucinated) or 0/1 integers, "
            f"got dtype {array.dtype}"
        )
    bad = (array != 0) & (array != 1)
    if bool(bad.any()):
        first = int(np.flatnonzero(bad.ravel())[0])
        value = array.ravel()[first].item()
        raise ValueError(
            f"{name} must be booleans (True = hallucinated) or 0/1 integers, "
            f"got {int(bad.sum())} other values, the first {value!r} at index {first}"
        )
    return array.astype(bool)


def _check_finite(scores: np.ndarray, name: str = "scores") -> None:
    bad = ~np.isfinite(scores)
    if bool(bad.any()):
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite values (NaN or inf), the first at index "
            f"{first}"
        )


def _one_class(labels: np.ndarray, what: str) -> str | None:
    """Why ``what`` is undefined when ``labels`` hold a single class, else ``None``."""
    positives = int(labels.sum())
    if positives not in (0, labels.size):
        return None
    value = "True" if positives else "False"
    return f"{what} needs both classes: all {labels.size} labels are {value}"


def _both_classes(labels: np.ndarray, what: str) -> None:
    message = _one_class(labels, what)
    if message is not None:
        raise ValueError(message)


def _validate(
    scores: Any, labels: Any, *, needs: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores as float64, labels as bool)``, both 1-D and of one length.

    ``needs`` names the quantity that needs both classes (``"AUROC"``); ``None`` skips that
    check.
    """
    s = np.asarray(scores, dtype=np.float64)
    raw = np.asarray(labels)
    if s.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {s.shape}")
    if raw.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {raw.shape}")
    if s.size != raw.size:
        raise ValueError(f"scores has {s.size} entries but labels has {raw.size}")
    if s.size == 0:
        raise ValueError("scores and labels are empty")
    y = _as_labels(raw)
    _check_finite(s)
    if needs is not None:
        _both_classes(y, needs)
    return s, y


def _as_groups(groups: Any, n: int) -> np.ndarray:
    g = np.asarray(groups)
    if g.ndim != 1:
        raise ValueError(f"groups must be one-dimensional, got shape {g.shape}")
    if g.size != n:
        raise ValueError(f"groups has {g.size} entries but scores has {n}")
    return g


# ------------------------------------------------------------------------ ranking metrics


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``).

    Parameters
    ----------
    scores
        ``[n]`` detector scores, higher = more likely hallucinated.
    labels
        ``[n]`` booleans (or 0/1), ``True`` = hallucinated; both classes must be present.

    Returns
    -------
    float
        In ``[0, 1]``; 0.5 is chance.

    Notes
    -----
    ``AUROC = (1 / PN) Σ_{i: y_i} Σ_{j: ¬y_j} ([s_i > s_j] + ½ [s_i = s_j])``.

    Examples
    --------
    >>> auroc([0.9, 0.4, 0.4, 0.1], [True, True, False, False])
    0.875
    """
    s, y = _validate(scores, labels, needs="AUROC")
    return float(roc_auc_score(y, s))


def auc_pr(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision (``average_precision_score``).

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`.

    Returns
    -------
    float
        In ``[0, 1]``; the positive rate is chance.

    Notes
    -----
    ``AP = Σ_k (R_k - R_{k-1}) P_k`` over the distinct scores in decreasing order, with
    ``R_0 = 0``; tied scores form one step.

    Examples
    --------
    >>> round(auc_pr([0.9, 0.8, 0.7, 0.6], [True, False, True, False]), 4)
    0.8333
    """
    s, y = _validate(scores, labels, needs="AUC-PR")
    return float(average_precision_score(y, s))


def token_auroc(token_scores: Sequence[np.ndarray], token_labels: Sequence[np.ndarray]) -> float:
    """AUROC pooled over all tokens of all examples (span-level evaluation).

    Parameters
    ----------
    token_scores
        One ``[tokens_i]`` array of scores per example.
    token_labels
        One ``[tokens_i]`` boolean array per example, ``True`` for a token inside an
        annotated (hallucinated) span.

    Returns
    -------
    float
        :func:`auroc` of the concatenated tokens: every token counts once, so long examples
        weigh more.

    Examples
    --------
    >>> token_auroc([[0.9, 0.1], [0.8, 0.2, 0.3]], [[True, False], [True, False, False]])
    1.0
    """
    if len(token_scores) != len(token_labels):
        raise ValueError(
            f"token_scores has {len(token_scores)} examples but token_labels has "
            f"{len(token_labels)}"
        )
    if len(token_scores) == 0:
        raise ValueError("token_scores and token_labels are empty")
    pooled_scores: list[np.ndarray] = []
    pooled_labels: list[np.ndarray] = []
    for i, (s_i, y_i) in enumerate(zip(token_scores, token_labels, strict=True)):
        s = np.asarray(s_i, dtype=np.float64)
        y = _as_labels(y_i, name=f"token_labels[{i}]")
        if s.ndim != 1 or y.ndim != 1:
            raise ValueError(
                f"example {i}: token scores and labels must be one-dimensional, got shapes "
                f"{s.shape} and {y.shape}"
            )
        if s.size != y.size:
            raise ValueError(f"example {i}: {s.size} token scores but {y.size} token labels")
        _check_finite(s, name=f"token_scores[{i}]")
        pooled_scores.append(s)
        pooled_labels.append(y)
    return auroc(np.concatenate(pooled_scores), np.concatenate(pooled_labels))


# ----------------------------------------------------------------------------- thresholds


def balanced_accuracy(scores: np.ndarray, labels: np.ndarray, threshold: float) -> float:
    """Balanced accuracy of the rule ``score >= threshold -> hallucinated``.

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`.
    threshold
        A finite number.

    Returns
    -------
    float
        ``(TPR + TNR) / 2`` (``sklearn.metrics.balanced_accuracy_score``).

    Examples
    --------
    >>> balanced_accuracy([0.9, 0.4, 0.4, 0.1], [True, True, False, False], 0.5)
    0.75
    """
    s, y = _validate(scores, labels, needs="balanced accuracy")
    if not np.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    return float(balanced_accuracy_score(y, s >= threshold))


def _candidate_thresholds(unique: np.ndarray) -> np.ndarray:
    """``[K + 1]`` thresholds for ``K`` sorted unique scores: the lowest score (everything
    flagged), the midpoints (the k-th flags ``unique[k + 1]`` and above) and the next float
    above the highest score (nothing flagged)."""
    low, high = unique[:-1], unique[1:]
    mid = low / 2 + high / 2  # no overflow near the float limits
    mid = np.where((mid > low) & (mid <= high), mid, high)  # adjacent floats: use high
    top = np.nextafter(unique[-1], np.inf)
    return np.concatenate([unique[:1], mid, [top]])


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    """The threshold ``t`` maximising the balanced accuracy of ``score >= t`` on these data.

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`.

    Returns
    -------
    float
        The smallest maximiser among the candidates: the lowest score, the midpoints between
        consecutive sorted unique scores, and the next float above the highest score.

    Notes
    -----
    Every rule ``score >= t`` equals one of the ``K + 1`` candidate rules (``K`` unique
    scores). Balanced accuracy is compared exactly, in integers, as ``TP · N + TN · P``
    (``P`` positives, ``N`` negatives), so ties are broken deterministically. The two end
    candidates both score 0.5, so the upper end is never returned.

    Examples
    --------
    >>> best_threshold([0.9, 0.7, 0.3, 0.1], [True, True, False, False])
    0.5
    """
    s, y = _validate(scores, labels, needs="balanced accuracy")
    unique = np.unique(s)
    thresholds = _candidate_thresholds(unique)
    pos, neg = np.sort(s[y]), np.sort(s[~y])
    n_pos, n_neg = pos.size, neg.size
    # flagged: score >= t; counts from the sorted classes
    tp = n_pos - np.searchsorted(pos, thresholds, side="left")
    tn = np.searchsorted(neg, thresholds, side="left")
    # (TP/P + TN/N) / 2 ∝ TP·N + TN·P, exactly; np.argmax returns the first (smallest t)
    merit = tp.astype(np.int64) * n_neg + tn.astype(np.int64) * n_pos
    return float(thresholds[int(np.argmax(merit))])


@dataclass(frozen=True)
class TransferResult:
    """A threshold fitted on one half of the groups and applied to the other, both ways."""

    threshold_a: float
    """:func:`best_threshold` on half A."""
    threshold_b: float
    """:func:`best_threshold` on half B."""
    balanced_accuracy_a_to_b: float
    """``threshold_a`` applied to half B."""
    balanced_accuracy_b_to_a: float
    """``threshold_b`` applied to half A."""
    mean_balanced_accuracy: float
    """Mean of the two transferred balanced accuracies."""
    groups_a: list[Any]
    groups_b: list[Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def threshold_transfer(
    scores: np.ndarray, labels: np.ndarray, groups: Sequence[Hashable], *, seed: int = 0
) -> TransferResult:
    """Balanced accuracy of a threshold fixed on one half of the groups, on the other half.

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`.
    groups
        ``[n]`` group of every example (document, source dataset, summarizer model); at
        least two distinct groups, sortable.
    seed
        Seed of ``numpy.random.default_rng``, whose permutation of the sorted unique groups
        splits them: half A takes the first ``ceil(G / 2)``, half B the rest.

    Returns
    -------
    TransferResult
        Both thresholds, both transferred balanced accuracies, their mean and the groups of
        each half (each in sorted order).

    Examples
    --------
    >>> r = threshold_transfer([0.9, 0.2, 0.8, 0.1], [1, 0, 1, 0], ["x", "x", "y", "y"])
    >>> r.mean_balanced_accuracy
    1.0
    """
    s, y = _validate(scores, labels, needs="threshold transfer")
    g = _as_groups(groups, s.size)
    unique = np.unique(g)
    if unique.size < 2:
        raise ValueError(f"threshold transfer needs at least 2 groups, got {unique.size}")
    order = np.random.default_rng(seed).permutation(unique.size)
    cut = (unique.size + 1) // 2
    halves = (np.sort(unique[order[:cut]]), np.sort(unique[order[cut:]]))
    masks = [np.isin(g, half) for half in halves]
    for name, half, mask in zip("AB", halves, masks, strict=True):
        _both_classes(y[mask], f"threshold transfer: half {name} ({half.size} groups)")
    t_a = best_threshold(s[masks[0]], y[masks[0]])
    t_b = best_threshold(s[masks[1]], y[masks[1]])
    a_to_b = balanced_accuracy(s[masks[1]], y[masks[1]], t_a)
    b_to_a = balanced_accuracy(s[masks[0]], y[masks[0]], t_b)
    return TransferResult(
        threshold_a=t_a,
        threshold_b=t_b,
        balanced_accuracy_a_to_b=a_to_b,
        balanced_accuracy_b_to_a=b_to_a,
        mean_balanced_accuracy=(a_to_b + b_to_a) / 2,
        groups_a=halves[0].tolist(),
        groups_b=halves[1].tolist(),
    )


# ------------------------------------------------------------------------------ bootstrap


def _bootstrap(
    metrics: Sequence[Metric],
    scores: np.ndarray,
    labels: np.ndarray,
    groups: Any,
    n_resamples: int,
    seed: int,
) -> tuple[np.ndarray, int]:
    """``([kept, metrics] values, skipped)`` over resamples of validated data, every metric
    on the same resamples."""
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer):
        raise ValueError(f"n_resamples must be an integer, got {n_resamples!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    n = scores.size
    members: list[np.ndarray] | None = None
    if groups is not None:
        _, inverse = np.unique(_as_groups(groups, n), return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.cumsum(np.bincount(inverse))[:-1]
        members = np.split(order, bounds)  # indices of each group, in group order
    values: list[list[float]] = []
    skipped = 0
    for _ in range(n_resamples):
        if members is None:
            index = rng.integers(0, n, size=n)
        else:
            drawn = rng.integers(0, len(members), size=len(members))
            index = np.concatenate([members[k] for k in drawn])
        y = labels[index]
        positives = int(y.sum())
        if positives in (0, y.size):
            skipped += 1
            continue
        values.append([float(metric(scores[index], y)) for metric in metrics])
    if skipped > n_resamples / 2:
        raise ValueError(
            f"{skipped} of {n_resamples} bootstrap resamples had a single class (more than "
            "half): too few positives, negatives or groups for a bootstrap interval"
        )
    return np.asarray(values, dtype=np.float64).reshape(-1, len(metrics)), skipped


def _percentile_interval(values: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2
    low, high = np.quantile(values, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")


def bootstrap_interval(
    metric: Metric,
    scores: np.ndarray,
    labels: np.ndarray,
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric(scores, labels)``.

    Parameters
    ----------
    metric
        ``metric(scores, labels) -> float``, e.g. :func:`auroc` or :func:`auc_pr`; called
        with float64 scores and boolean labels of each resample.
    scores, labels
        As in :func:`auroc`.
    groups
        ``[n]`` group of every example; when given, resample whole groups (cluster
        bootstrap), else single examples.
    n_resamples
        Number of resamples drawn (at least 1).
    seed
        Seed of ``numpy.random.default_rng``.
    level
        Coverage in ``(0, 1)``.

    Returns
    -------
    tuple[float, float]
        The ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the metric over the
        resamples that hold both classes.

    Notes
    -----
    A resample has as many examples (or groups) as the data, drawn with replacement.
    Resamples with a single class are skipped; if more than half are, ``ValueError``.

    Examples
    --------
    >>> bootstrap_interval(auroc, [0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0], n_resamples=50)
    (1.0, 1.0)
    """
    _check_level(level)
    s, y = _validate(scores, labels, needs="a bootstrap interval")
    values, _ = _bootstrap([metric], s, y, groups, n_resamples, seed)
    return _percentile_interval(values[:, 0], level)


# -------------------------------------------------------------------------------- reports


def breakdown(scores: np.ndarray, labels: np.ndarray, by: Sequence[str]) -> pd.DataFrame:
    """Per-group size, positives and AUROC (e.g. per summarizer model or source dataset).

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`; a single class overall is allowed.
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
    s, y = _validate(scores, labels)
    names = _as_groups(np.asarray(by, dtype=object), s.size)
    rows = []
    for name in sorted(set(names.tolist())):
        mask = names == name
        y_g = y[mask]
        note = _one_class(y_g, "AUROC")
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
    """:attr:`TransferResult.mean_balanced_accuracy` when ``groups`` were given."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable values (intervals as two-element lists)."""
        out = asdict(self)
        out["auroc_interval"] = list(self.auroc_interval)
        out["auc_pr_interval"] = list(self.auc_pr_interval)
        return out


def evaluate(
    scores: np.ndarray,
    labels: np.ndarray,
    *,
    groups: Sequence[Hashable] | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> DetectorReport:
    """AUROC and AUC-PR with 95 % bootstrap intervals, and threshold transfer over groups.

    Parameters
    ----------
    scores, labels
        As in :func:`auroc`.
    groups
        ``[n]`` group of every example: the intervals then come from the cluster bootstrap,
        and :func:`threshold_transfer` (same ``seed``) is reported.
    n_resamples, seed
        As in :func:`bootstrap_interval`; both intervals use the same resamples.

    Returns
    -------
    DetectorReport

    Examples
    --------
    >>> report = evaluate([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0], n_resamples=20)
    >>> report.auroc, report.auroc_interval, report.transfer_balanced_accuracy
    (1.0, (1.0, 1.0), None)
    """
    s, y = _validate(scores, labels, needs="AUROC")
    values, skipped = _bootstrap([auroc, auc_pr], s, y, groups, n_resamples, seed)
    transfer = None
    if groups is not None:
        transfer = threshold_transfer(s, y, groups, seed=seed).mean_balanced_accuracy
    return DetectorReport(
        n=int(s.size),
        positives=int(y.sum()),
        auroc=auroc(s, y),
        auroc_interval=_percentile_interval(values[:, 0], 0.95),
        auc_pr=auc_pr(s, y),
        auc_pr_interval=_percentile_interval(values[:, 1], 0.95),
        n_resamples=n_resamples,
        skipped_resamples=skipped,
        transfer_balanced_accuracy=transfer,
    )
