"""The zero-shot grounding score and the same-pass baselines (docs/grounding.md).

Token score. For response token ``j`` let ``r_j`` be the mean, over the profile's contextual
heads ``H``, of the normalized RC of the query that writes it (:mod:`.features`): how much
that query reads the context rather than the response, in ``[0, 1]``. Let ``p_j`` be the
analysis model's probability of the token. The token's grounding score is

    ``g_j = p_j ** r_j = exp(-r_j · NLL_j)``  in ``(0, 1]``.

A token that the model writes while reading the context (``r_j`` near 1) is supported as far
as the model, reading that context, would have written it; a token written from the response
itself (``r_j`` near 0: function words, the continuation of a phrase) is not judged. A
hallucinated name or number is both looked up in the context and surprising there, so its
score falls; a low probability alone (a paraphrase, a word the model would not pick) costs
little unless the context was being read.

Aggregation. A sentence is as weak as its weakest part: its score is the lower ``q``-quantile
(default ``0.2``) of its token scores, so one unsupported name in a long sentence is not
averaged away. The response's score is its weakest sentence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from rcstat.checks import check_number
from rcstat.defaults import DEFAULT_GROUNDING_QUANTILE

__all__ = [
    "DEFAULT_QUANTILE",
    "SCORE_RANGE",
    "aggregate",
    "bigram_overlap",
    "check_threshold",
    "token_scores",
]

DEFAULT_QUANTILE = DEFAULT_GROUNDING_QUANTILE
#: The score's range: ``exp(-r·NLL)`` with ``r`` in [0, 1] and ``NLL >= 0``, so a threshold
#: outside it passes or flags everything.
SCORE_RANGE = (0.0, 1.0)
_WORD = re.compile(r"\w+", re.UNICODE)


def token_scores(rc: np.ndarray, nll: np.ndarray) -> np.ndarray:
    """``g_j = exp(-r_j · NLL_j)``.

    Parameters
    ----------
    rc
        ``[G]`` mean normalized RC over the chosen heads, in ``[0, 1]``.
    nll
        ``[G]`` negative log-likelihood of each token (nats, ``>= 0``).

    Returns
    -------
    np.ndarray
        ``[G]`` float64 in ``(0, 1]``.
    """
    rc, nll = np.asarray(rc, dtype=np.float64), np.asarray(nll, dtype=np.float64)
    if rc.shape != nll.shape or rc.ndim != 1:
        raise ValueError(f"rc and nll must be [G] of one shape, got {rc.shape} and {nll.shape}")
    return np.exp(-rc * nll)


def aggregate(scores: np.ndarray, quantile: float = DEFAULT_QUANTILE) -> float:
    """The lower ``quantile`` of ``scores`` (linear interpolation); NaN for no score."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return float("nan")
    return float(np.quantile(scores, quantile))


def bigram_overlap(response: str, context: str) -> float:
    """Share of the response's word bigrams (lower-cased ``\\w+`` words) that occur in the
    context; unigrams when the response has a single word; NaN when it has none."""
    said = [w.lower() for w in _WORD.findall(response)]
    source = [w.lower() for w in _WORD.findall(context)]
    if not said:
        return float("nan")
    n = 2 if len(said) > 1 else 1
    grams: Sequence[tuple[str, ...]] = list(zip(*(said[i:] for i in range(n)), strict=False))
    known = set(zip(*(source[i:] for i in range(n)), strict=False))
    return sum(g in known for g in grams) / len(grams)


def check_threshold(value: float | None, name: str = "--threshold") -> float | None:
    """A user's verdict threshold as a number in :data:`SCORE_RANGE` (None: the profile's);
    ``ValueError`` naming ``name`` and the range otherwise.

    >>> check_threshold(0.4), check_threshold(None)
    (0.4, None)
    """
    if value is None:
        return None
    low, high = SCORE_RANGE
    return check_number(name, value, low=low, high=high)
