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
* :func:`~rcstat.grounding.cross_validation.cross_validate` fits one probe per outer fold on
  the other folds only (:mod:`rcstat.grounding.cross_validation`); the grouped folds are in
  :mod:`rcstat.grounding.folds`, the input checks in :mod:`rcstat.grounding.probe_checks` and
  the metrics (AUROC, balanced accuracy, the best threshold) in :mod:`rcstat.metrics`.
* A fitted probe is a small dataclass of numpy arrays: :meth:`GroundingProbe.predict_proba`
  is plain numpy (scikit-learn is needed to fit, not to predict) and the probe saves to and
  loads from JSON, never pickle, so that loading a probe cannot run code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from rcstat.grounding.folds import check_splits, grouped_splits
from rcstat.grounding.json_file import save_json
from rcstat.grounding.probe_checks import check_data, check_grid, check_matrix, check_names
from rcstat.metrics.ranking import auroc_columns
from rcstat.metrics.thresholds import best_threshold

__all__ = ["GroundingProbe", "decision_threshold", "sklearn_logistic"]

_SAVE_FORMAT = "rcstat-probe-1"
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
        check_names(self.feature_names, len(self.feature_names))
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
           midpoint between two consecutive distinct ones; ties go to the smallest, the rule
           of :func:`~rcstat.metrics.thresholds.best_threshold`; 0.5 when the probabilities
           cannot separate the classes, see :func:`decision_threshold`).

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
        X, y, group_ids = check_data(X, y, groups)
        names = check_names(feature_names, X.shape[1])
        ms, Cs_ = check_grid(max_features, Cs, X.shape[1])
        inner_splits = check_splits(inner_splits, "inner_splits", group_ids)
        LogisticRegression = sklearn_logistic()

        # Inner CV: oof[(m, C)] and per-fold AUROCs, ranking re-done on each inner train fold.
        oof = {(m, C): np.full(y.shape[0], np.nan) for m in ms for C in Cs_}  # each [n]
        fold_auc: dict[tuple[int, float], list[float]] = {k: [] for k in oof}
        for train, test in grouped_splits(y, group_ids, inner_splits, seed):
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
                    fold_auc[(m, C)].append(float(auroc_columns(p[:, None], y[test])[0]))

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
        threshold = decision_threshold(oof[best][scored], y[scored])
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
        X = check_matrix(X)
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
        return save_json(path, json.dumps(self.to_dict(), indent=1), "GroundingProbe.save")

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


# ---------------------------------------------------------------------- fitting kernels


def _rank_features(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Column indices by decreasing ``|AUROC - 0.5|``; ties keep column order."""
    strength = np.abs(auroc_columns(X, y) - 0.5)  # [n_features]
    return np.argsort(-strength, kind="stable").astype(np.int64)


def _standardisation(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations (1 where a column is constant)."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return mean, scale


def decision_threshold(p: np.ndarray, y: np.ndarray) -> float:
    """The probe's threshold for out-of-fold probabilities ``p`` of labels ``y``.

    :func:`~rcstat.metrics.thresholds.best_threshold` (the smallest threshold of largest
    balanced accuracy of ``p >= t``), or 0.5 — even odds — when ``p`` cannot separate
    anything: ``y`` holds one class or ``p`` fewer than two distinct values.
    """
    if np.unique(p).shape[0] < 2 or y.all() or not y.any():
        return 0.5
    return best_threshold(p, y)


def sklearn_logistic() -> Any:
    """scikit-learn's ``LogisticRegression`` class, or an ``ImportError`` that says why."""
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
