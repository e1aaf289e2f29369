"""Which words of a response occur in its context, compared after normalisation.

A response word is *known* when the context holds it: compared as lower-cased ``\\w+`` words,
with three normalisations that make a faithful rewording of structured data count as known
(docs/grounding.md, "Structured contexts"):

* **structured data**: a context that is a JSON object or array (a product record, a business
  listing, the data of a data-to-text task) is read as its keys and values, not as JSON text:
  string values as text (their escapes decoded, so ``"back.\\n\\nPatty"`` gives ``patty``), keys
  split at case changes and underscores (``OutdoorSeating`` gives ``outdoor``, ``seating`` and
  ``outdoorseating``), ``true``/``false`` as ``yes``/``no`` as well;
* **times**: ``17:00``, ``17:0`` and ``5:00 pm`` all give the hour in both clocks (``17``,
  ``5``), its minutes (``00``) and ``am``/``pm``, so "5 pm to 9 pm" is known from
  ``"17:00-21:00"``; 12:00 also gives ``noon``, 0:00 ``midnight``;
* **compounds**: a hyphenated response word is known when its parts are, or when they form one
  known word (``Wi-Fi`` from ``WiFi``).

Numbers are digit runs (``\\w+`` splits ``4.5`` into ``4`` and ``5``), so ``4.0 stars`` and a
context's ``4.0`` agree word by word.

A response word is *copied* when it lies inside a run of :data:`COPY_RUN` consecutive response
words that occurs, word for word, in the context: a share of copied words near 1 marks a
response that quotes its context (the regime of an extractive answer with one fact changed).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

__all__ = ["COPY_RUN", "Lexicon", "ResponseWord"]

_WORD = re.compile(r"\w+", re.UNICODE)
_TIME = re.compile(r"(?<![\w:])(\d{1,2}):(\d{1,2})(?:\s*([ap])\.?m\.?)?(?![\w:])", re.IGNORECASE)
#: Words in a row that make a copied run.
COPY_RUN = 4
_CASE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


@dataclass(frozen=True)
class ResponseWord:
    """A ``\\w+`` word of the response, ``response[start:end]``: whether the context holds it,
    whether it follows the previous word there, and whether it lies in a copied run
    (:meth:`Lexicon.words_of`, module notes)."""

    start: int
    end: int
    text: str
    known: bool
    bigram_known: bool
    copied: bool = False


class Lexicon:
    """The normalised words (and word bigrams) of one context.

    >>> lex = Lexicon('{"hours": {"Monday": "17:00-21:00"}, "OutdoorSeating": true}')
    >>> [w.text for w in lex.words_of("Open 5 pm to 9 pm, with outdoor seating.") if not w.known]
    ['Open', 'to', 'with']
    """

    def __init__(self, context: str) -> None:
        data = _structured(context)
        text = context if data is None else "\n".join(_flatten(data))
        words = [w.lower() for w in _WORD.findall(text)]
        self.structured = data is not None
        self.words = set(words) | set(_times(text))
        if data is not None:
            self.words |= {"yes", "no"}
        self.bigrams = set(pairwise(words))
        self.runs = {tuple(words[i : i + COPY_RUN]) for i in range(len(words) - COPY_RUN + 1)}

    def known(self, word: str) -> bool:
        """Whether the context holds ``word`` (any case)."""
        return word.lower() in self.words

    def words_of(self, response: str) -> list[ResponseWord]:
        """The response's ``\\w+`` words, each marked known or not (module notes); a word's
        bigram is known when it and the word before it follow each other in the context."""
        found = list(_WORD.finditer(response))
        known = [self.known(m.group()) for m in found]
        for k in range(len(found) - 1):  # Wi-Fi: the joined parts
            a, b = found[k], found[k + 1]
            if response[a.end() : b.start()] == "-" and self.known(a.group() + b.group()):
                known[k] = known[k + 1] = True
        lowered = [m.group().lower() for m in found]
        copied = [False] * len(found)
        for i in range(len(found) - COPY_RUN + 1):
            if tuple(lowered[i : i + COPY_RUN]) in self.runs:
                copied[i : i + COPY_RUN] = [True] * COPY_RUN
        out = []
        for k, m in enumerate(found):
            pair = k > 0 and (lowered[k - 1], lowered[k]) in self.bigrams
            out.append(ResponseWord(m.start(), m.end(), m.group(), known[k], pair, copied[k]))
        return out


def _structured(context: str) -> Any:
    """The JSON value of ``context`` when it is a JSON object or array, else None."""
    text = context.strip()
    if not text or text[0] not in "[{":
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, (dict, list)) else None


def _flatten(data: Any) -> Iterator[str]:
    """Keys and values of a JSON value as lines of text (see the module notes)."""
    if isinstance(data, dict):
        for key, value in data.items():
            key = str(key)
            parts = _CASE.findall(key.replace("_", " "))
            yield " ".join([*parts, "".join(parts)])
            yield from _flatten(value)
    elif isinstance(data, list):
        for value in data:
            yield from _flatten(value)
    elif isinstance(data, bool):
        yield "yes true" if data else "no false"
    elif data is not None:
        yield str(data)


def _times(text: str) -> Iterator[str]:
    """The words every clock time of ``text`` stands for (see the module notes)."""
    for m in _TIME.finditer(text):
        hour, minute, half = int(m.group(1)), int(m.group(2)), m.group(3)
        if hour > 24 or minute > 59:
            continue
        if half is not None:
            hour = hour % 12 + (12 if half.lower() == "p" else 0)
        hour %= 24
        yield from (str(hour), f"{hour:02d}", f"{minute:02d}", str(minute))
        twelve = hour % 12 or 12
        yield str(twelve)
        yield "pm" if hour >= 12 else "am"
        if minute == 0 and hour in (0, 12):
            yield "midnight" if hour == 0 else "noon"
