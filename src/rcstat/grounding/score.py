"""The zero-shot grounding score and the same-pass baselines (docs/grounding.md).

Words. The response is judged word by word (``\\w+`` runs of its text; a word's tokens are
the response tokens that overlap it), because a changed fact is a word — "1925" for "1889" —
that a tokenizer may cut into several tokens, and a word that is right in every token but one
is still wrong. Punctuation and spaces are not judged.

Word score. For word ``w`` with tokens ``T_w``:

* ``copy_w = min(1, mean_{j ∈ T_w} Σ_{h ∈ C} a_{h,j})``, where ``a_{h,j}`` is the attention of
  copy head ``h`` — from the row that writes token ``j`` — on the context keys that hold the
  same word (:mod:`.features`), and ``C`` the profile's copy heads: the heads that attend most to
  the source of the words the model copies into its own answers (no hallucination label);
* ``NLL_w = Σ_{j ∈ T_w} NLL_j``, the analysis model's surprise at the word with the context in
  front of it;

    ``s_w = max(copy_w, exp(−NLL_w))``  in ``[0, 1]``.

A word is supported when the model copies it from the context or, reading the context, expects
it (function words, a paraphrase, the rest of a name it has started); a changed name or number
is neither found in the context nor expected after it, so both terms fall.

Aggregation. A sentence is as weak as its weakest word, a response as its weakest sentence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rcstat.checks import check_number
from rcstat.defaults import DEFAULT_GROUNDING_QUANTILE

__all__ = [
    "DEFAULT_QUANTILE",
    "SCORE_RANGE",
    "Word",
    "aggregate",
    "baselines",
    "bigram_overlap",
    "check_threshold",
    "joined_ranges",
    "lower_quantiles",
    "overlapping_tokens",
    "response_words",
    "sorted_quantiles",
    "text_overlaps",
    "token_scores",
    "unigram_overlap",
    "word_scores",
]

DEFAULT_QUANTILE = DEFAULT_GROUNDING_QUANTILE
#: The score's range (``copy_w`` and ``exp(−NLL_w)`` both lie in it), so a threshold outside it
#: passes or flags everything.
SCORE_RANGE = (0.0, 1.0)
_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Word:
    """A word of the response: ``response[start:end]`` and its tokens ``[first, last)``."""

    start: int
    end: int
    first: int
    last: int


def response_words(response: str, token_spans: np.ndarray) -> list[Word]:
    """The ``\\w+`` words of ``response`` with the tokens that overlap each (``token_spans``
    ``[G, 2]``: character offsets of the tokens in ``response``), in text order.

    >>> response_words("It is 330 m.", np.array([[0, 2], [2, 5], [5, 7], [7, 8], [8, 9],
    ...     [9, 11], [11, 12]]))[2]
    Word(start=6, end=9, first=2, last=5)
    """
    spans = np.asarray(token_spans, dtype=np.int64).reshape(-1, 2)
    found = [(m.start(), m.end()) for m in _WORD.finditer(response)]
    bounds = np.array(found, dtype=np.int64).reshape(-1, 2)  # [W, 2]
    if not len(spans) or not found:
        return []
    if np.all(np.diff(spans, axis=0) >= 0):  # in text order: searched
        first, last = overlapping_tokens(spans, bounds)
    else:
        overlap = (spans[:, 0] < bounds[:, 1:]) & (spans[:, 1] > bounds[:, :1])  # [W, G]
        some = overlap.any(1)
        first = np.where(some, overlap.argmax(1), 0)
        last = np.where(some, len(spans) - overlap[:, ::-1].argmax(1), 0)
    return [
        Word(start, end, a, b)
        for (start, end), a, b in zip(found, first.tolist(), last.tolist(), strict=True)
        if b > a
    ]


def overlapping_tokens(spans: np.ndarray, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``first, last`` (``[W]`` int64 each): the tokens ``[first, last)`` that overlap each
    word, for tokens in text order (``spans`` ``[G, 2]`` character offsets whose starts and
    ends never decrease) and words ``[W, 2]`` (start, end); ``last <= first`` when none does.

    >>> overlapping_tokens(np.array([[0, 2], [2, 5], [5, 7]]), np.array([[3, 6], [7, 9]]))
    (array([1, 3]), array([3, 3]))
    """
    first = np.searchsorted(spans[:, 1], words[:, 0], side="right")  # ends > word start
    last = np.searchsorted(spans[:, 0], words[:, 1], side="left")  # starts < word end
    return first, last


def word_scores(nll: np.ndarray, copy: np.ndarray, words: Sequence[Word]) -> np.ndarray:
    """``s_w = max(copy_w, exp(−NLL_w))`` for every word (see the module notes).

    Parameters
    ----------
    nll
        ``[G]`` token NLL with the context (nats, ``>= 0``).
    copy
        ``[G]`` attention of the copy heads, summed over them, on the context keys holding the
        token's word (``>= 0``).
    words
        From :func:`response_words`.

    Returns
    -------
    np.ndarray
        ``[W]`` float64 in ``[0, 1]``.

    >>> words = [Word(0, 4, 0, 2), Word(5, 9, 2, 3)]
    >>> word_scores(np.array([0.5, 0.5, 9.0]), np.array([0.2, 0.4, 0.0]), words).round(3)
    array([0.368, 0.   ])
    """
    nll, copy = np.asarray(nll, dtype=np.float64), np.asarray(copy, dtype=np.float64)
    if nll.shape != copy.shape or nll.ndim != 1:
        raise ValueError(f"nll and copy must be [G] of one shape, got {nll.shape}, {copy.shape}")
    first = np.fromiter((w.first for w in words), dtype=np.int64, count=len(words))  # [W]
    count = np.fromiter((w.last for w in words), dtype=np.int64, count=len(words)) - first
    if np.any(count < 1) or np.any(first < 0) or np.any(first + count > len(nll)):
        raise ValueError(f"every word needs tokens [first, last) among the {len(nll)} tokens")
    if not len(words):
        return np.zeros(0, dtype=np.float64)
    # each word's tokens side by side, summed a word at a time (one pass, no loop)
    tokens, at = joined_ranges(first, count), np.cumsum(count) - count  # [Σ count], [W]
    copied = np.add.reduceat(copy[tokens], at) / count
    said = np.add.reduceat(nll[tokens], at)
    return np.array(
        [
            max(min(1.0, c), math.exp(-s))
            for c, s in zip(copied.tolist(), said.tolist(), strict=True)
        ]
    )


def joined_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``[Σ counts]`` int64: ``starts[i], …, starts[i] + counts[i] − 1`` for each ``i``, in
    order (the ranges joined without a Python loop).

    >>> joined_ranges(np.array([5, 0]), np.array([2, 3]))
    array([5, 6, 0, 1, 2])
    """
    return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())


def token_scores(rc: np.ndarray, nll: np.ndarray) -> np.ndarray:
    """``g_j = exp(-r_j · NLL_j)``: the token score of rcstat before words (kept as a variant
    of the benchmark, ``exp_rc_nll``).

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


def lower_quantiles(values: np.ndarray, quantile: float = DEFAULT_QUANTILE) -> np.ndarray:
    """The ``quantile`` of ``values`` over its last axis by linear interpolation between the
    sorted values at ``floor(p)`` and ``floor(p) + 1``, ``p = (n − 1) · quantile`` (Hyndman
    and Fan's method 7, numpy's default), NaN where a row holds a NaN, from one sort along the
    axis where ``np.quantile`` partitions row by row (about ten times the time for the
    ``[3, 32, 32, 256]`` features of an 8B model).

    >>> lower_quantiles(np.array([[4.0, 1.0, 3.0, 2.0], [1.0, np.nan, 2.0, 3.0]]), 0.5)
    array([2.5, nan])
    """
    out = np.asarray(sorted_quantiles(np.sort(values, axis=-1), quantile))
    out[np.isnan(values).any(axis=-1)] = np.nan
    return out


def sorted_quantiles(ordered: Any, quantile: float) -> Any:
    """The ``quantile`` of each row of ``ordered`` (a numpy array or a torch tensor sorted
    along its last axis, ``n ≥ 1`` values a row) by :func:`lower_quantiles`' interpolation.

    The position ``p = (n − 1) · quantile`` and its weight are Python floats (float64) and the
    interpolation runs in the values' float type from the nearer end, ``v_hi − (v_hi − v_lo) ·
    (1 − w)`` or ``v_lo + (v_hi − v_lo) · w``, the weight rounded to that type (numpy and torch
    both cast a Python float to an array's float type), as ``np.quantile`` computes it from
    numpy 2.4 on; so numpy and torch, on any device, agree bit for bit (numpy before 2.4
    computed a float32 array's position in float32, which moves the result by rounding).

    >>> sorted_quantiles(np.array([[1.0, 2.0, 3.0, 4.0]]), 0.1)
    array([1.3])
    """
    count = ordered.shape[-1]
    at = (count - 1) * float(quantile)
    low = math.floor(at)
    high = min(low + 1, count - 1)
    weight = at - low
    below, above = ordered[..., low], ordered[..., high]
    step = above - below
    if weight >= 0.5:
        return above - step * (1.0 - weight)
    return below + step * weight


def unigram_overlap(response: str, context: str) -> float:
    """Share of the response's words (lower-cased ``\\w+``) that occur in the context; NaN
    when it has none (the word-count baseline of RAGTruth studies).

    >>> unigram_overlap("The tower is 330 m tall.", "The tower is 330 metres high.")
    0.6666666666666666
    """
    return _overlap(response, context, 1)


def bigram_overlap(response: str, context: str) -> float:
    """Share of the response's word bigrams (lower-cased ``\\w+`` words) that occur in the
    context; unigrams when the response has a single word; NaN when it has none."""
    return _overlap(response, context, 2)


def _overlap(response: str, context: str, n: int) -> float:
    said = [w.lower() for w in _WORD.findall(response)]
    source = [w.lower() for w in _WORD.findall(context)]
    if not said:
        return float("nan")
    n = n if len(said) > 1 else 1
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


class _SamePass(Protocol):
    """What :func:`baselines` reads of a pass (a
    :class:`~rcstat.grounding.measurement.Measurement`)."""

    features: np.ndarray  # [3, L, H, G]: rc, lookback, log weight on the own key
    nll: np.ndarray  # [G]


def baselines(
    measured: _SamePass,
    response: str,
    context: str,
    overlaps: dict[str, float] | None = None,
) -> dict[str, float]:
    """Response-level baselines from the same pass, each oriented so that higher means more
    supported as its authors use it: the Lookback Lens ratio (mean over heads and tokens),
    LLM-Check's attention score (mean log-diagonal), minus the mean token NLL, and the share
    of response bigrams (``overlap``) and words (``unigram_overlap``) found in the context
    (:func:`text_overlaps`; ``overlaps``: those of ``response`` and ``context``, already
    made)."""
    return {
        "lookback": float(measured.features[1].mean()),
        "attention_score": float(measured.features[2].mean()),
        "neg_nll": float(-measured.nll.mean()),
        **(text_overlaps(response, context) if overlaps is None else overlaps),
    }


def text_overlaps(response: str, context: str) -> dict[str, float]:
    """The baselines of :func:`baselines` that read the texts alone: ``overlap``
    (:func:`bigram_overlap`) and ``unigram_overlap``."""
    return {
        "overlap": bigram_overlap(response, context),
        "unigram_overlap": unigram_overlap(response, context),
    }
