"""A trained hallucination probe on per-head features, in the style of Lookback Lens.

Lookback Lens (Chuang et al., 2024, §2) detects contextual hallucinations with a logistic
regression on one feature per attention head (the response's mean lookback ratio). This
module trains such a probe on any per-head features (``X`` is ``[n_samples, n_features]``,
``y`` is True for a hallucinated / unsupported response, ``groups`` ties together the samples
of one source document) and estimates how well it transfers to unseen documents.

Design:

* Everything that is learned — which features (ranked by univariate ``|AUROC - 0.5|``), how
  many of them and the regularisation ``C`` (inner grouped cross-validation), the
  standardisation, the coefficients and the decision threshold — comes from the training data
  that :meth:`GroundingProbe.fit` receives, and nothing else. Inside the inner
  cross-validation the features are ranked again on each inner training fold, so that the
  inner scores are not inflated by a ranking that saw the inner validation rows.
* :func:`cross_validate` fits one probe per outer fold on the other folds only; all samples of
  one group fall in one fold (``StratifiedGroupKFold``), so its scores measure transfer to new
  documents, not to new summaries of a seen document.
* A fitted probe is a small dataclass of numpy arrays: :meth:`GroundingProbe.predict_proba`
  is plain numpy (scikit-learn is needed to fit, not to predict) and the probe saves to and
  loads from JSON, never pickle, so that loading a probe cannot run code.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit
from scipy.stats import rankdata

__all__ = ["CrossValidation", "FoldScore", "GroundingProbe", "cross_validate"]

_SAVE_FORMAT = "rcstat-probe-1"
_CV_FORMAT = "rcstat-probe-cv-1"
_MAX_ITER = 10_000
# Mean inner AUROCs closer than this are ties (then fewer features, then smaller C win).
_TIE = 1e-12


@dataclass
class GroundingProbe:
    """A logistic regression on a subset of per-head features, with its threshold.

    Attributes
    ----------
    feature_names
        The names of all the input columns (e.g. ``"nrc:L3H2"``), in order; inputs to
        :meth:`predict_proba` must have exactly these columns.
    selected
        ``[m]`` indices (into ``feature_names``) of the features the model uses, best-ranked
        first.
    mean, scale
        ``[m]`` standardisation of the selected features, fit on the training data only
        (``scale`` is the standard deviation, 1 for a constant feature).
    coef
        ``[m]`` logistic-regression weights of the standardised selected features.
    intercept
        The logistic-regression intercept.
    C
        The inverse L2 regularisation strength that inner cross-validation chose.
    threshold
        Probabilities ``>= threshold`` are predicted hallucinated; it maximises the balanced
        accuracy of the inner out-of-fold probabilities of the training data.
    inner_auroc
        Mean AUROC over the inner validation folds of the chosen ``(m, C)``.
    meta
        Free-form JSON-able description (which statistic, which model, ...).

    Notes
    -----
    With ``z = (X[:, selected] - mean) / scale`` the probability of a hallucination is

    .. math:: p = \\sigma(z \\cdot \\mathrm{coef} + \\mathrm{intercept}),
              \\qquad \\sigma(t) = 1 / (1 + e^{-t}),

    the Lookback Lens classifier (Chuang et al., 2024, §2.2) on the selected heads.
    """

    feature_names: list[str]
    selected: np.ndarray  # [m] int64
    mean: np.ndarray  # [m] float64
    scale: np.ndarray  # [m] float64
    coef: np.ndarray  # [m] float64
    intercept: float
    C: float
    threshold: float
    inner_auroc: float = math.nan
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.feature_names = [str(n) for n in self.feature_names]
        self.selected = np.asarray(self.selected, dtype=np.int64).reshape(-1)
        self.mean = np.asarray(self.mean, dtype=np.float64).reshape(-1)
        self.scale = np.asarray(self.scale, dtype=np.float64).reshape(-1)
        self.coef = np.asarray(self.coef, dtype=np.float64).reshape(-1)
        self.intercept = float(self.intercept)
        self.C = float(self.C)
        self.threshold = float(self.threshold)
        self.inner_auroc = float(self.inner_auroc)
        _check_names(self.feature_names, len(self.feature_names))
        m = self.selected.shape[0]
        if m == 0:
            raise ValueError("selected is empty: a probe uses at least one feature")
        for name in ("mean", "scale", "coef"):
            if getattr(self, name).shape[0] != m:
                raise ValueError(
                    f"{name} has {getattr(self, name).shape[0]} entries, selected has {m}"
                )
        n = len(self.feature_names)
        if self.selected.min() < 0 or self.selected.max() >= n:
            raise ValueError(f"selected holds indices outside [0, {n}) (feature_names)")
        if np.unique(self.selected).shape[0] != m:
            raise ValueError("selected holds repeated indices")
        if not (np.all(np.isfinite(self.scale)) and np.all(self.scale > 0)):
            raise ValueError("scale must be finite and > 0")

    @property
    def selected_names(self) -> list[str]:
        """The names of the selected features, in the order of :attr:`selected`."""
        return [self.feature_names[i] for i in self.selected]

    # ------------------------------------------------------------------ fitting

    @classmethod
    def fit(
        cls,
        X: np.ndarray,
        y: np.ndarray | Sequence[bool],
        groups: Sequence[Hashable] | np.ndarray,
        *,
        feature_names: Sequence[str],
        max_features: Sequence[int | None] = (8, 32, 128, None),
        Cs: Sequence[float] = (0.01, 0.1, 1.0),
        inner_splits: int = 3,
        seed: int = 0,
        meta: dict[str, Any] | None = None,
    ) -> GroundingProbe:
        """Fit a probe, choosing its features and hyper-parameters on ``X`` alone.

        Parameters
        ----------
        X : array, [n_samples, n_features]
            Per-sample features (e.g. per-head statistics averaged over a response's tokens).
        y : bool array, [n_samples]
            True where the sample is hallucinated / unsupported.
        groups : sequence of hashables, [n_samples]
            The group of each sample (its source document); inner folds never split a group.
        feature_names : sequence of str, [n_features]
            Unique names of the columns of ``X``.
        max_features : sequence of int or None
            Candidate numbers ``m`` of top-ranked features (None = all; larger than
            ``n_features`` means all).
        Cs : sequence of float
            Candidate inverse L2 regularisation strengths (> 0).
        inner_splits : int
            Folds of the inner grouped cross-validation (>= 2).
        seed : int
            ``random_state`` of the shuffled inner fold assignment.
        meta : dict, optional
            Stored as :attr:`meta`.

        Returns
        -------
        GroundingProbe

        Notes
        -----
        1. Each feature ``j`` is ranked by ``|AUROC_j - 0.5|``, the univariate AUROC of
           ``X[:, j]`` against ``y`` (Mann–Whitney: ``AUROC = (R_+ - n_+(n_+ + 1)/2) /
           (n_+ n_-)``, ``R_+`` the sum of the positives' mid-ranks); ties keep column order.
        2. For every candidate ``(m, C)`` and every inner fold (``StratifiedGroupKFold`` with
           ``shuffle=True, random_state=seed``; a seeded shuffled group k-fold when some class
           occurs in fewer than ``inner_splits`` groups), features are ranked on the inner
           training fold, the top ``m`` standardised and a logistic regression (lbfgs,
           ``class_weight="balanced"``) fit; the inner validation fold is scored by AUROC.
           The ``(m, C)`` with the largest mean inner AUROC wins; ties go to fewer features,
           then to smaller ``C``.
        3. The final model is refit with the chosen ``(m, C)`` on all of ``X``; its threshold
           maximises the balanced accuracy ``(TPR + TNR) / 2`` of ``p >= threshold`` on the
           chosen candidate's inner out-of-fold probabilities (the smallest probability or a
           midpoint between two consecutive distinct ones; ties go to the one nearest 0.5).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> y = np.arange(60) % 2 == 0
        >>> X = rng.normal(size=(60, 6))
        >>> X[:, 2] += 3.0 * y
        >>> probe = GroundingProbe.fit(
        ...     X, y, np.arange(60) // 2, feature_names=[f"f{j}" for j in range(6)],
        ...     max_features=(1, None), Cs=(1.0,))
        >>> probe.selected_names
        ['f2']
        >>> bool(probe.predict(X[:1])[0])
        True
        """
        X, y, group_ids = _check_data(X, y, groups)
        names = _check_names(feature_names, X.shape[1])
        ms, Cs_ = _check_grid(max_features, Cs, X.shape[1])
        inner_splits = _check_splits(inner_splits, "inner_splits", group_ids)
        LogisticRegression = _sklearn_logistic()

        # Inner CV: oof[(m, C)] and per-fold AUROCs, ranking re-done on each inner train fold.
        oof = {(m, C): np.full(y.shape[0], np.nan) for m in ms for C in Cs_}  # each [n]
        fold_auc: dict[tuple[int, float], list[float]] = {k: [] for k in oof}
        for train, test in _splits(y, group_ids, inner_splits, seed):
            if y[train].all() or not y[train].any():
                continue  # a one-class training fold cannot be fit
            order = _rank_features(X[train], y[train])  # [n_features]
            mu, sd = _standardisation(X[train])  # [n_features] each
            for m in ms:
                cols = order[:m]
                Z_train = (X[np.ix_(train, cols)] - mu[cols]) / sd[cols]  # [n_train, m]
                Z_test = (X[np.ix_(test, cols)] - mu[cols]) / sd[cols]  # [n_test, m]
                for C in Cs_:
                    model = _logistic(LogisticRegression, C).fit(Z_train, y[train])
                    p = expit(Z_test @ model.coef_[0] + model.intercept_[0])  # [n_test]
                    oof[(m, C)][test] = p
                    fold_auc[(m, C)].append(_auroc(p, y[test]))

        best: tuple[int, float] | None = None
        best_score = -math.inf
        for key in oof:  # ascending m, then ascending C: strict improvement needed to move
            scores = [a for a in fold_auc[key] if not math.isnan(a)]
            if scores and float(np.mean(scores)) > best_score + _TIE:
                best, best_score = key, float(np.mean(scores))
        if best is None:
            raise ValueError(
                f"the inner cross-validation ({inner_splits} grouped folds) could not score any "
                "fold: each inner training or validation fold holds one class only; pass more "
                "groups of each class or a smaller inner_splits"
            )
        m, C = best

        order = _rank_features(X, y)
        cols = order[:m]
        mu, sd = _standardisation(X[:, cols])
        model = _logistic(LogisticRegression, C).fit((X[:, cols] - mu) / sd, y)
        scored = ~np.isnan(oof[best])
        threshold = _best_threshold(oof[best][scored], y[scored])
        return cls(
            feature_names=names,
            selected=cols,
            mean=mu,
            scale=sd,
            coef=model.coef_[0],
            intercept=float(model.intercept_[0]),
            C=C,
            threshold=threshold,
            inner_auroc=best_score,
            meta=dict(meta or {}),
        )

    # --------------------------------------------------------------- prediction

    def predict_proba(
        self, X: np.ndarray, *, feature_names: Sequence[str] | None = None
    ) -> np.ndarray:
        """The probability that each sample is hallucinated, ``[n_samples]`` float64.

        Parameters
        ----------
        X : array, [n_samples, len(feature_names)]
            Finite features, columns in the order of :attr:`feature_names`.
        feature_names : sequence of str, optional
            The names of ``X``'s columns; when given they must equal :attr:`feature_names`.

        Notes
        -----
        ``p = 1 / (1 + exp(-(((X[:, selected] - mean) / scale) @ coef + intercept)))``.
        """
        X = _check_matrix(X)
        if X.shape[1] != len(self.feature_names):
            raise ValueError(
                f"X has {X.shape[1]} columns, the probe was fit on "
                f"{len(self.feature_names)} features"
            )
        if feature_names is not None and list(feature_names) != self.feature_names:
            got = list(feature_names)
            diff = next(
                (
                    i
                    for i, (a, b) in enumerate(zip(got, self.feature_names, strict=False))
                    if a != b
                ),
                min(len(got), len(self.feature_names)),
            )
            raise ValueError(
                f"feature_names differ from the probe's at column {diff}: "
                f"{got[diff] if diff < len(got) else '(missing)'!r} vs "
                f"{self.feature_names[diff] if diff < len(self.feature_names) else '(none)'!r}"
            )
        z = ((X[:, self.selected] - self.mean) / self.scale) @ self.coef + self.intercept  # [n]
        return np.asarray(expit(z), dtype=np.float64)

    def predict(self, X: np.ndarray, *, feature_names: Sequence[str] | None = None) -> np.ndarray:
        """``predict_proba(X) >= threshold``: True = predicted hallucinated, ``[n_samples]``."""
        return self.predict_proba(X, feature_names=feature_names) >= self.threshold

    # ------------------------------------------------------------ serialisation

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON types (floats round-trip exactly through JSON)."""
        return {
            "format": _SAVE_FORMAT,
            "feature_names": list(self.feature_names),
            "selected": self.selected.tolist(),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "C": self.C,
            "threshold": self.threshold,
            "inner_auroc": None if math.isnan(self.inner_auroc) else self.inner_auroc,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "data") -> GroundingProbe:
        """Rebuild a probe from :meth:`to_dict`'s output (checks the format tag)."""
        if not isinstance(data, dict) or data.get("format") != _SAVE_FORMAT:
            found = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(
                f"{source}: not an rcstat probe (format {found!r}, expected {_SAVE_FORMAT!r})"
            )
        keys = ("feature_names", "selected", "mean", "scale", "coef", "intercept", "C")
        missing = [k for k in (*keys, "threshold") if k not in data]
        if missing:
            raise ValueError(f"{source}: probe is missing {', '.join(missing)}")
        inner = data.get("inner_auroc")
        return cls(
            feature_names=list(data["feature_names"]),
            selected=np.array(data["selected"], dtype=np.int64),
            mean=np.array(data["mean"], dtype=np.float64),
            scale=np.array(data["scale"], dtype=np.float64),
            coef=np.array(data["coef"], dtype=np.float64),
            intercept=float(data["intercept"]),
            C=float(data["C"]),
            threshold=float(data["threshold"]),
            inner_auroc=math.nan if inner is None else float(inner),
            meta=dict(data.get("meta") or {}),
        )

    def save(self, path: str | Path) -> Path:
        """Write the probe to one ``.json`` file that :meth:`load` reads back (no pickle)."""
        path = Path(path)
        if path.suffix != ".json":
            raise ValueError(f"GroundingProbe.save writes a .json file, got {path.name!r}")
        path.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> GroundingProbe:
        """Read a ``.json`` file written by :meth:`save`."""
        path = Path(path)
        if path.suffix != ".json":
            raise ValueError(
                f"GroundingProbe.load reads a .json file written by save, got {path.name!r}"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not an rcstat probe (invalid JSON: {e})") from e
        return cls.from_dict(data, source=str(path))


# ---------------------------------------------------------------------- cross-validation


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
    X, y, group_ids = _check_data(X, y, groups)
    names = _check_names(feature_names, X.shape[1])
    n_splits = _check_splits(n_splits, "n_splits", group_ids)
    unknown = set(fit_options) - {"max_features", "Cs", "inner_splits", "meta"}
    if unknown:
        raise ValueError(f"unknown fit options: {', '.join(sorted(unknown))}")
    _sklearn_logistic()  # fail before any work when scikit-learn is absent

    oof = np.full(y.shape[0], np.nan)  # [n]
    fold = np.full(y.shape[0], -1, dtype=np.int64)  # [n]
    predicted = np.zeros(y.shape[0], dtype=bool)  # [n]
    folds: list[FoldScore] = []
    probes: list[GroundingProbe] = []
    for k, (train, test) in enumerate(_splits(y, group_ids, n_splits, seed)):
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
                auroc=_auroc(p, y[test]),
                balanced_accuracy=_balanced_accuracy(predicted[test], y[test]),
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
        auroc=_auroc(oof, y),
        balanced_accuracy=_balanced_accuracy(predicted, y),
        n_splits=n_splits,
        seed=seed,
    )


# ---------------------------------------------------------------------- kernels


def _auroc(scores: np.ndarray, y: np.ndarray) -> float:
    """Mann–Whitney AUROC of ``scores`` for ``y`` (ties count 1/2); NaN for one class."""
    return float(_auroc_columns(np.asarray(scores, dtype=np.float64)[:, None], y)[0])


def _auroc_columns(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[n_features]`` AUROC of every column of ``X`` ``[n, n_features]`` against ``y``.

    ``AUROC = (R_+ - n_+ (n_+ + 1) / 2) / (n_+ n_-)`` with ``R_+`` the sum of the positives'
    mid-ranks within the column.
    """
    n_pos = int(y.sum())
    n_neg = int(y.shape[0]) - n_pos
    if n_pos == 0 or n_neg == 0:
        return np.full(X.shape[1], np.nan)
    ranks = rankdata(X, axis=0)  # [n, n_features] mid-ranks
    r_pos = ranks[y].sum(axis=0)  # [n_features]
    return np.asarray((r_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg), dtype=np.float64)


def _rank_features(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Column indices by decreasing ``|AUROC - 0.5|``; ties keep column order."""
    strength = np.abs(_auroc_columns(X, y) - 0.5)  # [n_features]
    return np.argsort(-strength, kind="stable").astype(np.int64)


def _standardisation(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant)."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return mean, scale


def _balanced_accuracy(predicted: np.ndarray, y: np.ndarray) -> float:
    """``(TPR + TNR) / 2``; NaN when ``y`` holds one class."""
    n_pos = int(y.sum())
    n_neg = int(y.shape[0]) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    tpr = float((predicted & y).sum()) / n_pos
    tnr = float((~predicted & ~y).sum()) / n_neg
    return (tpr + tnr) / 2


def _best_threshold(p: np.ndarray, y: np.ndarray) -> float:
    """The threshold ``t`` maximising the balanced accuracy of ``p >= t`` for ``y``.

    Candidates are ``min(p)`` (everything positive) and the midpoints between consecutive
    distinct values of ``p`` (every other split of the sorted probabilities); ties go to the
    candidate nearest 0.5. Returns 0.5 when ``p`` has fewer than two distinct values or ``y``
    holds one class.
    """
    n_pos = int(y.sum())
    n_neg = int(y.shape[0]) - n_pos
    values = np.unique(p)  # [k] ascending
    if values.shape[0] < 2 or n_pos == 0 or n_neg == 0:
        return 0.5
    cuts = np.r_[values[0], (values[:-1] + values[1:]) / 2]  # [k]
    # p >= cuts[i]  <=>  p > values[i - 1] (i >= 1): count the samples at or below values[i-1].
    pos_below = np.r_[0, np.searchsorted(np.sort(p[y]), values[:-1], side="right")]  # [k]
    neg_below = np.r_[0, np.searchsorted(np.sort(p[~y]), values[:-1], side="right")]  # [k]
    bacc = ((n_pos - pos_below) / n_pos + neg_below / n_neg) / 2  # [k]
    best = np.flatnonzero(bacc >= bacc.max() - _TIE)
    return float(cuts[best[np.argmin(np.abs(cuts[best] - 0.5))]])


def _splits(
    y: np.ndarray, group_ids: np.ndarray, n_splits: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Grouped folds: stratified when each class occurs in at least ``n_splits`` groups.

    ``StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed)``; otherwise
    :func:`_shuffled_group_folds` (``GroupKFold`` shuffles only from scikit-learn 1.6 on, and
    the results must not depend on the installed release).
    """
    from sklearn.model_selection import StratifiedGroupKFold

    pos_groups = np.unique(group_ids[y]).shape[0]
    neg_groups = np.unique(group_ids[~y]).shape[0]
    if min(pos_groups, neg_groups) < n_splits:
        yield from _shuffled_group_folds(group_ids, n_splits, seed)
        return
    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    dummy = np.zeros((y.shape[0], 1))
    for train, test in splitter.split(dummy, y, group_ids):
        yield np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)


def _shuffled_group_folds(
    group_ids: np.ndarray, n_splits: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Group k-fold without stratification: groups in a seeded random order, each put in the
    fold with the fewest samples so far (ties: lowest fold), so folds have similar sizes."""
    unique, sizes = np.unique(group_ids, return_counts=True)  # [n_groups] each
    order = np.random.default_rng(seed).permutation(unique.shape[0])
    fold_of_group = np.empty(unique.shape[0], dtype=np.int64)
    load = np.zeros(n_splits, dtype=np.int64)
    for g in order:
        k = int(np.argmin(load))
        fold_of_group[g] = k
        load[k] += sizes[g]
    fold = fold_of_group[np.searchsorted(unique, group_ids)]  # [n]
    for k in range(n_splits):
        yield np.flatnonzero(fold != k), np.flatnonzero(fold == k)


def _sklearn_logistic() -> Any:
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "fitting a GroundingProbe needs scikit-learn (pip install scikit-learn); "
            "loading and predicting do not"
        ) from e
    return LogisticRegression


def _logistic(LogisticRegression: Any, C: float) -> Any:
    return LogisticRegression(C=C, solver="lbfgs", max_iter=_MAX_ITER, class_weight="balanced")


# ---------------------------------------------------------------------- validation


def _check_matrix(X: Any) -> np.ndarray:
    """``X`` as a finite 2-D float64 array; names the first non-finite entry."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        hint = " (one sample: X.reshape(1, -1))" if X.ndim == 1 else ""
        raise ValueError(f"X must be 2-D [n_samples, n_features], got shape {X.shape}{hint}")
    bad = ~np.isfinite(X)
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"X has a non-finite value ({X[row, col]}) at row {row}, column {col}")
    return X


def _check_data(X: Any, y: Any, groups: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validated ``X [n, f]`` float64, ``y [n]`` bool and integer group ids ``[n]``."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [n_samples, n_features], got shape {X.shape}")
    y_arr = np.asarray(y)
    if y_arr.ndim != 1:
        raise ValueError(f"y must be 1-D [n_samples], got shape {y_arr.shape}")
    groups_list = list(groups)
    n = X.shape[0]
    if y_arr.shape[0] != n or len(groups_list) != n:
        raise ValueError(
            f"X, y and groups must have the same length, got {n}, {y_arr.shape[0]} and "
            f"{len(groups_list)}"
        )
    if n == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty (shape {X.shape})")
    X = _check_matrix(X)
    if y_arr.dtype != np.bool_:
        if not (np.issubdtype(y_arr.dtype, np.number) and np.isin(y_arr, (0, 1)).all()):
            raise ValueError(f"y must be bool (True = hallucinated) or 0/1, got {y_arr.dtype}")
        y_arr = y_arr.astype(bool)
    n_pos = int(y_arr.sum())
    if n_pos == 0 or n_pos == n:
        raise ValueError(
            f"y holds a single class ({'all True' if n_pos else 'all False'}); "
            "a probe needs hallucinated and supported samples"
        )
    ids: dict[Hashable, int] = {}
    group_ids = np.empty(n, dtype=np.int64)
    for i, g in enumerate(groups_list):
        try:
            group_ids[i] = ids.setdefault(g, len(ids))
        except TypeError as e:
            raise ValueError(f"groups[{i}] is not hashable ({type(g).__name__})") from e
    return X, y_arr, group_ids


def _check_names(feature_names: Any, n_features: int) -> list[str]:
    if isinstance(feature_names, str):
        raise ValueError("feature_names must be a sequence of names, got one string")
    names = [str(n) for n in feature_names]
    if len(names) != n_features:
        raise ValueError(f"feature_names has {len(names)} names, X has {n_features} columns")
    if len(set(names)) != len(names):
        dup = next(n for n, count in Counter(names).items() if count > 1)
        raise ValueError(f"feature_names must be unique, {dup!r} repeats")
    return names


def _check_grid(
    max_features: Sequence[int | None], Cs: Sequence[float], n_features: int
) -> tuple[list[int], list[float]]:
    """Sorted unique ``m`` (clipped to ``n_features``, None = all) and sorted unique ``C``."""
    ms: set[int] = set()
    for m in list(max_features):
        if m is None:
            ms.add(n_features)
            continue
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise ValueError(f"max_features entries must be integers >= 1 or None, got {m!r}")
        ms.add(min(int(m), n_features))
    if not ms:
        raise ValueError("max_features is empty")
    cs: set[float] = set()
    for C in list(Cs):
        if not (isinstance(C, int | float | np.number) and math.isfinite(C) and C > 0):
            raise ValueError(f"Cs entries must be finite numbers > 0, got {C!r}")
        cs.add(float(C))
    if not cs:
        raise ValueError("Cs is empty")
    return sorted(ms), sorted(cs)


def _check_splits(n_splits: int, name: str, group_ids: np.ndarray) -> int:
    if isinstance(n_splits, bool) or not isinstance(n_splits, int | np.integer) or n_splits < 2:
        raise ValueError(f"{name} must be an integer >= 2, got {n_splits!r}")
    n_groups = int(np.unique(group_ids).shape[0])
    if n_groups < n_splits:
        raise ValueError(
            f"fewer groups ({n_groups}) than {name} ({n_splits}): every fold needs a group"
        )
    return int(n_splits)


def _num(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
