"""rcstat.grounding.passes: which context tokens hold the word a response token writes."""

from __future__ import annotations

import re
from itertools import pairwise

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.grounding import passes
from rcstat.grounding.features import ResponseRows
from rcstat.grounding.passes import word_matches
from rcstat.segments import Segmented

# ASCII texts take the hashed path (`passes._ascii_words`): words that differ by case, digits,
# underscores, joined by punctuation; prefixes and anagrams of each other
ASCII_WORDS = ["river", "River", "rive", "revir", "river_2", "RIVER_2", "42", "2", "a", "x-ray"]
WORDS = ["river", "River", "RIVER", "bank", "Straße", "STRASSE", "İzmir", "izmir", "42", "a"]


def _segmented(context: str, response: str, cuts: list[int]) -> tuple[Segmented, ResponseRows]:
    """``context`` and ``response`` in one text, cut into tokens at the ``cuts`` offsets."""
    text = "C: " + context + "\nA: " + response
    c0, a0 = 3, 3 + len(context) + 4
    edges = sorted({0, c0, c0 + len(context), a0, len(text), *(c % len(text) for c in cuts)})
    offsets = tuple(pairwise(edges))

    def first(lo: int) -> int:
        return next(i for i, (s, _) in enumerate(offsets) if s >= lo)

    seg = Segmented(
        input_ids=torch.arange(len(offsets))[None],
        prompt_len=first(a0),
        text=text,
        offsets=offsets,
        parts={"context": (c0, c0 + len(context)), "answer": (a0, len(text))},
    )
    rows = ResponseRows((first(c0), first(c0 + len(context))), (first(a0), len(offsets)))
    return seg, rows


def _oracle(seg: Segmented, rows: ResponseRows) -> np.ndarray:
    """Pair by pair: a response token and a context token overlap occurrences of one word."""

    def words(part: str) -> list[tuple[int, int, str]]:
        lo, hi = seg.parts[part]
        return [
            (m.start(), m.end(), m.group().lower())
            for m in re.finditer(r"\w+", seg.text[:hi])
            if m.start() >= lo
        ]

    def overlapping(k: int, found: list[tuple[int, int, str]]) -> set[str]:
        s, e = seg.offsets[k]
        return {w for a, b, w in found if s < b and e > a}

    said, source = words("answer"), words("context")
    out = np.zeros((rows.response[1] - rows.response[0], rows.context[1] - rows.context[0]), bool)
    for j in range(out.shape[0]):
        mine = overlapping(rows.response[0] + j, said)
        for k in range(out.shape[1]):
            out[j, k] = bool(mine & overlapping(rows.context[0] + k, source))
    return out


@pytest.mark.parametrize("vocabulary", [WORDS, ASCII_WORDS], ids=["any script", "ascii"])
@settings(max_examples=60, deadline=None)
@given(data=st.data(), cuts=st.lists(st.integers(0, 200), max_size=30))
def test_word_matches_equal_pairwise_word_overlaps(
    vocabulary: list[str], data: st.DataObject, cuts: list[int]
) -> None:
    words = st.sampled_from(vocabulary)
    context = " ".join(data.draw(st.lists(words, min_size=1, max_size=10)))
    response = ". ".join(data.draw(st.lists(words, min_size=1, max_size=6)))
    seg, rows = _segmented(context, response, cuts)
    got = word_matches(seg, rows)
    assert got.dtype == torch.bool
    np.testing.assert_array_equal(got.numpy(), _oracle(seg, rows))


def test_case_is_ignored_and_other_words_do_not_match() -> None:
    seg, rows = _segmented("The River bank", "river", [])
    got = word_matches(seg, rows).numpy()
    texts = [seg.text[s:e] for s, e in seg.offsets[slice(*rows.context)]]
    assert texts == ["The River bank"] and got.tolist() == [[True]]
    seg, rows = _segmented("The River bank", "lake", [])
    assert not word_matches(seg, rows).any()


@pytest.mark.parametrize(
    ("context", "response", "decided_by_hash"),
    [
        ("ba ab bb", "ab", True),  # "ba" has the hash of "ab": checked and refused
        ("00c ab", "ab", True),  # "00c" too (48 + 48 + 99 = 97 + 98), and is longer
        ("ab ba", "ab ba", False),  # two of the response's words share a hash: `re` decides
    ],
)
def test_hash_collisions_are_never_matches(
    monkeypatch: pytest.MonkeyPatch, context: str, response: str, decided_by_hash: bool
) -> None:
    """With P = 1 every anagram collides (the hash is the sum of the codes)."""
    monkeypatch.setattr(passes, "_BASE", 1)
    monkeypatch.setattr(passes, "_INVERSE", 1)
    seg, rows = _segmented(context, response, list(range(40)))  # a token a character
    hashed = passes._ascii_words(seg.text, seg.parts["answer"], seg.parts["context"])
    assert (hashed is not None) == decided_by_hash
    np.testing.assert_array_equal(word_matches(seg, rows).numpy(), _oracle(seg, rows))
