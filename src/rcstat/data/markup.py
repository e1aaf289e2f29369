"""The span markup ``[ k text ]`` of QuoteSum and VERI-GRAN (SEMQA format).

:func:`parse_span_markup` removes the markers exactly like the upstream scorer's
``strip_attribution_tokens`` (``re.sub(r'\\[ (\\d) ([^\\[\\]]*) \\]', r'\\2', t)``) and returns
the character offsets of every span in the cleaned text, or raises :class:`MarkupError` on
unbalanced or malformed markers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rcstat.data.records import Where

__all__ = ["MarkedSpan", "MarkupError", "parse_record_markup", "parse_span_markup"]


class MarkupError(ValueError):
    """Span markup ``[ k text ]`` that cannot be parsed.

    Parameters
    ----------
    message : str
        The problem.
    position : int
        Character offset of the offending marker in the marked-up text.
    """

    def __init__(self, message: str, position: int) -> None:
        self.position = position
        super().__init__(f"{message} (at character {position})")


@dataclass(frozen=True)
class MarkedSpan:
    """A span found by :func:`parse_span_markup`.

    Parameters
    ----------
    start, end : int
        ``[start, end)`` character offsets in the cleaned text.
    label : int
        The number ``k`` written in the opening marker ``[ k``.
    """

    start: int
    end: int
    label: int


_OPENER = re.compile(r"\[ (\d+) ")
_LOOKS_LIKE_OPENER = re.compile(r"\[\s*\d")
_BRACKET = re.compile(r"[\[\]]")


def parse_span_markup(
    text: str, *, strip_whitespace: bool = True
) -> tuple[str, tuple[MarkedSpan, ...]]:
    """Remove ``[ k text ]`` span markers and return the clean text and the spans.

    Parameters
    ----------
    text : str
        Text with spans marked as ``"[ " + k + " " + span + " ]"`` (QuoteSum / SEMQA markup,
        also used by VERI-GRAN): one space after ``[``, the decimal label ``k``, one space,
        the span text, one space, ``]``.
    strip_whitespace : bool, default True
        Shrink each span's offsets to exclude leading/trailing whitespace of its text (the
        clean text itself is unchanged). With ``False`` a span covers exactly the characters
        between the markers.

    Returns
    -------
    clean : str
        `text` with the markers removed — identical to the upstream scorer's
        ``strip_attribution_tokens`` (QuoteSum ``evals/scorers.py``).
    spans : tuple of MarkedSpan
        The spans in text order, with offsets into `clean`.

    Raises
    ------
    MarkupError
        On a malformed opening marker (e.g. ``[2 text ]``), a nested ``[`` inside a span, a
        closing ``]`` not preceded by a space, an unmatched ``]``, a span left open, or an
        empty span.

    Notes
    -----
    Outside spans, a literal bracket pair whose content does not start with a digit (e.g.
    ``[sic]``) is kept as text; any ``[`` followed by optional spaces and a digit must be a
    well-formed opener.

    Examples
    --------
    >>> clean, spans = parse_span_markup("[ 2 Denitrification ] releases nitrogen gas.")
    >>> clean
    'Denitrification releases nitrogen gas.'
    >>> spans
    (MarkedSpan(start=0, end=15, label=2),)
    >>> parse_span_markup("geometry[ 1  is a branch. ] The end.")[0]
    'geometry is a branch. The end.'
    """
    pieces: list[str] = []
    spans: list[MarkedSpan] = []
    clean_len = 0  # length of "".join(pieces)
    pos = 0  # next unread character of `text`
    open_at: int | None = None  # offset of the current span's opener in `text`
    open_label = 0
    span_start = 0  # offset in the clean text where the current span starts
    literal_depth = 0  # literal "[" ... "]" pairs open outside spans

    for match in _BRACKET.finditer(text):
        i = match.start()
        if text[i] == "[":
            if open_at is not None:
                raise MarkupError(f"'[' inside the span opened at character {open_at}", i)
            opener = _OPENER.match(text, i)
            if opener is None:
                if _LOOKS_LIKE_OPENER.match(text, i):
                    raise MarkupError("malformed opening marker, expected '[ k '", i)
                literal_depth += 1
                continue
            pieces.append(text[pos:i])
            clean_len += i - pos
            pos = opener.end()
            open_at, open_label, span_start = i, int(opener.group(1)), clean_len
        else:  # "]"
            if open_at is None:
                if literal_depth == 0:
                    raise MarkupError("unmatched ']'", i)
                literal_depth -= 1
                continue
            if i - 1 < pos or text[i - 1] != " ":
                raise MarkupError("closing marker must be ' ]'", i)
            pieces.append(text[pos : i - 1])
            clean_len += i - 1 - pos
            start, end = span_start, clean_len
            if strip_whitespace:
                inner = text[pos : i - 1]
                start += len(inner) - len(inner.lstrip())
                end -= len(inner) - len(inner.rstrip())
            if start >= end:
                raise MarkupError("empty span", open_at)
            spans.append(MarkedSpan(start, end, open_label))
            pos = i + 1
            open_at = None
    if open_at is not None:
        raise MarkupError("span opened here is never closed with ' ]'", open_at)
    pieces.append(text[pos:])
    return "".join(pieces), tuple(spans)


def parse_record_markup(where: Where, key: str, marked: str) -> tuple[str, tuple[MarkedSpan, ...]]:
    """:func:`parse_span_markup` on a record field, with errors located in the file."""
    try:
        return parse_span_markup(marked)
    except MarkupError as exc:
        raise where.error(f"bad span markup in {key!r}: {exc}") from None
