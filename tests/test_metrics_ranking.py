"""rcstat.metrics.ranking against independent oracles: AUROC by counting pairs (and scipy's
Mann–Whitney U), the column-batched AUROC against scikit-learn, average precision by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from scipy.stats import mannwhitneyu
from sklearn.metrics import roc_auc_score

from rcstat.metrics.ranking import auc_pr, auroc, auroc_columns, token_auroc
from tests._metrics_oracles import pairwise_auroc, scored_data, separated

# --------------------------------------------------------------------------------- AUROC


@settings(max_examples=150, deadline=None)
@given(scored_data())
def test_auroc_equals_pairwise_count(data: tuple[list[float], list[bool]]) -> None:
    scores, labels = data
    expected = float(pairwise_auroc(scores, labels))
    assert auroc(np.array(scores), np.array(labels)) == pytest.approx(expected, abs=1e-12)
    # 0/1 integer labels are the same labels
    assert auroc(np.array(scores), np.array(labels, dtype=int)) == pytest.approx(expected)
    # reversing the ranking reflects the area (ties stay ½)
    assert auroc(-np.array(scores), np.array(labels)) == pytest.approx(1 - expected)


def test_auroc_is_mann_whitney_u_over_pairs() -> None:
    scores, labels = separated()
    scores = np.round(scores, 1)  # ties
    u = mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert auroc(scores, labels) == pytest.approx(u / (labels.sum() * (~labels).sum()))


def test_auroc_by_hand() -> None:
    assert auroc(np.array([0.9, 0.4, 0.4, 0.1]), np.array([1, 1, 0, 0])) == 0.875
    assert auroc(np.array([1.0, 2.0]), np.array([False, True])) == 1.0
    assert auroc(np.array([1.0, 2.0]), np.array([True, False])) == 0.0
    assert auroc(np.array([5.0, 5.0, 5.0]), np.array([True, False, True])) == 0.5


# -------------------------------------------------------------------------------- AUC-PR


@pytest.mark.parametrize(
    ("scores", "labels", "expected"),
    [
        # ranked T F T F: precision 1 at recall ½, 2/3 at recall 1
        ([0.9, 0.8, 0.7, 0.6], [True, False, True, False], 0.5 * 1 + 0.5 * 2 / 3),
        # ranked F T F T T: precisions ½, 2/4, 3/5 at recalls ⅓, ⅔, 1
        ([0.9, 0.8, 0.7, 0.6, 0.5], [False, True, False, True, True], (0.5 + 0.5 + 0.6) / 3),
        # perfect ranking
        ([0.3, 0.2, 0.1], [True, True, False], 1.0),
        # all tied: one step, precision = positive rate
        ([0.5, 0.5, 0.5, 0.5], [True, False, False, False], 0.25),
        # a tie across classes at the top: precision ½ at recall ½, then ⅔ at recall 1
        ([0.9, 0.9, 0.1, 0.5], [True, False, False, True], 0.5 * 0.5 + 0.5 * 2 / 3),
    ],
)
def test_auc_pr_by_hand(scores: list[float], labels: list[bool], expected: float) -> None:
    assert auc_pr(np.array(scores), np.array(labels)) == pytest.approx(expected)


# ------------------------------------------------------------------------- token AUROC


def test_token_auroc_pools_tokens() -> None:
    token_scores = [np.array([0.9, 0.1, 0.2]), np.array([0.3]), np.array([0.6, 0.8])]
    token_labels = [np.array([1, 0, 0]), np.array([0]), np.array([False, True])]
    pooled = token_auroc(token_scores, token_labels)
    expected = pairwise_auroc([0.9, 0.1, 0.2, 0.3, 0.6, 0.8], [1, 0, 0, 0, 0, 1])
    assert pooled == pytest.approx(float(expected))
    # an example of one class is fine when the pool has both
    assert token_auroc([np.array([0.2]), np.array([0.9])], [np.array([0]), np.array([1])]) == 1.0


def test_token_auroc_errors() -> None:
    with pytest.raises(ValueError, match="token_scores has 2 examples but token_labels has 1"):
        token_auroc([np.zeros(2), np.zeros(1)], [np.array([0, 1])])
    with pytest.raises(ValueError, match="example 1: 3 token scores but 2 token labels"):
        token_auroc([np.zeros(2), np.zeros(3)], [np.array([0, 1]), np.array([0, 1])])
    with pytest.raises(ValueError, match=r"token_scores\[1\] has 1 non-finite .* index 2"):
        token_auroc([np.zeros(2), np.array([0.0, 1.0, np.nan])], [[0, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match=r"token_labels\[0\] must be booleans"):
        token_auroc([np.zeros(2)], [np.array([0.5, 1.0])])
    with pytest.raises(ValueError, match="AUROC needs both classes: all 3 labels are False"):
        token_auroc([np.zeros(2), np.zeros(1)], [np.array([0, 0]), np.array([0])])


# ---------------------------------------------------------------------- AUROC by column


@settings(max_examples=100, deadline=None)
@given(scored_data())
def test_auroc_columns_equals_pairwise_count(data: tuple[list[float], list[bool]]) -> None:
    scores, labels = data
    X = np.column_stack([scores, [-s for s in scores], [1.0] * len(scores)])  # [n, 3]
    expected = float(pairwise_auroc(scores, labels))
    got = auroc_columns(X, np.array(labels))
    assert got.shape == (3,) and got.dtype == np.float64
    assert got[0] == pytest.approx(expected, abs=1e-12)
    assert got[1] == pytest.approx(1 - expected, abs=1e-12)
    assert got[2] == 0.5  # a constant column ties every pair
    assert got[0] == pytest.approx(auroc(np.array(scores), np.array(labels)), abs=1e-15)


def test_univariate_auroc_matches_sklearn() -> None:
    rng = np.random.default_rng(1)
    X = rng.integers(0, 5, size=(50, 4)).astype(float)  # many ties
    y = rng.random(50) < 0.5
    expected = [roc_auc_score(y, X[:, j]) for j in range(4)]
    np.testing.assert_allclose(auroc_columns(X, y), expected, rtol=1e-12)


def test_auroc_columns_is_nan_for_one_class_and_checks_shapes() -> None:
    X = np.arange(6.0).reshape(3, 2)
    assert np.isnan(auroc_columns(X, [True, True, True])).all()
    assert np.isnan(auroc_columns(X, [0, 0, 0])).all()
    with pytest.raises(ValueError, match=r"X must be \[n, n_features\] and labels \[n\]"):
        auroc_columns(X, [True, False])
    with pytest.raises(ValueError, match=r"X must be \[n, n_features\]"):
        auroc_columns(np.arange(3.0), [True, False, True])
    with pytest.raises(ValueError, match=r"X has 1 non-finite .* index 3"):
        auroc_columns([[0.0, 1.0], [2.0, np.nan]], [True, False])
    with pytest.raises(ValueError, match="labels must be booleans"):
        auroc_columns(X, [0.5, 1.0, 0.0])
