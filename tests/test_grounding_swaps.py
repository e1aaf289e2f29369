"""Tests of rcstat.grounding.swaps: facts of a sentence and copy/edit pairs of a corpus.

Oracles: facts found by hand on fixed sentences, and sentences generated from known parts (a
capitalised opener, lowercase filler words, numbers and names put in at known places) so that
the facts of every sentence and of every context are known without calling the code under test.
The pairs are checked against those facts, the sentences of
:func:`~rcstat.attribution.split_sentences` and the contexts themselves.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rcstat.attribution import split_sentences
from rcstat.grounding.swaps import OPPOSITES, SwapPair, find_facts, opposite_pairs, swap_pairs

_PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------- find_facts by hand


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        (
            "It was built by Gustave Eiffel in 1889.",
            [("name", "Gustave Eiffel", 16), ("number", "1889", 34)],
        ),
        (
            "The city has 3.5 million people and 12,000 cafes.",
            [("number", "3.5", 13), ("number", "12,000", 36)],
        ),
        ("The Eiffel Tower is 330 m tall.", [("name", "Eiffel Tower", 4), ("number", "330", 20)]),
        # a run of capitalised words opening the sentence: its first word is dropped
        ("New York City is big.", [("name", "York City", 4)]),
        ("Paris is big.", []),
        ("  Bob Smith ran home.", [("name", "Smith", 6)]),
        ('"Hello there," said Anne.', [("name", "Anne", 20)]),
        # separate names stay separate; "and" breaks a run
        (
            "He met Anne and Bob in Rome.",
            [("name", "Anne", 7), ("name", "Bob", 16), ("name", "Rome", 23)],
        ),
        # inner hyphens and apostrophes belong to the name
        ("We met O'Brien in Saint-Denis.", [("name", "O'Brien", 7), ("name", "Saint-Denis", 18)]),
        # all capitals (no lowercase letter) is not a name; a mixed-case word is
        ("The USA and NASA met McDonald.", [("name", "McDonald", 21)]),
        # numbers glued to letters or opening with a point are not numbers; "3." is "3"
        ("In 1.5.3 and x2 and 3rd and .5 and 3.", [("number", "1.5.3", 3), ("number", "3", 35)]),
        ("Nothing here at all.", []),
        ("", []),
    ],
)
def test_find_facts_by_hand(sentence: str, expected: list[tuple[str, str, int]]) -> None:
    facts = find_facts(sentence)
    assert [(f.kind, f.text, f.start) for f in facts] == expected
    for f in facts:
        assert f.end == f.start + len(f.text) and sentence[f.start : f.end] == f.text


# --------------------------------------------------------------------------- generated sentences

_FILLER = ["was", "built", "by", "in", "the", "of", "near", "some", "old", "tower", "river"]
_OPENERS = ["The", "It", "In", "A", "Then"]
_NAMES = ["Anne", "Gustave Eiffel", "New York", "Saint-Denis", "O'Brien", "Mary Ann Evans"]


def _number(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["int", "decimal", "thousands"]))
    if kind == "int":
        return str(draw(st.integers(0, 3000)))
    if kind == "decimal":
        return f"{draw(st.integers(0, 99))}.{draw(st.integers(0, 99))}"
    return f"{draw(st.integers(1, 999))},{draw(st.integers(0, 999)):03d}"


@dataclass(frozen=True)
class Built:
    """A generated sentence and its facts as (kind, text, start), known by construction."""

    text: str
    facts: list[tuple[str, str, int]]


@st.composite
def sentences(draw: st.DrawFn, words: tuple[int, int] = (1, 12)) -> Built:
    """An opener, then filler words with numbers and names in between (never two facts side by
    side, so two names cannot merge into one run), then a full stop."""
    parts: list[tuple[str, str | None]] = [(draw(st.sampled_from(_OPENERS)), None)]
    for _ in range(draw(st.integers(*words))):
        choice = draw(st.sampled_from(["filler", "filler", "number", "name"]))
        if choice == "filler" or parts[-1][1] is not None:
            parts.append((draw(st.sampled_from(_FILLER)), None))
        elif choice == "number":
            parts.append((_number(draw), "number"))
        else:
            parts.append((draw(st.sampled_from(_NAMES)), "name"))
    text, facts = "", []
    for i, (word, kind) in enumerate(parts):
        text += ("" if i == 0 else " ") + word
        if kind is not None:
            facts.append((kind, word, len(text) - len(word)))
    return Built(text + ".", facts)


@_PROPS
@given(sentences())
def test_find_facts_of_generated_sentences(built: Built) -> None:
    assert [(f.kind, f.text, f.start) for f in find_facts(built.text)] == built.facts


@_PROPS
@given(st.sampled_from(_NAMES), sentences())
def test_a_name_opening_the_sentence_loses_its_first_word(name: str, built: Built) -> None:
    lowered = built.text[0].lower() + built.text[1:]  # the opener is no longer capitalised
    text = f"{name} saw {lowered}"
    head, _, rest = name.partition(" ")
    shift = len(name) + len(" saw ")
    expected = [("name", rest, len(head) + 1)] if rest else []
    expected += [(k, t, s + shift) for k, t, s in built.facts]
    assert [(f.kind, f.text, f.start) for f in find_facts(text)] == expected


# --------------------------------------------------------------------------- swap_pairs by hand


def test_swap_pairs_by_hand() -> None:
    contexts = [
        "The tower was finished in 1889 by the city.",
        "The bridge was finished in 1932 by the state.",
    ]
    pairs = swap_pairs(contexts)
    assert pairs == [
        SwapPair(
            context=contexts[0],
            copy=contexts[0],
            edit="The tower was finished in 1932 by the city.",
            kind="number",
            original="1889",
            replacement="1932",
            start=26,
            end=30,
            source=0,
        ),
        SwapPair(
            context=contexts[1],
            copy=contexts[1],
            edit="The bridge was finished in 1889 by the state.",
            kind="number",
            original="1932",
            replacement="1889",
            start=27,
            end=31,
            source=1,
        ),
    ]


def test_short_sentences_give_facts_but_no_copies() -> None:
    # "Built in 1889." has 3 words: too short to copy, but its number may replace another
    contexts = ["Built in 1889.", "The bridge was finished in 1932 by the state."]
    pairs = swap_pairs(contexts)
    assert [(p.source, p.original, p.replacement) for p in pairs] == [(1, "1932", "1889")]
    long = "The tower " + "was very " * 30 + "finished in 1889."  # 65 words: too long
    assert swap_pairs([long, "It was finished in 1932."]) == [
        SwapPair(
            context="It was finished in 1932.",
            copy="It was finished in 1932.",
            edit="It was finished in 1889.",
            kind="number",
            original="1932",
            replacement="1889",
            start=19,
            end=23,
            source=1,
        )
    ]


def test_a_replacement_found_in_the_context_is_never_used() -> None:
    # the only other number, 1932, also occurs in the first context: no pair for it
    contexts = ["The tower was finished in 1889, not 1932.", "The bridge was finished in 1932."]
    pairs = swap_pairs(contexts, per_context=5)
    assert [(p.source, p.original, p.replacement) for p in pairs] == [(1, "1932", "1889")]


def test_names_swap_with_names_only() -> None:
    contexts = [
        "The tower was designed by Gustave Eiffel in the city.",
        "The bridge was designed by Marc Brunel in 1843.",
    ]
    for seed in range(10):
        for p in swap_pairs(contexts, seed=seed, per_context=3):
            if p.kind == "name":
                assert {p.original, p.replacement} == {"Gustave Eiffel", "Marc Brunel"}
            else:  # the number 1843 has no other number to take its place
                pytest.fail(f"unexpected number swap {p}")


# --------------------------------------------------------------------------- swap_pairs properties


@st.composite
def corpora(draw: st.DrawFn) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """2 to 4 contexts of 1 to 4 generated sentences; with each context its (kind, text) facts."""
    contexts, facts = [], []
    for _ in range(draw(st.integers(2, 4))):
        built = draw(st.lists(sentences(words=(1, 14)), min_size=1, max_size=4))
        contexts.append(" ".join(b.text for b in built))
        facts.append([(k, t) for b in built for k, t, _ in b.facts])
    return contexts, facts


def _check_pair(p: SwapPair, contexts: list[str], facts: list[list[tuple[str, str]]]) -> None:
    context = contexts[p.source]
    assert p.context == context
    assert p.copy in [s.text for s in split_sentences(context)]
    assert 4 <= len(p.copy.split()) <= 60
    length = len(p.original)
    assert p.copy[p.start : p.start + length] == p.original
    assert p.edit[: p.start] == p.copy[: p.start]
    assert p.edit[p.end :] == p.copy[p.start + length :]
    assert p.edit[p.start : p.end] == p.replacement and p.end == p.start + len(p.replacement)
    assert p.replacement != p.original and p.replacement not in context
    assert (p.kind, p.original) in facts[p.source]
    others = {f for j, fs in enumerate(facts) if contexts[j] != context for f in fs}
    assert (p.kind, p.replacement) in others


@_PROPS
@given(corpora(), st.integers(1, 4), st.integers(0, 2**16))
def test_swap_pairs_properties(corpus, per_context: int, seed: int) -> None:  # type: ignore[no-untyped-def]
    contexts, facts = corpus
    if len(set(contexts)) < 2:
        with pytest.raises(ValueError, match="at least two distinct contexts"):
            swap_pairs(contexts, per_context=per_context, seed=seed)
        return
    pairs = swap_pairs(contexts, per_context=per_context, seed=seed)
    for p in pairs:
        _check_pair(p, contexts, facts)
    for _source, group in itertools.groupby(pairs, key=lambda p: p.source):
        assert len(list(group)) <= per_context
    assert [p.source for p in pairs] == sorted(p.source for p in pairs)
    assert swap_pairs(contexts, per_context=per_context, seed=seed) == pairs


@st.composite
def distinct_corpora(draw: st.DrawFn) -> list[str]:
    """Contexts whose facts occur in no other context: numbers 1000 + 10 i + k, names of a
    list per context (no name is part of another)."""
    names = [["Anne", "Gustave Eiffel"], ["Bruno", "Marc Brunel"], ["Clara", "Sofia Kovalevskaya"]]
    contexts = []
    for i in range(draw(st.integers(2, 3))):
        sentences_ = []
        for k in range(draw(st.integers(1, 4))):
            fact = (
                str(1000 + 10 * i + k) if draw(st.booleans()) else draw(st.sampled_from(names[i]))
            )
            before = draw(st.lists(st.sampled_from(_FILLER), max_size=6))
            after = draw(st.lists(st.sampled_from(_FILLER), min_size=1, max_size=6))
            sentences_.append(" ".join(["The", *before, fact, *after]) + ".")
        if draw(st.booleans()):  # a sentence written twice
            sentences_.append(sentences_[0])
        contexts.append(" ".join(sentences_))
    return contexts


@_PROPS
@given(distinct_corpora(), st.integers(1, 3), st.integers(0, 2**16))
@example(  # a sentence written twice: two pairs with the same copy (found by CI)
    ["The Gustave Eiffel built. The 1001 was. The Gustave Eiffel built.", "The Bruno was."], 2, 0
)
def test_every_context_gets_its_pairs_when_replacements_exist(
    contexts: list[str], per_context: int, seed: int
) -> None:
    """With facts of each kind in every context and none shared, a context yields exactly
    min(per_context, its sentence occurrences of 4 to 60 words) pairs (when the other contexts
    hold a fact of every kind this one has)."""
    pairs = swap_pairs(contexts, per_context=per_context, seed=seed)
    for i, context in enumerate(contexts):
        eligible = [s for s in split_sentences(context) if 4 <= len(s.text.split()) <= 60]
        kinds_here = {f.kind for s in eligible for f in find_facts(s.text)}
        kinds_elsewhere = {
            f.kind
            for j, other in enumerate(contexts)
            if j != i
            for s in split_sentences(other)
            for f in find_facts(s.text)
        }
        got = [p for p in pairs if p.source == i]
        if kinds_here <= kinds_elsewhere:
            assert len(got) == min(per_context, len(eligible))
        # one fact a sentence occurrence: a sentence written twice is two candidates
        assert not Counter(p.copy for p in got) - Counter(s.text for s in eligible)


def test_the_seed_changes_the_choices() -> None:
    contexts = [
        " ".join(f"The tower number {n} was built." for n in range(100, 110)),
        " ".join(f"The bridge number {n} was built." for n in range(200, 210)),
    ]
    results = {tuple(swap_pairs(contexts, seed=seed)) for seed in range(10)}
    assert len(results) > 1


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("contexts", [[], ["One context only here."], ["Same.", "Same."]])
def test_fewer_than_two_distinct_contexts(contexts: list[str]) -> None:
    with pytest.raises(ValueError, match="at least two distinct contexts"):
        swap_pairs(contexts)


@pytest.mark.parametrize("per_context", [0, -1, True, 1.5, "2"])
def test_bad_per_context(per_context: object) -> None:
    with pytest.raises(ValueError, match=r"per_context must be an integer >= 1, got"):
        swap_pairs(["It was 1889.", "It was 1932."], per_context=per_context)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- opposite_pairs

_OPPOSITE_WORDS = sorted(OPPOSITES)


def test_opposite_pairs_by_hand() -> None:
    contexts = [
        "Profits rose by 12 percent in 2023. Costs rose and fell.",  # "fell" is in the second
        "Before the war the bridge stood north of the town.",
        "It is red.",  # no sentence of four words or more
    ]
    pairs = opposite_pairs(contexts, per_context=2, seed=0)
    first = [p for p in pairs if p.source == 0]
    assert [(p.original, p.replacement) for p in first] == []  # the context holds "fell"
    second = [p for p in pairs if p.source == 1]
    assert len(second) == 1 and second[0].kind == "opposite"
    p = second[0]
    assert (p.original, p.replacement) in {("Before", "After"), ("north", "south")}
    assert p.edit == p.copy[: p.start] + p.replacement + p.copy[p.start + len(p.original) :]
    assert not any(p.source == 2 for p in pairs)


@st.composite
def opposite_corpora(draw: st.DrawFn) -> list[str]:
    """1 to 3 contexts of 1 to 4 sentences of filler words and words with opposites, any case."""
    contexts = []
    for _ in range(draw(st.integers(1, 3))):
        sentences_ = []
        for _ in range(draw(st.integers(1, 4))):
            words = draw(
                st.lists(
                    st.one_of(st.sampled_from(_FILLER), st.sampled_from(_OPPOSITE_WORDS)),
                    min_size=1,
                    max_size=12,
                )
            )
            if draw(st.booleans()):
                words[0] = words[0].capitalize()
            sentences_.append(" ".join(["The", *words]) + ".")
        if draw(st.booleans()):  # a sentence written twice
            sentences_.append(sentences_[0])
        contexts.append(" ".join(sentences_))
    return contexts


@_PROPS
@given(opposite_corpora(), st.integers(1, 3), st.integers(0, 2**16))
def test_opposite_pairs_properties(contexts: list[str], per_context: int, seed: int) -> None:
    """Every edit replaces one word of a copied sentence by its opposite in the same case, an
    opposite that the context does not hold as a word; a context with a candidate sentence
    gives min(per_context, such sentences) pairs; the same seed gives the same pairs."""
    pairs = opposite_pairs(contexts, per_context=per_context, seed=seed)
    for p in pairs:
        context = contexts[p.source]
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", context)}
        assert p.context == context and p.kind == "opposite"
        assert p.copy in [s.text for s in split_sentences(context)]
        assert 4 <= len(p.copy.split()) <= 60
        assert p.copy[p.start : p.start + len(p.original)] == p.original
        assert p.replacement.lower() == OPPOSITES[p.original.lower()]
        assert p.replacement[0].isupper() == p.original[0].isupper()
        assert p.edit == p.copy[: p.start] + p.replacement + p.copy[p.start + len(p.original) :]
        assert p.edit[p.start : p.end] == p.replacement
        assert p.replacement.lower() not in words
    for i, context in enumerate(contexts):
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", context)}
        eligible = [  # sentence occurrences: one written twice is two candidates
            s.text
            for s in split_sentences(context)
            if 4 <= len(s.text.split()) <= 60
            and any(
                OPPOSITES.get(w.lower()) not in (None, *words)
                for w in re.findall(r"[A-Za-z]+", s.text)
            )
        ]
        got = [p for p in pairs if p.source == i]
        assert len(got) == min(per_context, len(eligible))
        assert not Counter(p.copy for p in got) - Counter(eligible)  # one pair an occurrence
    assert opposite_pairs(contexts, per_context=per_context, seed=seed) == pairs


def test_opposites_are_symmetric_pairs() -> None:
    assert all(OPPOSITES[OPPOSITES[w]] == w and OPPOSITES[w] != w for w in OPPOSITES)


@pytest.mark.parametrize("per_context", [0, True, 1.5])
def test_opposite_pairs_bad_per_context(per_context: object) -> None:
    with pytest.raises(ValueError, match=r"per_context must be an integer >= 1, got"):
        opposite_pairs(["It rose in 1889 and after."], per_context=per_context)  # type: ignore[arg-type]
