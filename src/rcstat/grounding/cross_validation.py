"""Grouped cross-validation of :class:`~rcstat.grounding.probe.GroundingProbe`.

:func:`cross_validate` fits one probe per outer fold on the other folds only; all samples of
one group fall in one fold (:func:`~rcstat.grounding.folds.grouped_splits`), so its scores
measure transfer to new documents, not to new summaries of a seen document. The result,
:class:`CrossValidation`, keeps every out-of-fold probability, each fold's probe and score,
and saves as plain JSON.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rcstat.grounding.folds import check_splits, grouped_splits
from rcstat.grounding.probe import GroundingProbe, sklearn_logistic
from rcstat.grounding.probe_checks import check_data, check_names
from rcstat.metrics.ranking import auroc_columns
from rcstat.metrics.thresholds import balanced_accuracy_of_predictions

__all__ = ["CrossValidation", "FoldScore", "cross_validate"]

_CV_FORMAT = "rcstat-probe-cv-1"


@dataclass(frozen=True)
class FoldScore:
    """One outer fold of :func:`cross_validate`.

    Attributes
    ----------
    fold
        Fold index.
    n_train, n_test
        Samples the fold's probe was fit on / scored on.
    auroc
        AUROC of the fold's held-out probabilities (NaN when the fold holds one class).
    balanced_accuracy
        ``(TPR + TNR) / 2`` of ``p >= threshold`` on the held-out samples (NaN when the fold
        holds one class).
    threshold, n_selected, C
        The fold probe's threshold, number of features and regularisation.
    """

    fold: int
    n_train: int
    n_test: int
    auroc: float
    balanced_accuracy: float
    threshold: float
    n_selected: int
    C: float


@dataclass
class CrossValidation:
    """Out-of-fold predictions of probes fit by grouped cross-validation.

    Attributes
    ----------
    y
        ``[n]`` labels (True = hallucinated).
    groups
        ``[n]`` the groups as given.
    oof
        ``[n]`` out-of-fold probability of each sample, from the probe that did not see it.
    fold
        ``[n]`` index of the fold each sample was held out in.
    predicted
        ``[n]`` ``oof >= threshold`` of the sample's own fold.
    folds
        Per-fold scores (:class:`FoldScore`).
    probes
        The probe of each fold, fit on the other folds only.
    auroc
        AUROC of the pooled out-of-fold probabilities.
    balanced_accuracy
        Balanced accuracy of the pooled ``predicted``.
    n_splits, seed
        The outer split.
    """

    y: np.ndarray  # [n] bool
    groups: list[Hashable]
    oof: np.ndarray  # [n] float64
    fold: np.ndarray  # [n] int64
    predicted: np.ndarray  # [n] bool
    folds: list[FoldScore]
    probes: list[GroundingProbe]
    auroc: float
    balanced_accuracy: float
    n_splits: int
    seed: int

    def to_frame(self) -> pd.DataFrame:
        """One row per sample: ``sample, group, fold, y, p, predicted``."""
        return pd.DataFrame(
            {
                "sample": np.arange(self.y.shape[0]),
                "group": pd.Series(self.groups, dtype=object),
                "fold": self.fold,
                "y": self.y,
                "p": self.oof,
                "predicted": self.predicted,
            }
        )

    def folds_frame(self) -> pd.DataFrame:
        """One row per fold (the fields of :class:`FoldScore`)."""
        return pd.DataFrame([vars(f) for f in self.folds])

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON types (NaN written as None; non-JSON groups as str)."""
        return {
            "format": _CV_FORMAT,
            "n_splits": self.n_splits,
            "seed": self.seed,
            "auroc": _num(self.auroc),
            "balanced_accuracy": _num(self.balanced_accuracy),
            "folds": [
                {
                    **vars(f),
                    "auroc": _num(f.auroc),
                    "balanced_accuracy": _num(f.balanced_accuracy),
                }
                for f in self.folds
            ],
            "samples": {
                "group": [_json_scalar(g) for g in self.groups],
                "fold": self.fold.tolist(),
                "y": self.y.tolist(),
                "p": self.oof.tolist(),
                "predicted": self.predicted.tolist(),
            },
            "probes": [p.to_dict() for p in self.probes],
        }


def cross_validate(
    X: np.ndarray,
    y: np.ndarray | Sequence[bool],
    groups: Sequence[Hashable] | np.ndarray,
    *,
    feature_names: Sequence[str],
    n_splits: int = 5,
    seed: int = 0,
    **fit_options: Any,
) -> CrossValidation:
    """Out-of-fold probabilities of :class:`GroundingProbe`\\ s, one per grouped fold.

    Parameters
    ----------
    X, y, groups, feature_names
        As for :meth:`GroundingProbe.fit`.
    n_splits : int
        Outer folds (>= 2, at most the number of groups). ``StratifiedGroupKFold`` with
        ``shuffle=True, random_state=seed`` (a seeded shuffled group k-fold when some class
        occurs in fewer than ``n_splits`` groups): all samples of one group land in one fold.
    seed : int
        Seed of the outer split, also passed to each fold's :meth:`GroundingProbe.fit`.
    **fit_options
        ``max_features``, ``Cs``, ``inner_splits``, ``meta`` for :meth:`GroundingProbe.fit`.

    Returns
    -------
    CrossValidation

    Notes
    -----
    The probe of fold ``k`` is ``GroundingProbe.fit(X[fold != k], y[fold != k],
    groups[fold != k], seed=seed, ...)``: its features, ``(m, C)``, standardisation and
    threshold never see the held-out rows. ``predicted`` uses each fold's own threshold;
    :attr:`CrossValidation.auroc` pools the out-of-fold probabilities of all folds.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = np.arange(80) % 2 == 0
    >>> X = rng.normal(size=(80, 5))
    >>> X[:, 0] += 3.0 * y
    >>> cv = cross_validate(X, y, np.arange(80) // 2, feature_names=list("abcde"),
    ...                     n_splits=4, max_features=(1, None), Cs=(1.0,))
    >>> cv.auroc > 0.9
    True
    """
    X, y, group_ids = check_data(X, y, groups)
    names = check_names(feature_names, X.shape[1])
    n_splits = check_splits(n_splits, "n_splits", group_ids)
    unknown = set(fit_options) - {"max_features", "Cs", "inner_splits", "meta"}
    if unknown:
        raise ValueError(f"unknown fit options: {', '.join(sorted(unknown))}")
    sklearn_logistic()  # fail before any work when scikit-learn is absent

    oof = np.full(y.shape[0], np.nan)  # [n]
    fold = np.full(y.shape[0], -1, dtype=np.int64)  # [n]
    predicted = np.zeros(y.shape[0], dtype=bool)  # [n]
    folds: list[FoldScore] = []
    probes: list[GroundingProbe] = []
    for k, (train, test) in enumerate(grouped_splits(y, group_ids, n_splits, seed)):
        probe = GroundingProbe.fit(
            X[train],
            y[train],
            group_ids[train],
            feature_names=names,
            seed=seed,
            **fit_options,
        )
        p = probe.predict_proba(X[test])  # [n_test]
        oof[test] = p
        fold[test] = k
        predicted[test] = p >= probe.threshold
        probes.append(probe)
        folds.append(
            FoldScore(
                fold=k,
                n_train=int(train.shape[0]),
                n_test=int(test.shape[0]),
                auroc=float(auroc_columns(p[:, None], y[test])[0]),
                balanced_accuracy=_held_out_balanced_accuracy(predicted[test], y[test]),
                threshold=probe.threshold,
                n_selected=int(probe.selected.shape[0]),
                C=probe.C,
            )
        )
    return CrossValidation(
        y=y,
        groups=list(groups),
        oof=oof,
        fold=fold,
        predicted=predicted,
        folds=folds,
        probes=probes,
        auroc=float(auroc_columns(oof[:, None], y)[0]),
        balanced_accuracy=balanced_accuracy_of_predictions(predicted, y),
        n_splits=n_splits,
        seed=seed,
    )


def _held_out_balanced_accuracy(predicted: np.ndarray, y: np.ndarray) -> float:
    """:func:`~rcstat.metrics.thresholds.balanced_accuracy_of_predictions`; NaN when ``y``
    holds one class (a held-out fold of one class only)."""
    if y.all() or not y.any():
        return math.nan
    return balanced_accuracy_of_predictions(predicted, y)


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
