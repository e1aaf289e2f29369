"""What the grounder's scoring reads of the texts alone, and its zero-shot word runs.

A verdict combines the pass's numbers with the response's words, each unit's words, the
context's lexicon (a detector's input) and the response's word overlaps with the context.
Those come from the texts alone, so :meth:`~rcstat.grounding.grounder.Grounder.ground` makes
them while the device runs the pass (:meth:`~rcstat.grounding.measure.Measurer.measure_batch`
``meanwhile``) instead of after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rcstat.attribution import TextSpan
from rcstat.grounding.detector_spans import consecutive_runs
from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.result import UnsupportedSpan
from rcstat.grounding.score import Word, response_words, text_overlaps

__all__ = ["ScoringTexts", "scoring_texts", "word_runs"]


@dataclass(frozen=True)
class ScoringTexts:
    """What scoring reads of the texts alone (:func:`scoring_texts`).

    Attributes
    ----------
    words
        The checked response's words (:func:`~rcstat.grounding.score.response_words`).
    inside
        Per response unit, the indices of its words.
    lexicon, marked
        The whole context's :class:`~rcstat.grounding.lexicon.Lexicon` and the checked
        response's words marked by it (a detector's input); None without a detector.
    overlaps
        :func:`~rcstat.grounding.score.text_overlaps` of the checked response and the
        context of a single pass; None: made with the scoring, from the chosen window's.
    """

    words: list[Word]
    inside: list[list[int]]
    lexicon: Lexicon | None
    marked: list[ResponseWord] | None
    overlaps: dict[str, float] | None


def scoring_texts(
    checked: str,
    spans: np.ndarray,
    units: list[TextSpan],
    context: str,
    *,
    lexicon: bool,
    overlaps: bool,
) -> ScoringTexts:
    """The :class:`ScoringTexts` of the ``checked`` response (its tokens' character
    ``spans`` ``[G, 2]`` and its ``units``) against the whole ``context``: its lexicon when
    ``lexicon`` (a detector scores), its overlaps when ``overlaps`` (one pass reads all of
    the context)."""
    words = response_words(checked, spans)
    inside = [[i for i, w in enumerate(words) if u.start <= w.start < u.end] for u in units]
    found = Lexicon(context) if lexicon else None
    return ScoringTexts(
        words,
        inside,
        found,
        None if found is None else found.words_of(checked),
        text_overlaps(checked, context) if overlaps else None,
    )


def word_runs(
    response: str, words: list[Word], scores: np.ndarray, threshold: float
) -> list[UnsupportedSpan]:
    """The runs of consecutive words scoring below ``threshold`` (the zero-shot spans), each
    with its lowest word score."""
    runs = consecutive_runs([k for k, value in enumerate(scores) if value < threshold])
    return [
        UnsupportedSpan(
            words[run[0]].start,
            words[run[-1]].end,
            response[words[run[0]].start : words[run[-1]].end],
            float(scores[run].min()),
        )
        for run in runs
    ]
