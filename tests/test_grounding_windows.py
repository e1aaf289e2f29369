"""Tests of rcstat.grounding.windows: covering a long context with windows of whole sentences.

The token counter is a word count (``len(text.split())``) or a character count, so every
bound can be checked by hand. Oracles: the sentences of
:func:`~rcstat.attribution.split_sentences`, the words of the text, and hand-computed cases.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rcstat.attribution import split_sentences
from rcstat.grounding.windows import MIN_CONTEXT_TOKENS, Window, plan_windows

_PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_WORDS = ["alpha", "bravo", "cat", "dog", "echo", "fox", "golf", "hat", "ink", "jam", "kilo"]


def words(text: str) -> int:
    return len(text.split())


def _sentence(n: int, draw: st.DrawFn) -> str:
    body = draw(st.lists(st.sampled_from(_WORDS), min_size=n, max_size=n))
    return " ".join([body[0].capitalize(), *body[1:]]) + "."


@st.composite
def texts(draw: st.DrawFn, longest: int = 150) -> str:
    """1 to 12 sentences of 1 to `longest` words, separated by spaces or line breaks."""
    parts = []
    for _ in range(draw(st.integers(1, 12))):
        parts.append(_sentence(draw(st.integers(1, longest)), draw))
        parts.append(draw(st.sampled_from([" ", "  ", "\n", "\n\n"])))
    lead = draw(st.sampled_from(["", " ", "\n"]))
    return lead + "".join(parts)


def _covered(windows: list[Window], n: int) -> list[bool]:
    seen = [False] * n
    for w in windows:
        for i in range(w.start, w.end):
            seen[i] = True
    return seen


def _check_windows(text: str, room: int, count: Callable[[str], int]) -> list[Window]:
    windows = plan_windows(text, room, count)
    sentences = split_sentences(text)
    assert windows, "a non-blank text has at least one window"
    for w in windows:
        piece = text[w.start : w.end]
        assert 0 <= w.start < w.end <= len(text)
        assert piece == piece.strip()
        # cut between words only (no generated word is longer than a window)
        assert w.start == 0 or text[w.start - 1].isspace()
        assert w.end == len(text) or text[w.end].isspace()
        assert count(piece) <= room
    for a, b in itertools.pairwise(windows):
        assert a.start < b.start and a.end <= b.end  # in order
        if b.start < a.end:  # overlap: at most one sentence (or part of one cut sentence)
            inside = [s for s in sentences if s.start <= b.start and a.end <= s.end]
            assert len(inside) == 1
            if count(inside[0].text) <= room:
                assert (b.start, a.end) == (inside[0].start, inside[0].end)
        else:  # no gap: only whitespace between them
            assert text[a.end : b.start].strip() == ""
    # every non-whitespace character lies in a window
    seen = _covered(windows, len(text))
    assert all(seen[i] for i, c in enumerate(text) if not c.isspace())
    for s in sentences:
        if count(s.text) <= room:  # a sentence that fits is seen whole in one window
            assert any(w.start <= s.start and s.end <= w.end for w in windows)
        else:  # otherwise consecutive windows cover it, none holding it whole
            parts = [i for i, w in enumerate(windows) if w.start < s.end and w.end > s.start]
            assert parts == list(range(parts[0], parts[-1] + 1)) and len(parts) > 1
            assert windows[parts[0]].start <= s.start and s.end <= windows[parts[-1]].end
    # two neighbouring sentences that fit in one window together are seen together once
    for s, t in itertools.pairwise(sentences):
        if count(text[s.start : t.end]) <= room:
            assert any(w.start <= s.start and t.end <= w.end for w in windows)
    return windows


@_PROPS
@given(texts(), st.sampled_from([MIN_CONTEXT_TOKENS, 70, 100, 200]))
def test_windows_by_words(text: str, room: int) -> None:
    _check_windows(text, room, words)


@_PROPS
@given(texts(longest=40), st.sampled_from([MIN_CONTEXT_TOKENS, 100, 300]))
def test_windows_by_characters(text: str, room: int) -> None:
    _check_windows(text, room, len)


@_PROPS
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.sampled_from([64, 90]))
def test_windows_of_sentences_that_fit_are_greedy_runs(lengths: list[int], room: int) -> None:
    """Sentences of at most 40 words never need cutting: every window is a run of whole
    sentences that the next sentence would overflow, and the next window starts at its last
    sentence (when it holds two or more and that sentence fits with the next) or right after
    it."""
    text = " ".join(_sentence(n, _fixed(n)) for n in lengths)
    sentences = split_sentences(text)
    windows = _check_windows(text, room, words)
    starts, ends = [s.start for s in sentences], [s.end for s in sentences]
    k = 0  # index of the window's first sentence
    for w in windows:
        assert w.start in starts and w.end in ends
        first, last = starts.index(w.start), ends.index(w.end)
        assert first == k
        if last + 1 < len(sentences):
            assert words(text[w.start : sentences[last + 1].end]) > room
        shared = last + 1 < len(sentences) and (
            words(text[sentences[last].start : sentences[last + 1].end]) <= room
        )
        k = last if last > first and shared else last + 1
    assert ends.index(windows[-1].end) == len(sentences) - 1


def _fixed(n: int) -> Callable[..., list[str]]:
    """A stand-in for ``draw`` that gives ``n`` cycling words (the lengths are what matter)."""
    return lambda _strategy: [_WORDS[i % len(_WORDS)] for i in range(n)]


def test_a_text_that_fits_is_one_window() -> None:
    text = "  One two three. Four five six.\n Seven eight nine.\n\n"
    assert plan_windows(text, MIN_CONTEXT_TOKENS, words) == [Window(2, len(text.rstrip()))]


@_PROPS
@given(texts(longest=20))
def test_a_text_that_fits_is_one_window_of_its_trimmed_span(text: str) -> None:
    room = max(MIN_CONTEXT_TOKENS, words(text))
    start = len(text) - len(text.lstrip())
    assert plan_windows(text, room, words) == [Window(start, len(text.rstrip()))]


@_PROPS
@given(st.integers(65, 400), st.sampled_from([MIN_CONTEXT_TOKENS, 80, 100]))
def test_a_long_sentence_is_cut_at_spaces(n: int, room: int) -> None:
    text = _sentence(n, _fixed(n))
    windows = plan_windows(text, room, words)
    pieces = [text[w.start : w.end] for w in windows]
    assert all(words(p) <= room for p in pieces)
    assert " ".join(pieces).split() == text.split()  # cut between words, nothing lost or doubled
    assert [words(p) for p in pieces[:-1]] == [room] * (len(pieces) - 1)  # each as full as fits
    assert len(pieces) == -(-n // room)


def test_a_word_longer_than_the_room_is_cut_at_characters() -> None:
    text = "x" * 150
    assert plan_windows(text, 64, len) == [Window(0, 64), Window(64, 128), Window(128, 150)]


def test_windows_by_hand() -> None:
    # 30 + 30 + 30 words, room 64: [s1 s2], then [s2 s3] sharing s2
    s = [_sentence(30, _fixed(30)) for _ in range(3)]
    text = " ".join(s)
    one, two = len(s[0]) + 1, len(s[0]) + len(s[1]) + 2
    assert plan_windows(text, 64, words) == [Window(0, two - 1), Window(one, len(text))]


def test_no_window_lies_inside_the_previous_one() -> None:
    text = "Tiny one here. " + " ".join(["cat"] * 40) + ". " + " ".join(["dog"] * 40) + "."
    windows = plan_windows(text, 64, words)
    for a, b in itertools.pairwise(windows):
        assert b.end > a.end, f"{b} lies inside {a}"


def test_blank_text_has_no_window() -> None:
    assert plan_windows("", 64, words) == []
    assert plan_windows(" \n\t ", 64, words) == []


@pytest.mark.parametrize("room", [MIN_CONTEXT_TOKENS - 1, 0, -5])
def test_room_below_the_minimum(room: int) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_CONTEXT_TOKENS} tokens, got {room}"):
        plan_windows("Some text.", room, words)
