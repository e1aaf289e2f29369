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
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rcstat.attribution import split_sentences
from rcstat.defaults import DEFAULT_LANGUAGE

__all__ = ["FactKind", "SwapPair", "find_facts", "swap_pairs"]

FactKind = Literal["number", "name"]

_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)*(?![\w])")
# capitalised words (with inner hyphens or apostrophes), joined by single spaces
_NAME = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*[a-z][\w'’-]*(?: [A-Z][\w'’-]*[a-z][\w'’-]*)*")
_WORDS = (4, 60)


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
        ``"number"`` or ``"name"``.
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
        fact, one fact each).
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
    if isinstance(per_context, bool) or not isinstance(per_context, int) or per_context < 1:
        raise ValueError(f"per_context must be an integer >= 1, got {per_context!r}")
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
            edit = sentence[: fact.start] + replacement + sentence[fact.end :]
            pairs.append(
                SwapPair(
                    context=context,
                    copy=sentence,
                    edit=edit,
                    kind=fact.kind,
                    original=fact.text,
                    replacement=replacement,
                    start=fact.start,
                    end=fact.start + len(replacement),
                    source=index,
                )
            )
    return pairs
