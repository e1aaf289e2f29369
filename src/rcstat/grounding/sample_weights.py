"""How much each training response and token weighs in a detector's fits.

Every fit of :mod:`.training` weighs a response (or a token) by its dataset's weight, set once
over all the samples of a training set: with dataset ``d`` holding ``n_d`` responses (or
``n_d`` tokens of span-labelled responses) and a relative weight ``extra_d`` (default 1),

    w_d = extra_d · mean_e(n_e) / n_d        (balanced: every dataset has the same total)
    w_d = extra_d                            (not balanced)

and each model is fitted with its training responses' (or tokens') weights scaled to a mean
of 1, so an L2 strength ``C`` means the same whatever the weights (the folds that choose ``C``
use their part of them). Balancing inside each fit instead would give the few
responses of a dataset that fall in one kind of response that dataset's whole weight.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["DatasetWeights"]


@dataclass(frozen=True)
class DatasetWeights:
    """Each dataset's weight per response and per token (module notes).

    Attributes
    ----------
    response, token
        ``w_d`` of each dataset, per response and per token of its span-labelled responses.
    """

    response: dict[str, float]
    token: dict[str, float]

    @classmethod
    def of(
        cls,
        datasets: Sequence[str],
        tokens: Sequence[int | None],
        *,
        balance: bool,
        extra: Mapping[str, float],
    ) -> DatasetWeights:
        """The weights of a training set whose response ``i`` comes from ``datasets[i]`` and
        has ``tokens[i]`` tokens (None: its spans are not labelled, it trains no token
        model); ``extra``: the relative weight of named datasets."""
        if len(datasets) != len(tokens):
            raise ValueError(f"{len(datasets)} datasets for {len(tokens)} token counts")
        responses: dict[str, int] = {}
        labelled: dict[str, int] = {}
        for dataset, count in zip(datasets, tokens, strict=True):
            responses[dataset] = responses.get(dataset, 0) + 1
            if count is not None:
                labelled[dataset] = labelled.get(dataset, 0) + count

        def per(sizes: dict[str, int]) -> dict[str, float]:
            mean = sum(sizes.values()) / len(sizes) if sizes else 1.0
            return {
                d: extra.get(d, 1.0) * (mean / n if balance and n else 1.0)
                for d, n in sizes.items()
            }

        return cls(per(responses), per(labelled))

    def of_responses(self, datasets: Sequence[str]) -> np.ndarray:
        """``[n]`` the weights of responses of these datasets, scaled to a mean of 1."""
        return _mean_one(np.array([self.response[d] for d in datasets], dtype=np.float64))

    def of_tokens(self, datasets: Sequence[str], counts: Sequence[int]) -> np.ndarray:
        """The weights of the tokens of responses of these datasets (``counts[i]`` tokens
        each, concatenated), scaled to a mean of 1."""
        return _mean_one(
            np.concatenate(
                [np.full(n, self.token[d]) for d, n in zip(datasets, counts, strict=True)]
            )
        )


def _mean_one(weights: np.ndarray) -> np.ndarray:
    if weights.size == 0:
        return weights
    return weights * (weights.size / weights.sum())
