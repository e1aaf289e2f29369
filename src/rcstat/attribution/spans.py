"""Candidate context spans and answer units as character ranges.

Attribution compares *answer units* (sentences of the answer, or caller-given character
spans) with *candidate spans* of the context: retrieved chunks, sentences or single tokens.
This module works on text only — character offsets in the strings the caller gave; the
:class:`~rcstat.segments.Segmented` example maps them to token positions.

Sentences
---------
:func:`split_sentences` delegates the sentence boundaries to `sentencex
<https://github.com/wikimedia/sentencex>`_ (Wikimedia, MIT licence), a rule-based segmenter
written in Rust with wheels for Linux, macOS and Windows, no Python dependencies and no model
to download. It was chosen over pysbd, blingfire and syntok because it is the one of them
still released, because its sentence-ending marks are shared by every language — ``。！？``,
``؟``, ``।``, ``۔`` end a sentence even with the default English rules, so Japanese, Chinese,
Arabic, Hebrew and mixed-script text split without knowing the language — and because it
errs on the side of not splitting: abbreviations ("Dr. Smith", "e.g. apples", "U.S."),
decimals ("3.5") and a closing quote after a full stop stay inside their sentence. Its
segments are *non-destructive* (they concatenate to the input), so character offsets into
the caller's string are exact; this module only cuts at blank lines first (a paragraph never
runs on into the next, whatever the library does with ``"\\n \\n"``) and trims whitespace.

One rule is added to the library's: a CJK full stop, exclamation or question mark (``。！？``
and the half-width ``｡``) ends a sentence whatever follows it, with the closing quotes and
brackets right after it. CJK text puts no space between sentences, and sentencex keeps
"…建てられました。1962年に…" together when the next sentence starts with a digit or a Latin
letter.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

import sentencex

from rcstat.defaults import DEFAULT_LANGUAGE

__all__ = [
    "CHUNK_SEPARATOR",
    "TextSpan",
    "join_chunks",
    "locate_spans",
    "split_sentences",
]

#: Separator placed between chunks when a context is given as a list of passages.
CHUNK_SEPARATOR = "\n\n"

#: Language code :func:`split_sentences` uses when none is given.

# A blank line (only whitespace between two line breaks) always ends a sentence.
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")

#: Whitespace outside ASCII (no-break, thin, ideographic spaces...), which sentencex is given
#: as a space (``_sentence_ends``).
_SPACE = re.compile(r"[^\S\x00-\x7f]")
# A CJK sentence end: its marks (full-width, and the half-width full stop), then the closing
# quotes and brackets that belong to the sentence. It ends a sentence before any character.
_CJK_END = re.compile("[。！？｡]+[」』”’\"'）)】〕〉》］]*")


@dataclass(frozen=True)
class TextSpan:
    """``text[start:end]`` of some string, kept with its offsets."""

    start: int
    end: int
    text: str


def split_sentences(text: str, *, language: str = DEFAULT_LANGUAGE) -> list[TextSpan]:
    """Split ``text`` into sentences with character offsets, whitespace trimmed.

    Parameters
    ----------
    text : str
        Any text, in any script; may be empty.
    language : str, default ``"en"``
        Language code (ISO 639, e.g. ``"ja"``, ``"zh"``, ``"ar"``, ``"he"``, ``"de"``). It only
        picks the abbreviation list and language-specific rules of the segmenter: the
        sentence-ending marks of all scripts (``. ! ? 。 ！ ？ ؟ । ۔`` …) are recognised whatever
        the language, so the default splits CJK and right-to-left text too. A code the
        segmenter does not know falls back to a related language, else to English.

    Returns
    -------
    list of TextSpan
        In text order, non-overlapping, each ``text[start:end]`` with no leading or trailing
        whitespace; together they cover every non-whitespace character of ``text``.

    Raises
    ------
    TypeError
        If ``text`` or ``language`` is not a ``str``.
    ValueError
        If ``language`` is empty or ``text`` is not valid Unicode (a lone surrogate).

    Notes
    -----
    A blank line always ends a sentence. Inside a paragraph the boundaries are sentencex's
    (see the module docstring): a terminator followed by a new sentence ends one, while
    abbreviations, decimals and closing quotes do not. When it is unsure the segmenter keeps
    text together rather than cut a sentence in two. A CJK mark ``。！？｡`` (with the closing
    quotes and brackets after it) ends a sentence before any character, in every language.

    Examples
    --------
    >>> [s.text for s in split_sentences("It rains. Is it cold? Yes!  ")]
    ['It rains.', 'Is it cold?', 'Yes!']
    >>> split_sentences("One.")[0]
    TextSpan(start=0, end=4, text='One.')
    >>> [s.text for s in split_sentences("Dr. Smith paid 3.5 million. He left.")]
    ['Dr. Smith paid 3.5 million.', 'He left.']
    >>> [s.text for s in split_sentences("今日は晴れです。明日は雨ですか？")]
    ['今日は晴れです。', '明日は雨ですか？']
    >>> [s.text for s in split_sentences("塔は1958年に建った。1962年に開いた。", language="ja")]
    ['塔は1958年に建った。', '1962年に開いた。']
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    if not isinstance(language, str):
        raise TypeError(f"language: expected a str, got {type(language).__name__}")
    if not language.strip():
        raise ValueError("language: is empty (give a language code such as 'en' or 'ja')")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"text: character {error.start} is a lone surrogate, not valid Unicode text"
        ) from None
    cuts = [0]
    paragraph_start = 0
    for match in [*_PARAGRAPH_BREAK.finditer(text), None]:
        paragraph_end = len(text) if match is None else match.start()
        cuts.extend(_sentence_ends(text, paragraph_start, paragraph_end, language.strip()))
        if match is not None:
            cuts.append(match.end())
            paragraph_start = match.end()
    cuts.append(len(text))
    spans: list[TextSpan] = []
    for start, end in itertools.pairwise(cuts):
        piece = text[start:end]
        trimmed = piece.strip()
        if trimmed:
            lead = len(piece) - len(piece.lstrip())
            spans.append(TextSpan(start + lead, start + lead + len(trimmed), trimmed))
    return spans


def _sentence_ends(text: str, start: int, end: int, language: str) -> list[int]:
    """Offsets in ``text``, in order, where a sentence ends inside ``text[start:end]``.

    sentencex's segments are located in the paragraph one after the other (they are
    consecutive slices of it), so every offset is exact; a segment that cannot be found (a
    library that altered its output) contributes no cut, and the text stays covered. The end
    of every CJK mark (:data:`_CJK_END`) is a cut too.

    sentencex reads every whitespace character outside ASCII as a space (:data:`_SPACE`): its
    Rust code panics on such a multi-byte space after an initial's period (``A.Z``, a no-break
    space, ``.Z``), and one character for one keeps every offset.
    """
    paragraph = _SPACE.sub(" ", text[start:end])
    ends: list[int] = []
    cursor = 0
    for segment in sentencex.segment(language, paragraph):
        found = paragraph.find(segment, cursor)
        if found < 0 or not segment:
            continue
        cursor = found + len(segment)
        ends.append(start + cursor)
    ends.extend(start + match.end() for match in _CJK_END.finditer(paragraph))
    return sorted(set(ends))


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
