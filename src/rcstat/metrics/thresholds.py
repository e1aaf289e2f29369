"""Decision thresholds of a detector: balanced accuracy, the best threshold and its transfer.

- **Balanced accuracy** of the rule ``score >= t -> hallucinated`` is ``(TPR + TNR) / 2``;
  it is 0.5 for a constant rule whatever the class balance.
- **Best threshold** — the tie rule of rcstat: among the candidate thresholds (the lowest
  score, the midpoints between consecutive distinct scores, the next float above the highest
  score), the one of largest balanced accuracy, compared exactly in integers; of several
  maximisers, the **smallest** threshold.
- **False-alarm threshold**: the smallest score under which every dataset's faithful
  responses lie above it at most at a given rate (one allowed where a dataset is too small to
  hold one at that rate).
- **Threshold transfer**: the threshold that maximises balanced accuracy on one half of the
  groups (documents, source datasets) is applied to the other half, and vice versa — how
  well a threshold fixed on one part carries over to another.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rcstat.metrics.inputs import as_groups, as_labels, both_classes, validate

__all__ = [
    "TransferResult",
    "balanced_accuracy",
    "balanced_accuracy_of_predictions",
    "best_threshold",
    "false_alarm_threshold",
    "threshold_transfer",
]


def balanced_accuracy_of_predictions(predicted: Any, labels: Any) -> float:
    """Balanced accuracy ``(TPR + TNR) / 2`` of boolean predictions.

    Parameters
    ----------
    predicted
        ``[n]`` booleans (or 0/1), ``True`` = predicted hallucinated.
    labels
        ``[n]`` booleans (or 0/1), ``True`` = hallucinated; both classes must be present.

    Returns
    -------
    float
        ``(TP / P + TN / N) / 2``; equal to ``sklearn.metrics.balanced_accuracy_score``.

    Examples
    --------
    >>> balanced_accuracy_of_predictions([True, False, True, False], [True, True, False, False])
    0.5
    """
    p = as_labels(predicted, name="predicted")
    y = as_labels(labels)
    if p.ndim != 1 or p.shape != y.shape:
        raise ValueError(
            f"predicted and labels must be one-dimensional of one length, got shapes "
            f"{p.shape} and {y.shape}"
        )
    both_classes(y, "balanced accuracy")
    n_pos = int(y.sum())
    n_neg = int(y.size) - n_pos
    tnr = int((~p & ~y).sum()) / n_neg
    tpr = int((p & y).sum()) / n_pos
    return (tnr + tpr) / 2


def balanced_accuracy(scores: Any, labels: Any, threshold: float) -> float:
    """Balanced accuracy of the rule ``score >= threshold -> hallucinated``.

    Parameters
    ----------
    scores, labels
        As in :func:`~rcstat.metrics.ranking.auroc`.
    threshold
        A finite number.

    Returns
    -------
    float
        ``(TPR + TNR) / 2`` (:func:`balanced_accuracy_of_predictions` of ``scores >=
        threshold``).

    Examples
    --------
    >>> balanced_accuracy([0.9, 0.4, 0.4, 0.1], [True, True, False, False], 0.5)
    0.75
    """
    s, y = validate(scores, labels, needs="balanced accuracy")
    if not np.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold}")
    return balanced_accuracy_of_predictions(s >= threshold, y)


def _candidate_thresholds(unique: np.ndarray) -> np.ndarray:
    """``[K + 1]`` thresholds for ``K`` sorted unique scores: the lowest score (everything
    flagged), the midpoints (the k-th flags ``unique[k + 1]`` and above) and the next float
    above the highest score (nothing flagged)."""
    low, high = unique[:-1], unique[1:]
    mid = low / 2 + high / 2  # no overflow near the float limits
    mid = np.where((mid > low) & (mid <= high), mid, high)  # adjacent floats: use high
    top = np.nextafter(unique[-1], np.inf)
    return np.concatenate([unique[:1], mid, [top]])


def best_threshold(scores: Any, labels: Any) -> float:
    """The threshold ``t`` maximising the balanced accuracy of ``score >= t`` on these data.

    Parameters
    ----------
    scores, labels
        As in :func:`balanced_accuracy`.

    Returns
    -------
    float
        The smallest maximiser among the candidates: the lowest score, the midpoints between
        consecutive sorted unique scores, and the next float above the highest score.

    Notes
    -----
    Every rule ``score >= t`` equals one of the ``K + 1`` candidate rules (``K`` unique
    scores). Balanced accuracy is compared exactly, in integers, as ``TP · N + TN · P``
    (``P`` positives, ``N`` negatives), so ties are broken deterministically: the smallest
    maximiser wins. The two end candidates both score 0.5, so the upper end is never
    returned; with a single distinct score the result is that score.

    Examples
    --------
    >>> best_threshold([0.9, 0.7, 0.3, 0.1], [True, True, False, False])
    0.5
    """
    s, y = validate(scores, labels, needs="balanced accuracy")
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
    scores: Any, labels: Any, groups: Sequence[Hashable], *, seed: int = 0
) -> TransferResult:
    """Balanced accuracy of a threshold fixed on one half of the groups, on the other half.

    Parameters
    ----------
    scores, labels
        As in :func:`balanced_accuracy`.
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
    s, y = validate(scores, labels, needs="threshold transfer")
    g = as_groups(groups, s.size)
    unique = np.unique(g)
    if unique.size < 2:
        raise ValueError(f"threshold transfer needs at least 2 groups, got {unique.size}")
    order = np.random.default_rng(seed).permutation(unique.size)
    cut = (unique.size + 1) // 2
    halves = (np.sort(unique[order[:cut]]), np.sort(unique[order[cut:]]))
    masks = [np.isin(g, half) for half in halves]
    for name, half, mask in zip("AB", halves, masks, strict=True):
        both_classes(y[mask], f"threshold transfer: half {name} ({half.size} groups)")
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


def false_alarm_threshold(faithful: Sequence[Sequence[float]], rate: float) -> float:
    """The smallest score ``t`` of the faithful responses under which, in every dataset, at
    most ``max(⌊rate · n⌋, 1)`` of its ``n`` faithful responses score above ``t``.

    A dataset of fewer than ``1 / rate`` faithful responses cannot hold one false alarm at
    ``rate``; holding it to none would let its single highest score set the threshold (eight
    quoted RAGTruth answers among the copied kind did, at 5 %), so it may have one.

    Parameters
    ----------
    faithful
        The scores of each dataset's faithful responses (each non-empty).
    rate
        The largest share of any dataset's faithful responses above the threshold.

    >>> false_alarm_threshold([[0.1, 0.2, 0.3, 0.4, 0.5]], 0.2)  # one of five above 0.4
    0.4
    >>> false_alarm_threshold([[0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.9]], 0.2)  # one of two
    0.6
    """
    if not faithful:
        raise ValueError("no faithful response to set the threshold on")
    bounds, lowest = [], math.inf
    for values in faithful:
        v = np.sort(np.asarray(values, dtype=np.float64))  # [n]
        if v.size == 0:
            raise ValueError("a dataset without faithful responses cannot set a threshold")
        allowed = max(math.floor(rate * v.size + 1e-9), 1)
        lowest = min(lowest, float(v[0]))
        if allowed < v.size:  # below its (allowed + 1)-th largest score, too many lie above
            bounds.append(float(v[v.size - allowed - 1]))
    return max(bounds, default=lowest)
