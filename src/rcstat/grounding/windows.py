"""Reading a context longer than the analysis model's window (docs/grounding.md, "Long contexts").

The response is never cut to make room: the context is. When template + context + question +
response exceed the window, the context is read in *windows*: runs of whole context sentences
(a sentence longer than a window is cut at token boundaries) that fit beside the question and
the response, consecutive windows sharing their boundary sentence so that a fact stated across
two sentences is seen whole at least once. The response is measured against every window and
each of its words keeps its best support (:meth:`~rcstat.grounding.Grounder.ground`). Only a
response too long to fit beside any context at all is cut, and its sentences past the cut are
reported *unverified*, never supported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rcstat.attribution import TextSpan, split_sentences
from rcstat.defaults import DEFAULT_LANGUAGE

__all__ = ["MIN_CONTEXT_TOKENS", "Window", "plan_windows"]

#: Fewest context tokens a window must hold; a response that leaves less room is cut.
MIN_CONTEXT_TOKENS = 64


@dataclass(frozen=True)
class Window:
    """One window: ``context[start:end]`` (character offsets in the whole context)."""

    start: int
    end: int


def plan_windows(
    context: str, room: int, count: Callable[[str], int], *, language: str = DEFAULT_LANGUAGE
) -> list[Window]:
    """Cover ``context`` with windows of at most ``room`` tokens (see the module notes).

    Parameters
    ----------
    context
        The whole context.
    room
        Tokens a window may hold (the model's window minus the template, question and
        response, minus a margin for tokens merging differently at the boundaries).
    count
        Number of tokens of a text (the analysis model's tokenizer).
    language
        As in :func:`~rcstat.attribution.split_sentences`.

    Returns
    -------
    list of Window
        In context order; together they cover every character of every sentence, and
        consecutive windows overlap by one sentence where two sentences fit in one window.

    Raises
    ------
    ValueError
        ``room`` below :data:`MIN_CONTEXT_TOKENS`.

    >>> words = lambda text: len(text.split())
    >>> text = "One two three. Four five six. Seven eight nine."
    >>> [text[w.start:w.end] for w in plan_windows(text, 64, words)]
    ['One two three. Four five six. Seven eight nine.']
    """
    if room < MIN_CONTEXT_TOKENS:
        raise ValueError(f"a window must hold at least {MIN_CONTEXT_TOKENS} tokens, got {room}")
    pieces: list[TextSpan] = []
    for sentence in split_sentences(context, language=language):
        pieces.extend(_cut(sentence, room, count))

    def fits(first: int, last: int) -> bool:
        return count(context[pieces[first].start : pieces[last].end]) <= room

    def furthest(first: int) -> int:
        """The last piece a window from ``first`` can hold: a galloping then a binary search
        (a few tokenisations per window rather than one per sentence it holds)."""
        fitting, step = first, 1
        while fitting + step < len(pieces) and fits(first, fitting + step):
            fitting, step = fitting + step, step * 2
        failing = min(fitting + step, len(pieces))  # too long, or past the last piece
        while failing - fitting > 1:
            middle = (fitting + failing) // 2
            fitting, failing = (middle, failing) if fits(first, middle) else (fitting, middle)
        return fitting

    windows: list[Window] = []
    first = 0
    while first < len(pieces):
        last = furthest(first)  # the window holds pieces first..last
        windows.append(Window(pieces[first].start, pieces[last].end))
        if last + 1 >= len(pieces):
            break
        # share the boundary sentence when it and the next fit together (else that window
        # would hold the boundary sentence alone, already read)
        first = last if last > first and fits(last, last + 1) else last + 1
    return windows


def _cut(sentence: TextSpan, room: int, count: Callable[[str], int]) -> list[TextSpan]:
    """``sentence`` as it is, or cut at word boundaries into parts of at most ``room`` tokens
    (at whitespace where there is any, else at characters)."""
    if count(sentence.text) <= room:
        return [sentence]
    parts: list[TextSpan] = []
    text, offset = sentence.text, sentence.start
    while text:
        low, high = 1, len(text)  # the longest prefix that fits, by bisection on characters
        while low < high:
            middle = (low + high + 1) // 2
            if count(text[:middle]) <= room:
                low = middle
            else:
                high = middle - 1
        end = low
        if end < len(text):
            space = text.rfind(" ", 0, end)
            end = space if space > 0 else end
        piece = text[:end].rstrip()
        parts.append(TextSpan(offset, offset + len(piece), piece))
        skipped = len(text[end:]) - len(text[end:].lstrip())
        offset += end + skipped
        text = text[end:].lstrip()
    return parts
