"""Candidate context spans and answer units as character ranges (DESIGN.md §2.3).

Attribution compares *answer units* (sentences of the answer, or caller-given character
spans) with *candidate spans* of the context: retrieved chunks, sentences or single tokens.
This module works on text only — character offsets in the strings the caller gave; the
:class:`~rcstat.segments.Segmented` example maps them to token positions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CHUNK_SEPARATOR", "TextSpan", "join_chunks", "locate_spans", "split_sentences"]

#: Separator placed between chunks when a context is given as a list of passages.
CHUNK_SEPARATOR = "\n\n"

# A sentence ends at ., ! or ? (possibly followed by closing quotes/brackets) before
# whitespace, or at a blank line.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\n\s*\n")


@dataclass(frozen=True)
class TextSpan:
    """``text[start:end]`` of some string, kept with its offsets."""

    start: int
    end: int
    text: str


def split_sentences(text: str) -> list[TextSpan]:
    """Split ``text`` into sentences with character offsets, whitespace trimmed.

    A sentence ends after ``.``, ``!`` or ``?`` (and any closing quote or bracket) followed
    by whitespace, or at a blank line. Abbreviations such as "e.g. this" are split too: the
    rule is deliberately simple and documented rather than language-aware.

    >>> [s.text for s in split_sentences("It rains. Is it cold? Yes!  ")]
    ['It rains.', 'Is it cold?', 'Yes!']
    >>> split_sentences("One.")[0]
    TextSpan(start=0, end=4, text='One.')
    """
    spans: list[TextSpan] = []
    start = 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = len(text) if match is None else match.start()
        if match is not None and text[end : match.end()].strip():  # closing quote/bracket
            end += len(text[end : match.end()].rstrip())
        piece = text[start:end]
        lead = len(piece) - len(piece.lstrip())
        trimmed = piece.strip()
        if trimmed:
            spans.append(TextSpan(start + lead, start + lead + len(trimmed), trimmed))
        if match is not None:
            start = match.end()
    return spans


def join_chunks(chunks: Sequence[str]) -> tuple[str, list[TextSpan]]:
    """Join passages with :data:`CHUNK_SEPARATOR`; return the text and each chunk's span.

    Raises
    ------
    TypeError
        If ``chunks`` is a string or holds a non-string.
    ValueError
        If there is no chunk or a chunk is blank.
    """
    if isinstance(chunks, str):
        raise TypeError("chunks: expected a sequence of strings, got a single str")
    if len(chunks) == 0:
        raise ValueError("chunks: the context has no chunk")
    spans: list[TextSpan] = []
    position = 0
    for index, chunk in enumerate(chunks):
        if not isinstance(chunk, str):
            raise TypeError(f"chunk {index}: expected a str, got {type(chunk).__name__}")
        if not chunk.strip():
            raise ValueError(f"chunk {index} is empty")
        spans.append(TextSpan(position, position + len(chunk), chunk))
        position += len(chunk) + len(CHUNK_SEPARATOR)
    return CHUNK_SEPARATOR.join(chunks), spans


def locate_spans(
    text: str, spans: Sequence[str | tuple[int, int]], *, what: str = "span"
) -> list[TextSpan]:
    """Character spans of ``text`` given as substrings or as ``(start, end)`` offsets.

    Substrings are searched left to right, each from the end of the previous match (so a
    repeated phrase maps to successive occurrences), falling back to the first occurrence
    anywhere.

    Raises
    ------
    ValueError
        If there are no spans, a substring does not occur in ``text``, or offsets are out of
        range or empty.
    """
    if len(spans) == 0:
        raise ValueError(f"no {what}s given")
    located: list[TextSpan] = []
    cursor = 0
    for index, span in enumerate(spans):
        if isinstance(span, str):
            if not span.strip():
                raise ValueError(f"{what} {index} is an empty string")
            start = text.find(span, cursor)
            if start < 0:
                start = text.find(span)
            if start < 0:
                raise ValueError(f"{what} {index} does not occur in the text: {span[:60]!r}")
            end = start + len(span)
        else:
            start, end = (int(v) for v in span)
            if not 0 <= start < end <= len(text):
                raise ValueError(
                    f"{what} {index}: offsets [{start}, {end}) are empty or outside the text "
                    f"of {len(text)} characters"
                )
        located.append(TextSpan(start, end, text[start:end]))
        cursor = end
    return located
