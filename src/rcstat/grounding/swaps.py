"""Copied and changed facts built from unlabelled text: the data that calibrates a verdict.

A sentence copied verbatim from its context is supported; the same sentence with one number or
proper name replaced by another of the same kind, taken from another document, is not. Such
pairs need no hallucination label, only a corpus of contexts, so the tool can build them
for any model and domain (docs/grounding.md, "Calibration"):

* a **fact** is a number (``1889``, ``3.5``, ``12,000``) or a proper name (a run of
  capitalised words that does not open the sentence: ``Eiffel Tower``, ``New York``) inside a
  context sentence of 4 to 60 words;
* the **copy** is the sentence as written; the **edit** replaces one of its facts by a fact of
  the same kind from another context that does not occur anywhere in this one (so the context
  cannot support it).

:func:`opposite_pairs` builds the same pairs for a change that is neither a number nor a name:
one word of the sentence replaced by its opposite (``rose`` → ``fell``, ``north`` → ``south``,
``before`` → ``after``; :data:`OPPOSITES`) where the context holds no form of the opposite word.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rcstat.attribution import split_sentences
from rcstat.defaults import DEFAULT_LANGUAGE

__all__ = ["OPPOSITES", "FactKind", "SwapPair", "find_facts", "opposite_pairs", "swap_pairs"]

FactKind = Literal["number", "name", "opposite"]

_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")
# capitalised words (with inner hyphens or apostrophes), joined by single spaces
_NAME = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*[a-z][\w'’-]*(?: [A-Z][\w'’-]*[a-z][\w'’-]*)*")
_WORDS = (4, 60)
_OPPOSITE_PAIRS = (
    "rose fell, rise fall, rises falls, risen fallen, increased decreased, increase decrease, "
    "increases decreases, higher lower, highest lowest, more less, before after, north south, "
    "east west, northern southern, eastern western, opens closes, opened closed, first last, "
    "largest smallest, larger smaller, maximum minimum, won lost, wins loses, win lose, "
    "early late, earlier later, earliest latest, above below, inside outside, "
    "positive negative, true false, always never, accepted rejected, older younger, "
    "oldest youngest, longer shorter, longest shortest, heavier lighter, faster slower, "
    "stronger weaker, strongest weakest, hot cold, wet dry, men women, male female, "
    "husband wife, father mother, son daughter, brother sister, king queen, morning evening, "
    "day night, summer winter, success failure, legal illegal, possible impossible, "
    "public private, rich poor, modern ancient, internal external, imports exports, "
    "bought sold, best worst, better worse, major minor, majority minority, "
    "full empty, victory defeat, allowed banned, supported opposed, included excluded, "
    "arrived departed, born died, beginning end, started ended, agreed refused"
)
#: Each word of a pair of opposites mapped to the other (lower case), for :func:`opposite_pairs`.
OPPOSITES: dict[str, str] = {
    a: b
    for pair in _OPPOSITE_PAIRS.split(", ")
    for x, y in [pair.split()]
    for a, b in ((x, y), (y, x))
}
_LETTERS = re.compile(r"(?<![\w'’-])[A-Za-z]+(?![\w'’-])")


@dataclass(frozen=True)
class Fact:
    """A fact's kind, its text and its ``[start, end)`` in the sentence."""

    kind: FactKind
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class SwapPair:
    """A supported sentence (``copy``) and its changed version (``edit``) for one context.

    Attributes
    ----------
    context
        The document the copy comes from.
    copy
        A sentence of ``context``, verbatim.
    edit
        ``copy`` with ``original`` replaced by ``replacement`` at ``edit[start:end]``.
    kind
        ``"number"``, ``"name"`` or ``"opposite"`` (:func:`opposite_pairs`).
    source
        Index of the context in the list given to :func:`swap_pairs`.
    """

    context: str
    copy: str
    edit: str
    kind: FactKind
    original: str
    replacement: str
    start: int
    end: int
    source: int


def find_facts(sentence: str) -> list[Fact]:
    """Numbers and proper names of ``sentence`` (see the module notes), in text order.

    >>> [(f.kind, f.text) for f in find_facts("It was built by Gustave Eiffel in 1889.")]
    [('name', 'Gustave Eiffel'), ('number', '1889')]
    """
    facts = [Fact("number", m.group(), m.start(), m.end()) for m in _NUMBER.finditer(sentence)]
    opening = re.match(r"\W*", sentence)
    first = opening.end() if opening else 0
    for m in _NAME.finditer(sentence):
        start, text = m.start(), m.group()
        if start == first:  # the sentence's first word is capitalised anyway: drop it
            head, _, rest = text.partition(" ")
            if not rest:
                continue
            start, text = start + len(head) + 1, rest
        facts.append(Fact("name", text, start, start + len(text)))
    return sorted(facts, key=lambda f: f.start)


def swap_pairs(
    contexts: Sequence[str],
    *,
    per_context: int = 2,
    seed: int = 0,
    language: str = DEFAULT_LANGUAGE,
) -> list[SwapPair]:
    """Build copy/edit pairs from ``contexts`` (any unlabelled documents).

    Parameters
    ----------
    contexts
        The documents; at least two distinct ones (an edit takes its fact from another).
    per_context
        At most this many pairs per context (sentences chosen at random among those holding a
        fact, one fact each; a sentence written twice in a context is two candidates, as in
        :func:`opposite_pairs`).
    seed
        Seed of the choices (the same inputs and seed give the same pairs).
    language
        As in :func:`~rcstat.attribution.split_sentences`.

    Raises
    ------
    ValueError
        Fewer than two distinct contexts, or ``per_context < 1``.
    """
    if len(set(contexts)) < 2:
        raise ValueError("swap_pairs needs at least two distinct contexts")
    _check_per_context(per_context)
    rng = random.Random(seed)
    found: list[list[tuple[str, list[Fact]]]] = []
    pool: dict[FactKind, list[tuple[int, str]]] = {"number": [], "name": []}
    for index, context in enumerate(contexts):
        sentences = []
        for span in split_sentences(context, language=language):
            words = len(span.text.split())
            facts = find_facts(span.text) if _WORDS[0] <= words <= _WORDS[1] else []
            if facts:
                sentences.append((span.text, facts))
            for fact in find_facts(span.text):
                pool[fact.kind].append((index, fact.text))
        found.append(sentences)
    pairs = []
    for index, (context, sentences) in enumerate(zip(contexts, found, strict=True)):
        for sentence, facts in rng.sample(sentences, min(per_context, len(sentences))):
            fact = rng.choice(facts)
            options = sorted(
                {text for source, text in pool[fact.kind] if source != index} - {fact.text}
            )
            options = [text for text in options if text not in context]
            if not options:
                continue
            replacement = rng.choice(options)
            pairs.append(
                _splice(context, sentence, (fact.start, fact.end), replacement, fact.kind, index)
            )
    return pairs


def opposite_pairs(
    contexts: Sequence[str],
    *,
    per_context: int = 2,
    seed: int = 0,
    language: str = DEFAULT_LANGUAGE,
) -> list[SwapPair]:
    """Build copy/edit pairs from ``contexts`` whose edit replaces one word of the copied
    sentence by its opposite (:data:`OPPOSITES`, the original's capitalisation kept): the
    changes :func:`swap_pairs` cannot make (``kind="opposite"``). A word is a candidate only
    when its opposite occurs nowhere in the context as a word, so the context cannot support
    the edit. Sentences of 4 to 60 words (a sentence written twice in a context is two
    candidates), at most ``per_context`` a context, one word each, chosen with ``seed`` (the
    same inputs and seed give the same pairs).

    >>> pair = opposite_pairs(["Profits rose in 2023 at the firm. Sales held at 4 shops."])[0]
    >>> pair.edit, pair.original, pair.replacement
    ('Profits fell in 2023 at the firm.', 'rose', 'fell')

    Raises
    ------
    ValueError
        ``per_context < 1``.
    """
    _check_per_context(per_context)
    rng = random.Random(seed)
    pairs = []
    for index, context in enumerate(contexts):
        present = {m.group().lower() for m in _LETTERS.finditer(context)}
        sentences = []
        for span in split_sentences(context, language=language):
            if not _WORDS[0] <= len(span.text.split()) <= _WORDS[1]:
                continue
            words = [
                m
                for m in _LETTERS.finditer(span.text)
                if OPPOSITES.get(m.group().lower(), "") not in present | {""}
            ]
            if words:
                sentences.append((span.text, words))
        for sentence, words in rng.sample(sentences, min(per_context, len(sentences))):
            word = rng.choice(words)
            opposite = OPPOSITES[word.group().lower()]
            if word.group()[0].isupper():
                opposite = opposite[0].upper() + opposite[1:]
            pairs.append(_splice(context, sentence, word.span(), opposite, "opposite", index))
    return pairs


def _splice(
    context: str,
    sentence: str,
    where: tuple[int, int],
    replacement: str,
    kind: FactKind,
    source: int,
) -> SwapPair:
    """The pair whose edit is ``sentence`` with ``sentence[start:end]`` (``where``) replaced by
    ``replacement``; the pair's ``start``/``end`` locate the replacement in the edit.

    >>> pair = _splice("Built in 1889.", "Built in 1889.", (9, 13), "1920", "number", 0)
    >>> pair.edit, pair.original, (pair.start, pair.end)
    ('Built in 1920.', '1889', (9, 13))
    """
    start, end = where
    return SwapPair(
        context=context,
        copy=sentence,
        edit=sentence[:start] + replacement + sentence[end:],
        kind=kind,
        original=sentence[start:end],
        replacement=replacement,
        start=start,
        end=start + len(replacement),
        source=source,
    )


def _check_per_context(per_context: object) -> None:
    if isinstance(per_context, bool) or not isinstance(per_context, int) or per_context < 1:
        raise ValueError(f"per_context must be an integer >= 1, got {per_context!r}")
