"""Sentence splitting, chunk joining and span location (rcstat.attribution.spans)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcstat.attribution.spans import CHUNK_SEPARATOR, join_chunks, locate_spans, split_sentences

_TEXT = st.text(alphabet=st.sampled_from(list("ab .!?\n\"')")), max_size=60)


@given(_TEXT)
def test_sentences_are_ordered_trimmed_slices_covering_all_text(text: str) -> None:
    spans = split_sentences(text)
    covered = set()
    previous_end = 0
    for span in spans:
        assert span.text == text[span.start : span.end] == span.text.strip() != ""
        assert span.start >= previous_end
        previous_end = span.end
        covered.update(range(span.start, span.end))
    assert {i for i, c in enumerate(text) if not c.isspace()} <= covered


def test_sentence_rules_by_hand() -> None:
    text = 'He said "Stop." Then he left!\n\nNew part without end'
    assert [s.text for s in split_sentences(text)] == [
        'He said "Stop."',
        "Then he left!",
        "New part without end",
    ]
    assert split_sentences("3.14 is pi.")[0].text == "3.14 is pi."  # no space after the dot
    assert split_sentences("  \n ") == []


def test_join_chunks_offsets() -> None:
    text, spans = join_chunks(["alpha", "beta gamma", "delta"])
    assert text == CHUNK_SEPARATOR.join(["alpha", "beta gamma", "delta"])
    assert [text[s.start : s.end] for s in spans] == ["alpha", "beta gamma", "delta"]
    with pytest.raises(TypeError, match="single str"):
        join_chunks("alpha")
    with pytest.raises(TypeError, match="chunk 1: expected a str"):
        join_chunks(["a", 3])  # type: ignore[list-item]


def test_locate_spans_walks_repeated_phrases_left_to_right() -> None:
    text = "the cat and the cat and the dog"
    spans = locate_spans(text, ["the cat", "the cat", (28, 31)])
    assert [(s.start, s.end) for s in spans] == [(0, 7), (12, 19), (28, 31)]
    assert locate_spans(text, ["dog", "cat"])[1].start == 4  # falls back to the first match
    with pytest.raises(ValueError, match="no units given"):
        locate_spans(text, [], what="unit")
    with pytest.raises(ValueError, match="span 0 is an empty string"):
        locate_spans(text, [" "])
    with pytest.raises(ValueError, match=r"offsets \[5, 5\) are empty"):
        locate_spans(text, [(5, 5)])
