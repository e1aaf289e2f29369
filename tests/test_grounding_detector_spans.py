"""The detector's span rules (:mod:`rcstat.grounding.detector_spans`): word runs of the copied
kind and clauses of the other, each against a brute force under hypothesis and hand cases."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.grounding.detector_spans import (
    SPAN_RADIUS,
    clause_spans,
    clauses,
    draw_spans,
    span_values,
    unit_values,
    unsupported_spans,
    with_novel_words,
    word_peaks,
)
from rcstat.grounding.lexicon import Lexicon

_WORD = re.compile(r"\w+")
_MARKS = ".!?,;:。！？，、；："


# ------------------------------------------------------------------------- word runs


def _peaks_oracle(
    response: str, offsets: np.ndarray, p: np.ndarray
) -> list[tuple[int, int, float]]:
    out = []
    for m in _WORD.finditer(response):
        hits = [p[j] for j, (s, e) in enumerate(offsets) if s < m.end() and e > m.start()]
        out.append((m.start(), m.end(), max(hits) if hits else 0.0))
    return out


def _values_oracle(peaks: list[float]) -> list[float]:
    out = []
    for k, value in enumerate(peaks):
        near = peaks[max(0, k - SPAN_RADIUS) : k + SPAN_RADIUS + 1]
        out.append(max(value, sum(near) / len(near)))
    return out


def test_word_peaks_and_span_values_by_hand() -> None:
    text = "It was 1925."
    offsets = np.array([[0, 2], [2, 6], [6, 9], [9, 11], [11, 12]])  # " 19" "25" "."
    p = np.array([0.1, 0.2, 0.7, 0.9, 0.95])
    np.testing.assert_array_equal(
        word_peaks(text, offsets, p), [[0, 2, 0.1], [3, 6, 0.2], [7, 11, 0.9]]
    )
    # a word without a token peaks at 0; no word: no row
    assert word_peaks("ab cd", np.array([[0, 2]]), np.array([0.4]))[1, 2] == 0.0
    assert word_peaks("...", np.array([[0, 3]]), np.array([0.4])).shape == (0, 3)
    values = np.array([0.1, 0.2, 0.9])
    mean = values.mean()
    np.testing.assert_allclose(span_values(np.c_[np.zeros((3, 2)), values]), [mean, mean, 0.9])
    assert span_values(np.zeros((0, 3))).shape == (0,)


def test_unsupported_spans_docstring_case() -> None:
    text = "It opened in 1925 and closed in 1930 after the war ended there."
    words = np.array([(m.start(), m.end()) for m in _WORD.finditer(text)])
    p = np.full(13, 0.1)
    p[3] = 0.9
    spans, peaks = unsupported_spans(text, words, p, 0.5)
    assert [(s.start, s.end, s.text) for s in spans] == [(13, 17, "1925")] and peaks == [0.9]
    spans, peaks = unsupported_spans(text, words, p, 0.15)  # 0.1 + 0.8 / 9 within 4 words
    assert [s.text for s in spans] == ["It opened in 1925 and closed in 1930"] and peaks == [0.9]
    # none reaches the threshold: the single word of the largest value
    spans, peaks = unsupported_spans(text, words, p, 0.99)
    assert [s.text for s in spans] == ["1925"] and peaks == [0.9]
    assert unsupported_spans("?!", np.array([[0, 2]]), np.array([0.9]), 0.5) == ([], [])


_TOKEN_WORDS = st.lists(
    st.text(alphabet="abcxyz19", min_size=1, max_size=5), min_size=1, max_size=14
)


@settings(max_examples=100, deadline=None)
@given(words=_TOKEN_WORDS, data=st.data())
def test_unsupported_spans_cover_the_words_at_the_threshold(
    words: list[str], data: st.DataObject
) -> None:
    gaps = data.draw(st.lists(st.sampled_from([" ", ", ", ". ", " - ", "\n"]), min_size=len(words)))
    response = "".join(w + g for w, g in zip(words, gaps, strict=False))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(response) - 1), max_size=30))))
    bounds = [0, *cuts, len(response)]
    offsets = np.array(list(itertools.pairwise(bounds)))  # tokens tile the text
    p = np.array(data.draw(st.lists(st.floats(0, 1), min_size=len(offsets), max_size=len(offsets))))
    threshold = data.draw(st.floats(0, 1))
    spans, span_peaks = unsupported_spans(response, offsets, p, threshold)
    peaks = _peaks_oracle(response, offsets, p)
    found = word_peaks(response, offsets, p)
    assert found.tolist() == [list(map(float, row)) for row in peaks]
    values = span_values(found).tolist()  # ties decided as the detector decides them
    assert values == pytest.approx(_values_oracle([v for _, _, v in peaks]), abs=1e-12)
    starts = {s for s, _, _ in peaks}
    ends = {e for _, e, _ in peaks}
    assert spans and len(spans) == len(span_peaks)
    for span in spans:  # inside the response, on word boundaries, its own text
        assert 0 <= span.start < span.end <= len(response)
        assert span.start in starts and span.end in ends
        assert span.text == response[span.start : span.end]
    for a, b in itertools.pairwise(spans):  # in order, apart
        assert a.end < b.start
    covered = [any(s.start <= ws and we <= s.end for s in spans) for ws, we, _ in peaks]
    reached = [v >= threshold for v in values]
    if any(reached):
        assert covered == reached  # exactly the words whose value reaches the threshold
    else:  # exactly one span: the (first) word of the largest value
        k = int(np.argmax(values))
        assert [(s.start, s.end) for s in spans] == [peaks[k][:2]]
    for span, peak in zip(spans, span_peaks, strict=True):  # the largest token peak inside
        inside = [v for ws, we, v in peaks if span.start <= ws and we <= span.end]
        assert peak == max(inside)


# --------------------------------------------------------------------------------- clauses


def _clauses_oracle(text: str) -> list[tuple[int, int]]:
    """Clauses by a character walk: a clause ends after its run of marks (a period or comma
    between two digits is none) or before a line break; trimmed; those without a word left
    out."""

    def mark(i: int) -> bool:
        between_digits = (
            0 < i < len(text) - 1 and text[i - 1].isdecimal() and text[i + 1].isdecimal()
        )
        return text[i] in _MARKS and not (text[i] in ".," and between_digits)

    pieces, start, i = [], 0, 0
    while i < len(text):
        if text[i] == "\n":
            pieces.append((start, i))
            start = i = i + 1
        elif mark(i):
            while i < len(text) and mark(i):
                i += 1
            pieces.append((start, i))
            start = i
        else:
            i += 1
    pieces.append((start, len(text)))
    out = []
    for a, b in pieces:
        piece = text[a:b]
        if not _WORD.search(piece):
            continue
        a += len(piece) - len(piece.lstrip())
        b -= len(piece) - len(piece.rstrip())
        out.append((a, b))
    return out


def test_clauses_by_hand() -> None:
    text = "Rated 4.5 by 1,200 guests: quiet, clean.\nOpen daily (9-5); call us!"
    assert [c.text for c in clauses(text)] == [
        "Rated 4.5 by 1,200 guests:",
        "quiet,",
        "clean.",
        "Open daily (9-5);",
        "call us!",
    ]
    assert [c.text for c in clauses("它很安静，也很干净。价格是3.5元")] == [
        "它很安静，",
        "也很干净。",
        "价格是3.5元",
    ]
    assert clauses("...  !?\n") == [] and clauses("") == []
    for c in clauses(text):
        assert text[c.start : c.end] == c.text


_CLAUSE_TEXT = st.text(alphabet="ab 19.,;:!?\n。，、", max_size=40)


@settings(max_examples=300, deadline=None)
@given(text=_CLAUSE_TEXT)
def test_clauses_equal_a_character_walk(text: str) -> None:
    assert [(c.start, c.end) for c in clauses(text)] == _clauses_oracle(text)


@settings(max_examples=200, deadline=None)
@given(text=_CLAUSE_TEXT.filter(lambda t: _WORD.search(t) is not None), data=st.data())
def test_clause_spans_are_the_clauses_whose_largest_token_reaches_the_threshold(
    text: str, data: st.DataObject
) -> None:
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=20))))
    bounds = sorted({0, *[c for c in cuts if c < len(text)], len(text)})
    offsets = np.array(list(itertools.pairwise(bounds)))  # tokens tile the text
    p = np.array(data.draw(st.lists(st.floats(0, 1), min_size=len(offsets), max_size=len(offsets))))
    threshold = data.draw(st.floats(0, 1))
    spans, peaks = clause_spans(text, offsets, p, threshold)
    units = _clauses_oracle(text)
    values = [max(p[j] for j, (s, e) in enumerate(offsets) if s < b and e > a) for a, b in units]
    want = [k for k, v in enumerate(values) if v >= threshold] or [int(np.argmax(values))]
    assert [(s.start, s.end) for s in spans] == [units[k] for k in want]
    assert peaks == [values[k] for k in want]
    assert unit_values("other", text, offsets, p).tolist() == values


def test_clause_spans_of_a_text_without_a_word() -> None:
    assert clause_spans("?!", np.array([[0, 2]]), np.array([0.9]), 0.5) == ([], [])


# ------------------------------------------------------------------------------ by kind


def test_draw_spans_takes_the_rule_of_the_kind() -> None:
    context = "The hotel has 12 rooms and a pool."
    text = "The hotel has 14 rooms, a pool and a spa."
    offsets = np.array([(m.start(), m.end()) for m in _WORD.finditer(text)])
    p = np.array([0.1, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.6])
    words = Lexicon(context).words_of(text)
    copied = draw_spans("copied", text, offsets, p, 0.5, words)
    assert copied == with_novel_words(*unsupported_spans(text, offsets, p, 0.5), words)
    assert [s.text for s in copied[0]] == ["14", "spa"]
    other = draw_spans("other", text, offsets, p, 0.5, words)
    assert other == clause_spans(text, offsets, p, 0.5)
    assert [s.text for s in other[0]] == ["The hotel has 14 rooms,", "a pool and a spa."]
    np.testing.assert_array_equal(
        unit_values("copied", text, offsets, p), span_values(word_peaks(text, offsets, p))
    )
    with pytest.raises(ValueError, match="kind must be 'copied' or 'other'"):
        draw_spans("quoted", text, offsets, p, 0.5, words)
