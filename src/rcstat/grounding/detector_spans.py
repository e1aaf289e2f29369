"""Where an unsupported response is unsupported: the spans a :class:`~.detector.Detector`
draws from its token probabilities ``p_j``, by the kind of the response.

* **Copied kind** (a response that quotes its context; one changed word must be found): runs of
  words whose *span value* reaches the threshold — a word's value is the largest ``p_j`` of
  its tokens (:func:`word_peaks`), or that peak averaged over the :data:`SPAN_RADIUS` words on
  either side when larger (:func:`span_values`) — merged across the spaces and punctuation
  between them, and kept when they hold a word the context does not hold
  (:func:`with_novel_words`: a run of known words is mostly a faithful paraphrase such as "was
  built" for "built it"). :func:`unsupported_spans`.
* **Other kind** (reworded answers, summaries, overviews of structured data): the *clauses*
  whose largest ``p_j`` reaches the threshold (:func:`clause_spans`). A clause runs to the next
  sentence end, comma, semicolon, colon (their CJK forms too) or line break; a period or comma
  between two digits ("3.5", "1,200") ends none. RAGTruth's labelled hallucinations of
  rewording are phrases and clauses (median 24 characters in overviews, 66 in summaries, 81 in
  answers), so a whole clause finds more of them than the words around a peak
  (docs/grounding.md, "Spans").

Either rule reports its likeliest unit when none reaches the threshold, so an unsupported
response always names a span (:func:`draw_spans`).
"""

from __future__ import annotations

import re

import numpy as np

from rcstat.attribution.spans import TextSpan
from rcstat.grounding.lexicon import ResponseWord

__all__ = [
    "KINDS",
    "SPAN_RADIUS",
    "check_kind",
    "clause_spans",
    "clauses",
    "consecutive_runs",
    "draw_spans",
    "span_values",
    "unit_values",
    "unsupported_spans",
    "with_novel_words",
    "word_peaks",
]

#: The kinds of response (:meth:`~.detector.Detector.kind_of`), each with its span rule.
KINDS = ("copied", "other")
#: Words on each side over which a word's token peak is averaged before the span threshold.
SPAN_RADIUS = 4
_WORD = re.compile(r"\w+")
_MARK = ".!?,;:。！？，、；："
#: A clause: characters up to a clause mark (a period or comma between digits is none), then
#: the marks that end it.
_CLAUSE = re.compile(rf"(?:[^{_MARK}\n]|(?<=\d)[.,](?=\d))+[{_MARK}]*")


def check_kind(kind: str) -> str:
    """``kind`` when it is one of :data:`KINDS`, else ``ValueError``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'copied' or 'other', got {kind!r}")
    return kind


def consecutive_runs(indices: list[int]) -> list[list[int]]:
    """Increasing ``indices`` grouped into runs of consecutive ones.

    >>> consecutive_runs([1, 2, 4, 6, 7, 8])
    [[1, 2], [4], [6, 7, 8]]
    """
    runs: list[list[int]] = []
    for k in indices:
        if runs and runs[-1][-1] == k - 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return runs


def word_peaks(response: str, offsets: np.ndarray, probability: np.ndarray) -> np.ndarray:
    """``[W, 3]``: each ``\\w+`` word's start, end and the largest probability of its tokens
    (``offsets`` ``[G, 2]``, ``probability`` ``[G]``)."""
    p = np.asarray(probability, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    rows = []
    for m in _WORD.finditer(response):
        hit = (offsets[:, 1] > m.start()) & (offsets[:, 0] < m.end())
        rows.append((m.start(), m.end(), float(p[hit].max()) if hit.any() else 0.0))
    return np.array(rows, dtype=np.float64).reshape(-1, 3)


def span_values(peaks: np.ndarray) -> np.ndarray:
    """``[W]``: each word's peak, or its mean over the words within :data:`SPAN_RADIUS` of it
    when larger (a span is a run of words around its likeliest tokens)."""
    values = peaks[:, 2]
    if values.size == 0:
        return values
    sums = np.concatenate([[0.0], np.cumsum(values)])
    at = np.arange(values.size)
    lo = np.maximum(at - SPAN_RADIUS, 0)
    hi = np.minimum(at + SPAN_RADIUS + 1, values.size)
    return np.maximum(values, (sums[hi] - sums[lo]) / (hi - lo))


def unsupported_spans(
    response: str, offsets: np.ndarray, probability: np.ndarray, threshold: float
) -> tuple[list[TextSpan], list[float]]:
    """The runs of words whose smoothed peak (:func:`span_values`) reaches ``threshold``
    (module notes), each with its largest token probability; the word of the largest
    smoothed peak when none reaches it.

    Parameters
    ----------
    response
        The response text.
    offsets
        ``[G, 2]`` character offsets of its tokens.
    probability
        ``[G]`` token probabilities.
    threshold
        The span threshold.

    >>> import numpy as np
    >>> text = "It opened in 1925 and closed in 1930 after the war ended there."
    >>> words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    >>> p = np.array([0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    >>> unsupported_spans(text, np.array(words), p, 0.5)
    ([TextSpan(start=13, end=17, text='1925')], [0.9])
    >>> unsupported_spans(text, np.array(words), p, 0.15)  # the words around it: 0.1 + 0.8 / 8
    ([TextSpan(start=0, end=36, text='It opened in 1925 and closed in 1930')], [0.9])
    """
    peaks = word_peaks(response, offsets, probability)  # [W, 3]
    if peaks.shape[0] == 0:
        return [], []
    smoothed = span_values(peaks)  # [W]
    chosen = np.flatnonzero(smoothed >= threshold).tolist()
    if not chosen:
        chosen = [int(np.argmax(smoothed))]
    runs = consecutive_runs(chosen)
    spans = []
    for run in runs:
        start, end = int(peaks[run[0], 0]), int(peaks[run[-1], 1])
        spans.append(TextSpan(start, end, response[start:end]))
    return spans, [float(peaks[run, 2].max()) for run in runs]


def with_novel_words(
    spans: list[TextSpan], peaks: list[float], words: list[ResponseWord]
) -> tuple[list[TextSpan], list[float]]:
    """The spans that hold a word the context does not hold (module notes); the span of the
    largest peak when none does, so an unsupported response keeps one span."""
    kept = [
        (span, peak)
        for span, peak in zip(spans, peaks, strict=True)
        if any(not w.known and span.start <= w.start and w.end <= span.end for w in words)
    ]
    if not kept and spans:
        best = int(np.argmax(peaks))
        kept = [(spans[best], peaks[best])]
    return [span for span, _ in kept], [peak for _, peak in kept]


def clauses(text: str) -> list[TextSpan]:
    """The clauses of ``text`` (module notes) that hold a word, without the white space
    around them.

    >>> [c.text for c in clauses("Rated 4.5 by 1,200 guests: quiet, clean.\\nOpen daily")]
    ['Rated 4.5 by 1,200 guests:', 'quiet,', 'clean.', 'Open daily']
    """
    found = []
    for m in _CLAUSE.finditer(text):
        if not _WORD.search(m.group()):
            continue
        start = m.start() + len(m.group()) - len(m.group().lstrip())
        end = m.end() - (len(m.group()) - len(m.group().rstrip()))
        found.append(TextSpan(start, end, text[start:end]))
    return found


def _clause_peaks(
    response: str, offsets: np.ndarray, probability: np.ndarray
) -> tuple[list[TextSpan], np.ndarray]:
    """The clauses of ``response`` that hold a token and each one's largest token
    probability ``[C]`` (``offsets`` ``[G, 2]``, ``probability`` ``[G]``)."""
    p = np.asarray(probability, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    units, peaks = [], []
    for unit in clauses(response):
        hit = (offsets[:, 1] > unit.start) & (offsets[:, 0] < unit.end)
        if hit.any():
            units.append(unit)
            peaks.append(float(p[hit].max()))
    return units, np.array(peaks, dtype=np.float64)


def clause_spans(
    response: str, offsets: np.ndarray, probability: np.ndarray, threshold: float
) -> tuple[list[TextSpan], list[float]]:
    """The clauses whose largest token probability reaches ``threshold`` (module notes), each
    with that probability; the clause of the largest one when none reaches it.

    >>> import numpy as np
    >>> text = "It has 12 rooms, a pool and a spa. Parking is free."
    >>> words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    >>> p = np.array([0.1, 0.1, 0.2, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3])
    >>> clause_spans(text, np.array(words), p, 0.5)
    ([TextSpan(start=17, end=34, text='a pool and a spa.')], [0.9])
    >>> clause_spans(text, np.array(words), p, 0.95)[0][0].text  # none reaches it: the likeliest
    'a pool and a spa.'
    """
    units, peaks = _clause_peaks(response, offsets, probability)
    if not units:
        return [], []
    chosen = np.flatnonzero(peaks >= threshold).tolist() or [int(np.argmax(peaks))]
    return [units[k] for k in chosen], [float(peaks[k]) for k in chosen]


def unit_values(
    kind: str, response: str, offsets: np.ndarray, probability: np.ndarray
) -> np.ndarray:
    """``[U]``: the values the span rule of ``kind`` compares with its threshold — each word's
    span value (copied kind) or each clause's largest token probability (other kind)."""
    if kind == "copied":
        return span_values(word_peaks(response, offsets, probability))
    return _clause_peaks(response, offsets, probability)[1]


def draw_spans(
    kind: str,
    response: str,
    offsets: np.ndarray,
    probability: np.ndarray,
    threshold: float,
    words: list[ResponseWord],
) -> tuple[list[TextSpan], list[float]]:
    """The unsupported spans of an unsupported response of ``kind`` (``"copied"`` or
    ``"other"``; module notes) at span ``threshold``, and each one's largest token
    probability (``offsets`` ``[G, 2]``, ``probability`` ``[G]``, ``words`` the response's
    words and their context matches)."""
    if check_kind(kind) == "copied":
        return with_novel_words(
            *unsupported_spans(response, offsets, probability, threshold), words
        )
    return clause_spans(response, offsets, probability, threshold)
