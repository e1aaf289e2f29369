"""Grouped folds for the probe: all samples of one group (source document) in one fold.

:func:`grouped_splits` stratifies by the label when it can (``StratifiedGroupKFold``) and
otherwise falls back to :func:`shuffled_group_folds`, a seeded group k-fold that does not
depend on the installed scikit-learn release.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["check_splits", "grouped_splits", "shuffled_group_folds"]


def grouped_splits(
    y: np.ndarray, group_ids: np.ndarray, n_splits: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Grouped folds: stratified when each class occurs in at least ``n_splits`` groups.

    ``StratifiedGroupKFold(n_splits, shuffle=True, random_state=seed)``; otherwise
    :func:`shuffled_group_folds` (``GroupKFold`` shuffles only from scikit-learn 1.6 on, and
    the results must not depend on the installed release).
    """
    from sklearn.model_selection import StratifiedGroupKFold

    pos_groups = np.unique(group_ids[y]).shape[0]
    neg_groups = np.unique(group_ids[~y]).shape[0]
    if min(pos_groups, neg_groups) < n_splits:
        yield from shuffled_group_folds(group_ids, n_splits, seed)
        return
    splitter = StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    dummy = np.zeros((y.shape[0], 1))
    for train, test in splitter.split(dummy, y, group_ids):
        yield np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)


def shuffled_group_folds(
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


def check_splits(n_splits: int, name: str, group_ids: np.ndarray) -> int:
    """``n_splits`` as an int when it is an integer >= 2 and at most the number of groups;
    ``ValueError`` naming ``name`` otherwise."""
    if isinstance(n_splits, bool) or not isinstance(n_splits, int | np.integer) or n_splits < 2:
        raise ValueError(f"{name} must be an integer >= 2, got {n_splits!r}")
    n_groups = int(np.unique(group_ids).shape[0])
    if n_groups < n_splits:
        raise ValueError(
            f"fewer groups ({n_groups}) than {name} ({n_splits}): every fold needs a group"
        )
    return int(n_splits)
