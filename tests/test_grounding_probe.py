"""Tests of rcstat.grounding.probe, .cross_validation and .folds: the trained hallucination
probe, its threshold rule and its grouped cross-validation."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.metrics import roc_auc_score

from rcstat.grounding.cross_validation import CrossValidation, cross_validate
from rcstat.grounding.folds import grouped_splits, shuffled_group_folds
from rcstat.grounding.probe import GroundingProbe, decision_threshold
from rcstat.metrics.thresholds import balanced_accuracy_of_predictions as _balanced_accuracy

N_FEATURES = 20
NAMES = [f"nrc:L{j // 5}H{j % 5}" for j in range(N_FEATURES)]
# A small grid keeps every test fast; the logic is the same as with the defaults.
GRID = {"max_features": (2, 8, None), "Cs": (0.1, 1.0)}


def _data(
    n: int = 160, *, signal: bool = True, seed: int = 0, per_group: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X [n, 20]`` noise, plus a shift along the label in columns 3 and 7 when `signal`."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.4  # [n]
    X = rng.normal(size=(n, N_FEATURES))  # [n, f]
    if signal:
        X[:, 3] += 1.5 * y
        X[:, 7] -= 1.5 * y
    groups = np.arange(n) // per_group  # [n]
    return X, y, groups


@pytest.fixture(scope="module")
def signal_cv() -> tuple[np.ndarray, np.ndarray, np.ndarray, CrossValidation]:
    X, y, groups = _data()
    return X, y, groups, cross_validate(X, y, groups, feature_names=NAMES, seed=0, **GRID)


# --------------------------------------------------------------------------- learning


def test_signal_features_are_selected_and_transfer(signal_cv) -> None:
    X, y, groups, cv = signal_cv
    for probe in cv.probes:
        assert {3, 7} <= set(probe.selected.tolist())
        assert set(probe.selected[:2].tolist()) == {3, 7}  # ranked first
    assert cv.auroc > 0.8
    assert cv.balanced_accuracy > 0.7
    probe = GroundingProbe.fit(X, y, groups, feature_names=NAMES, **GRID)
    assert set(probe.selected_names[:2]) == {"nrc:L0H3", "nrc:L1H2"}


def test_noise_gives_chance_auroc() -> None:
    X, y, groups = _data(300, signal=False, seed=3)
    cv = cross_validate(X, y, groups, feature_names=NAMES, seed=0, **GRID)
    assert 0.3 < cv.auroc < 0.7


def test_groups_never_split_across_folds(signal_cv) -> None:
    _, _, groups, cv = signal_cv
    assert (cv.fold >= 0).all() and np.isfinite(cv.oof).all()
    for g in np.unique(groups):
        assert np.unique(cv.fold[groups == g]).shape[0] == 1
    assert sorted(np.unique(cv.fold).tolist()) == list(range(5))


def test_fold_probe_is_fit_on_training_rows_only(signal_cv) -> None:
    X, y, groups, cv = signal_cv
    for k, probe in enumerate(cv.probes):
        train = cv.fold != k
        alone = GroundingProbe.fit(
            X[train], y[train], groups[train], feature_names=NAMES, seed=0, **GRID
        )
        np.testing.assert_array_equal(alone.selected, probe.selected)
        np.testing.assert_array_equal(alone.mean, probe.mean)
        np.testing.assert_array_equal(alone.coef, probe.coef)
        assert (alone.intercept, alone.C, alone.threshold) == (
            probe.intercept,
            probe.C,
            probe.threshold,
        )
        assert cv.folds[k].n_train == int(train.sum())
        test = ~train
        np.testing.assert_array_equal(cv.oof[test], alone.predict_proba(X[test]))


def test_feature_that_leaks_only_in_held_out_rows_does_not_help() -> None:
    # Column k equals the label (plus noise) in fold k's rows only, noise elsewhere: a probe
    # that saw held-out rows would score near 1; one that did not scores near chance.
    X, y, groups = _data(240, signal=False, seed=5)
    base = cross_validate(X, y, groups, feature_names=NAMES, seed=1, **GRID)
    leaky = X.copy()
    rng = np.random.default_rng(9)
    for k in range(5):
        rows = base.fold == k
        leaky[rows, k] = 4.0 * y[rows] + 0.1 * rng.normal(size=int(rows.sum()))
    cv = cross_validate(leaky, y, groups, feature_names=NAMES, seed=1, **GRID)
    np.testing.assert_array_equal(cv.fold, base.fold)  # splits depend on y, groups, seed only
    assert cv.auroc < 0.7
    assert roc_auc_score(y, leaky[:, :5].sum(axis=1)) > 0.8  # the leak itself is strong


def _oracle_inner_cv(
    X: np.ndarray, y: np.ndarray, groups: np.ndarray, m: int, C: float, seed: int
) -> tuple[np.ndarray, float]:
    """Inner out-of-fold probabilities and mean fold AUROC of one (m, C), spelled out."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedGroupKFold

    oof = np.full(y.shape[0], np.nan)
    aucs = []
    splitter = StratifiedGroupKFold(n_splits=3, shuffle=True, random_state=seed)
    for train, test in splitter.split(X, y, groups):
        strength = [abs(roc_auc_score(y[train], X[train, j]) - 0.5) for j in range(X.shape[1])]
        cols = np.argsort(-np.array(strength), kind="stable")[:m]
        mu, sd = X[train][:, cols].mean(axis=0), X[train][:, cols].std(axis=0)
        model = LogisticRegression(C=C, max_iter=10_000, class_weight="balanced")
        model.fit((X[train][:, cols] - mu) / sd, y[train])
        oof[test] = model.predict_proba((X[test][:, cols] - mu) / sd)[:, 1]
        aucs.append(roc_auc_score(y[test], oof[test]))
    return oof, float(np.mean(aucs))


def test_inner_cv_and_threshold_match_an_oracle() -> None:
    X, y, groups = _data(120, signal=False, seed=2)
    X[:, 5] += 0.8 * y  # a weak signal: the inner folds disagree on the top features
    oof, auc = _oracle_inner_cv(X, y, groups, m=3, C=0.5, seed=7)
    probe = GroundingProbe.fit(
        X, y, groups, feature_names=NAMES, max_features=(3,), Cs=(0.5,), seed=7
    )
    assert probe.inner_auroc == pytest.approx(auc, abs=1e-9)
    best = max(_balanced_accuracy(oof >= t, y) for t in np.unique(oof))
    assert _balanced_accuracy(oof >= probe.threshold, y) == pytest.approx(best)
    assert probe.threshold != 0.5


def test_grid_ties_go_to_fewer_features_then_smaller_C() -> None:
    # One feature separates with a huge margin: every (m, C) reaches inner AUROC 1.
    rng = np.random.default_rng(0)
    y = np.arange(60) % 2 == 0
    X = 0.01 * rng.normal(size=(60, 3))
    X[:, 1] += 10.0 * y
    probe = GroundingProbe.fit(
        X, y, np.arange(60) // 2, feature_names=["a", "b", "c"], max_features=(3, 1), Cs=(1.0, 0.1)
    )
    assert probe.selected.tolist() == [1]
    assert probe.C == 0.1
    assert probe.inner_auroc == 1.0


def test_stratification_falls_back_to_group_kfold() -> None:
    # Positives sit in only 2 groups: StratifiedGroupKFold(3) cannot stratify.
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 5)  # [40]
    y = np.isin(groups, (1, 4))
    X = rng.normal(size=(40, 4))
    X[:, 2] += 3.0 * y
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        probe = GroundingProbe.fit(X, y, groups, feature_names=list("abcd"), inner_splits=3)
    assert probe.selected[0] == 2
    folds = list(grouped_splits(y, groups, 3, 0))
    test_sets = [set(groups[test].tolist()) for _, test in folds]
    assert sorted(g for t in test_sets for g in t) == list(range(8))  # a partition of groups
    for train, test in folds:
        assert not set(groups[train].tolist()) & set(groups[test].tolist())


def test_shuffled_group_folds_partition_groups_and_depend_on_seed() -> None:
    group_ids = np.repeat(np.arange(12), np.arange(1, 13))  # groups of sizes 1..12
    assignments = []
    for seed in range(4):
        fold = np.full(group_ids.shape[0], -1)
        for k, (train, test) in enumerate(shuffled_group_folds(group_ids, 4, seed)):
            assert test.size > 0 and np.array_equal(np.sort(np.r_[train, test]), np.arange(78))
            fold[test] = k
        assert (fold >= 0).all()
        assert all(np.unique(fold[group_ids == g]).size == 1 for g in range(12))
        sizes = np.bincount(fold)
        assert sizes.max() - sizes.min() <= 12  # greedy balance: within one group's size
        assignments.append(tuple(fold[np.searchsorted(group_ids, np.arange(12))]))
    assert len(set(assignments)) > 1


# --------------------------------------------------------------------- probe numerics


def test_predict_proba_matches_numpy_formula(signal_cv) -> None:
    X, y, groups, _ = signal_cv
    probe = GroundingProbe.fit(X, y, groups, feature_names=NAMES, **GRID)
    sel = probe.selected
    z = ((X[:, sel] - probe.mean) / probe.scale) @ probe.coef + probe.intercept
    expected = 1 / (1 + np.exp(-z))
    p = probe.predict_proba(X)
    assert p.shape == (X.shape[0],) and p.dtype == np.float64
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(probe.predict(X), p >= probe.threshold)
    # standardisation comes from the data it was fit on
    np.testing.assert_allclose(probe.mean, X[:, sel].mean(axis=0))
    np.testing.assert_allclose(probe.scale, X[:, sel].std(axis=0))


def test_threshold_separates_separable_training_data() -> None:
    rng = np.random.default_rng(4)
    n = 80
    y = rng.random(n) < 0.3
    X = rng.normal(size=(n, 5))
    X[:, 0] = np.where(y, 3.0, -3.0) + 0.2 * rng.normal(size=n)
    probe = GroundingProbe.fit(
        X, y, np.arange(n) // 2, feature_names=list("abcde"), max_features=(1, 5), Cs=(1.0,)
    )
    assert _balanced_accuracy(probe.predict(X), y) == 1.0
    p = probe.predict_proba(X)
    assert p[~y].max() < probe.threshold <= p[y].min()


def test_best_threshold_hand_cases_and_brute_force() -> None:
    f, t = False, True
    assert decision_threshold(np.array([0.1, 0.4, 0.6, 0.9]), np.array([f, f, t, t])) == 0.5
    assert decision_threshold(np.array([0.1, 0.2, 0.3]), np.array([f, t, t])) == pytest.approx(0.15)
    assert decision_threshold(np.array([0.7, 0.7]), np.array([f, t])) == 0.5  # one value
    # balanced accuracy 0.75 at 0.2 and at 0.7: ties go to the smallest (the rule of
    # rcstat.metrics.best_threshold; the probe's own search took the one nearest 0.5, 0.7)
    p = np.array([0.1, 0.3, 0.6, 0.8])
    assert decision_threshold(p, np.array([f, t, f, t])) == pytest.approx(0.2)
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = rng.integers(0, 12, size=30) / 12.0  # ties included
        y = rng.random(30) < 0.4
        if y.all() or not y.any():
            continue
        chosen = _balanced_accuracy(p >= decision_threshold(p, y), y)
        brute = max(_balanced_accuracy(p >= c, y) for c in [*np.unique(p), math.inf])
        assert chosen == pytest.approx(brute)


# ---------------------------------------------------------------------- save / load


def test_save_load_round_trip_is_exact(signal_cv, tmp_path: Path) -> None:
    X, y, groups, _ = signal_cv
    probe = GroundingProbe.fit(
        X, y, groups, feature_names=NAMES, meta={"statistic": "nrc", "model": "tiny"}, **GRID
    )
    path = probe.save(tmp_path / "probe.json")
    raw = path.read_bytes()
    assert not raw.startswith(b"\x80")  # no pickle protocol header
    data = json.loads(raw.decode("utf-8"))
    assert data["format"] == "rcstat-probe-1"
    assert data["meta"] == {"statistic": "nrc", "model": "tiny"}
    loaded = GroundingProbe.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X), probe.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), probe.predict(X))
    assert loaded.threshold == probe.threshold and loaded.feature_names == NAMES
    assert loaded.selected.dtype == np.int64
    np.testing.assert_array_equal(
        GroundingProbe.from_dict(probe.to_dict()).predict_proba(X), probe.predict_proba(X)
    )


def test_save_and_load_refuse_other_files(signal_cv, tmp_path: Path) -> None:
    X, y, groups, _ = signal_cv
    probe = GroundingProbe.fit(X, y, groups, feature_names=NAMES, **GRID)
    with pytest.raises(ValueError, match=r"writes a \.json file, got 'probe\.pkl'"):
        probe.save(tmp_path / "probe.pkl")
    (tmp_path / "probe.pkl").write_bytes(b"\x80\x04.")
    with pytest.raises(ValueError, match=r"reads a \.json file"):
        GroundingProbe.load(tmp_path / "probe.pkl")
    (tmp_path / "other.json").write_text(json.dumps({"format": "rcstat-grounding-1"}))
    with pytest.raises(ValueError, match=r"not an rcstat probe \(format 'rcstat-grounding-1'"):
        GroundingProbe.load(tmp_path / "other.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"not an rcstat probe \(format 'list'"):
        GroundingProbe.load(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        GroundingProbe.load(tmp_path / "bad.json")
    broken = probe.to_dict()
    broken["coef"] = broken["coef"][:-1]
    with pytest.raises(ValueError, match="coef has"):
        GroundingProbe.from_dict(broken)


def test_cross_validation_frame_and_dict(signal_cv) -> None:
    X, y, groups, cv = signal_cv
    frame = cv.to_frame()
    assert list(frame.columns) == ["sample", "group", "fold", "y", "p", "predicted"]
    assert len(frame) == X.shape[0]
    thresholds = np.array([f.threshold for f in cv.folds])
    np.testing.assert_array_equal(cv.predicted, cv.oof >= thresholds[cv.fold])
    assert cv.auroc == pytest.approx(roc_auc_score(y, cv.oof))
    for f in cv.folds:
        test = cv.fold == f.fold
        assert f.auroc == pytest.approx(roc_auc_score(y[test], cv.oof[test]))
        assert f.n_test == int(test.sum()) and f.n_selected == cv.probes[f.fold].selected.size
    assert len(cv.folds_frame()) == 5
    data = json.loads(json.dumps(cv.to_dict()))
    assert data["samples"]["p"] == cv.oof.tolist() and len(data["probes"]) == 5
    # groups of any hashable type (tuples) are kept in the frame, written as str in JSON
    tuple_groups = [("doc", int(g)) for g in groups]
    cv2 = cross_validate(X, y, tuple_groups, feature_names=NAMES, seed=0, **GRID)
    np.testing.assert_array_equal(cv2.oof, cv.oof)
    assert cv2.to_frame()["group"][0] == ("doc", 0)
    assert json.loads(json.dumps(cv2.to_dict()))["samples"]["group"][0] == "('doc', 0)"


# ------------------------------------------------------------------------ validation


def _small() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X, y, groups = _data(40)
    return X, y, groups


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda X, y, g: (X[:, 0], y, g), r"X must be 2-D .* got shape \(40,\)"),
        (lambda X, y, g: (X[:-1], y, g), "same length, got 39, 40 and 40"),
        (lambda X, y, g: (X, y, g[:-2]), "same length, got 40, 40 and 38"),
        (lambda X, y, g: (_put(X, 5, 2, np.nan), y, g), r"non-finite value \(nan\) at row 5, col"),
        (lambda X, y, g: (_put(X, 7, 11, np.inf), y, g), r"\(inf\) at row 7, column 11"),
        (lambda X, y, g: (X, np.zeros_like(y), g), r"single class \(all False\)"),
        (lambda X, y, g: (X, np.ones_like(y), g), r"single class \(all True\)"),
        (lambda X, y, g: (X, np.full(y.shape, 2), g), "y must be bool"),
        (lambda X, y, g: (X, y, [[0]] * len(g)), r"groups\[0\] is not hashable"),
    ],
)
def test_bad_data_is_refused(change, match) -> None:
    X, y, g = change(*_small())
    with pytest.raises(ValueError, match=match):
        GroundingProbe.fit(X, y, g, feature_names=NAMES[: np.shape(X)[-1]], **GRID)
    with pytest.raises(ValueError, match=match):
        cross_validate(X, y, g, feature_names=NAMES[: np.shape(X)[-1]], **GRID)


def _put(X: np.ndarray, row: int, col: int, value: float) -> np.ndarray:
    X = X.copy()
    X[row, col] = value
    return X


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"feature_names": NAMES[:-1]}, "feature_names has 19 names, X has 20 columns"),
        ({"feature_names": ["a"] * 20}, "feature_names must be unique, 'a' repeats"),
        ({"feature_names": "abc"}, "one string"),
        ({"max_features": (8, 0)}, r"max_features entries must be integers >= 1 or None, got 0"),
        ({"max_features": (-3,)}, "got -3"),
        ({"max_features": ()}, "max_features is empty"),
        ({"Cs": (1.0, 0.0)}, r"Cs entries must be finite numbers > 0, got 0\.0"),
        ({"Cs": (-1.0,)}, r"got -1\.0"),
        ({"Cs": (math.nan,)}, "got nan"),
        ({"inner_splits": 1}, "inner_splits must be an integer >= 2"),
        ({"inner_splits": 11}, r"fewer groups \(10\) than inner_splits \(11\)"),
    ],
)
def test_bad_options_are_refused(options, match) -> None:
    X, y, g = _small()
    kwargs = {"feature_names": NAMES, **GRID, **options}
    with pytest.raises(ValueError, match=match):
        GroundingProbe.fit(X, y, g, **kwargs)


def test_cross_validate_checks_splits_and_options() -> None:
    X, y, g = _small()  # 10 groups
    with pytest.raises(ValueError, match=r"fewer groups \(10\) than n_splits \(12\)"):
        cross_validate(X, y, g, feature_names=NAMES, n_splits=12)
    with pytest.raises(ValueError, match="n_splits must be an integer >= 2"):
        cross_validate(X, y, g, feature_names=NAMES, n_splits=1)
    with pytest.raises(ValueError, match="unknown fit options: max_feature"):
        cross_validate(X, y, g, feature_names=NAMES, max_feature=(2,))
    with pytest.raises(ValueError, match="max_features entries must be integers >= 1"):
        cross_validate(X, y, g, feature_names=NAMES, max_features=(0,))


def test_inner_cv_that_cannot_score_is_refused() -> None:
    X, y, _ = _small()
    y = np.zeros(40, dtype=bool)
    y[:4] = True
    groups = np.repeat(np.arange(10), 4)  # all positives in group 0
    with pytest.raises(ValueError, match="could not score any fold"):
        GroundingProbe.fit(X, y, groups, feature_names=NAMES, **GRID)


def test_predict_checks_its_input(signal_cv) -> None:
    X, y, groups, _ = signal_cv
    probe = GroundingProbe.fit(X, y, groups, feature_names=NAMES, **GRID)
    with pytest.raises(ValueError, match="X has 19 columns, the probe was fit on 20 features"):
        probe.predict_proba(X[:, :-1])
    with pytest.raises(ValueError, match=r"reshape\(1, -1\)"):
        probe.predict_proba(X[0])
    with pytest.raises(ValueError, match=r"non-finite value \(nan\) at row 2, column 4"):
        probe.predict(_put(X, 2, 4, np.nan))
    swapped = [NAMES[1], NAMES[0], *NAMES[2:]]
    with pytest.raises(ValueError, match="feature_names differ from the probe's at column 0"):
        probe.predict_proba(X, feature_names=swapped)
    np.testing.assert_array_equal(
        probe.predict_proba(X, feature_names=NAMES), probe.predict_proba(X)
    )
