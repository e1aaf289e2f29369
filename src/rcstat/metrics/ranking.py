"""Ranking metrics of a detector: AUROC (one score, many columns, pooled tokens) and AUC-PR.

- **AUROC** = P(score of a random positive > score of a random negative)
  + ½ P(the two scores tie) — the Mann–Whitney statistic divided by ``P · N``. Ties count
  one half everywhere in rcstat. :func:`auroc` is scikit-learn's ``roc_auc_score`` (the
  trapezoid under the ROC steps); :func:`auroc_columns` computes the same quantity for
  every column of a matrix at once from mid-ranks (a probe ranks thousands of head features
  this way). Both agree to rounding (about 1e-16).
- **AUC-PR** is average precision, ``AP = Σ_k (R_k - R_{k-1}) P_k`` over the distinct
  score thresholds in decreasing order (precision ``P_k`` and recall ``R_k`` when every
  score ``>=`` the k-th threshold is flagged); a step sum, not the trapezoid.

scikit-learn is imported when a metric is first computed, not with this module, so that
importing :mod:`rcstat.grounding` (which ranks features with :func:`auroc_columns`) does not
load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata

from rcstat.metrics.inputs import as_labels, check_finite, validate

__all__ = ["auc_pr", "auroc", "auroc_columns", "token_auroc"]


def auroc(scores: Any, labels: Any) -> float:
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
    from sklearn.metrics import roc_auc_score

    s, y = validate(scores, labels, needs="AUROC")
    return float(roc_auc_score(y, s))


def auroc_columns(X: Any, labels: Any) -> np.ndarray:
    """``[n_features]`` AUROC of every column of ``X`` ``[n, n_features]`` against ``labels``.

    Parameters
    ----------
    X
        ``[n, n_features]`` finite scores, one detector (or feature) per column.
    labels
        ``[n]`` booleans (or 0/1), ``True`` = positive.

    Returns
    -------
    numpy.ndarray
        ``[n_features]`` float64; all NaN when ``labels`` hold a single class (AUROC is
        undefined there; :func:`auroc` raises instead).

    Notes
    -----
    ``AUROC = (R_+ - P (P + 1) / 2) / (P N)`` with ``R_+`` the sum of the positives'
    mid-ranks within the column (the Mann–Whitney U of the positives over ``P · N``), which
    counts a tie as one half, as :func:`auroc` does.

    Examples
    --------
    >>> auroc_columns([[0.9, 1.0], [0.4, 0.0], [0.4, 1.0], [0.1, 0.0]],
    ...               [True, True, False, False]).tolist()
    [0.875, 0.5]
    """
    X = np.asarray(X, dtype=np.float64)
    y = as_labels(labels)
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(
            f"X must be [n, n_features] and labels [n], got shapes {X.shape} and {y.shape}"
        )
    check_finite(X.ravel(), name="X")
    n_pos = int(y.sum())
    n_neg = int(y.shape[0]) - n_pos
    if n_pos == 0 or n_neg == 0:
        return np.full(X.shape[1], np.nan)
    ranks = rankdata(X, axis=0)  # [n, n_features] mid-ranks
    r_pos = ranks[y].sum(axis=0)  # [n_features]
    return np.asarray((r_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg), dtype=np.float64)


def auc_pr(scores: Any, labels: Any) -> float:
    """Area under the precision-recall curve as average precision (``average_precision_score``)
    of ``scores`` and ``labels`` (as in :func:`auroc`): in ``[0, 1]``, the positive rate being
    chance.

    Notes
    -----
    ``AP = Σ_k (R_k - R_{k-1}) P_k`` over the distinct scores in decreasing order, with
    ``R_0 = 0``; tied scores form one step.

    Examples
    --------
    >>> round(auc_pr([0.9, 0.8, 0.7, 0.6], [True, False, True, False]), 4)
    0.8333
    """
    from sklearn.metrics import average_precision_score

    s, y = validate(scores, labels, needs="AUC-PR")
    return float(average_precision_score(y, s))


def token_auroc(token_scores: Sequence[Any], token_labels: Sequence[Any]) -> float:
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
        y = as_labels(y_i, name=f"token_labels[{i}]")
        if s.ndim != 1 or y.ndim != 1:
            raise ValueError(
                f"example {i}: token scores and labels must be one-dimensional, got shapes "
                f"{s.shape} and {y.shape}"
            )
        if s.size != y.size:
            raise ValueError(f"example {i}: {s.size} token scores but {y.size} token labels")
        check_finite(s, name=f"token_scores[{i}]")
        pooled_scores.append(s)
        pooled_labels.append(y)
    return auroc(np.concatenate(pooled_scores), np.concatenate(pooled_labels))
