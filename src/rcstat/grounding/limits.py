"""What one grounding may read and cost, checked before any model work (docs/grounding.md,
"Limits").

Every response token is a row of every pass and every context token a key, and a context longer
than the model's window is read in windows, each a pass beside the whole response: without
bounds a 10 MB context or a 20,000-character response runs for many minutes. So:

* ``max_chars`` (:data:`~rcstat.defaults.DEFAULT_MAX_CHARS`): the most characters of each text
  (context, response, question), checked on the texts alone — by the command line before the
  model loads, by :meth:`~rcstat.grounding.Grounder.ground` before anything is tokenised;
* ``max_response_tokens`` (:data:`~rcstat.defaults.DEFAULT_MAX_RESPONSE_TOKENS`): the most
  tokens of the response, checked after tokenising, before any forward pass;
* ``max_tokens``: the most tokens of one pass, at most
  :data:`~rcstat.defaults.MAX_PASS_TOKENS` (and lowered to the model's window);
* a response must hold a word (a letter or a digit): only words are judged, so a response of
  punctuation alone ("?!?! ... !!!") has nothing that could be supported and is refused rather
  than passed.

Each check raises a ``ValueError`` that names the text and the limit the way the caller knows it
(``option``: ``"max_chars"`` in the library, ``"--max-chars"`` on the command line) and says how
to raise it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rcstat.checks import check_count
from rcstat.defaults import MAX_PASS_TOKENS

__all__ = [
    "check_limit",
    "check_pass_tokens",
    "check_response_tokens",
    "check_texts",
    "has_word",
]

_WORD = re.compile(r"\w")  # a letter or a digit of any script: what the score judges


def has_word(text: str) -> bool:
    """Whether ``text`` holds a word the score can judge (a ``\\w`` character).

    >>> has_word("?!?! ... !!!"), has_word("It was 1889."), has_word("東京")
    (False, True, True)
    """
    return _WORD.search(text) is not None


def _named(option: str, value: int) -> str:
    """``--max-chars 100,000`` for a flag, ``max_chars=100000`` for an argument."""
    return f"{option} {value:,}" if option.startswith("-") else f"{option}={value}"


def check_limit(option: str, value: object, *, low: int = 1, high: int | None = None) -> int:
    """A limit as an integer in ``[low, high]`` (``ValueError`` naming ``option``)."""
    return check_count(option, value, low=low, high=high)


def check_texts(
    texts: Mapping[str, str | None], max_chars: int, *, option: str = "max_chars"
) -> None:
    """Refuse a text longer than ``max_chars`` characters and a response without a word.

    Parameters
    ----------
    texts
        ``{what: text}``, e.g. ``{"context": ..., "response": ..., "question": None}`` (None:
        not given); the text named ``"response"`` must hold a word (:func:`has_word`).
    max_chars
        The most characters of each text.
    option
        How the message names the limit (``"max_chars"``, ``"--max-chars"``).

    >>> check_texts({"context": "Paris.", "response": "?!"}, 100)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the response has no word (no letter or digit): only words are judged, ...
    >>> check_texts({"context": "x" * 12}, 10, option="--max-chars")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the context has 12 characters, more than --max-chars 10 allows; pass a larger ...
    """
    for what, text in texts.items():
        if text is not None and len(text) > max_chars:
            raise ValueError(
                f"the {what} has {len(text):,} characters, more than {_named(option, max_chars)} "
                f"allows; pass a larger {option} to ground it (each window of a long context is "
                "one more pass)"
            )
    response = texts.get("response")
    if response is not None and response.strip() and not has_word(response):  # empty: its own
        # error where the texts are read
        raise ValueError(
            "the response has no word (no letter or digit): only words are judged, so nothing "
            "in it can be supported"
        )


def check_response_tokens(
    tokens: int,
    max_response_tokens: int,
    *,
    option: str = "max_response_tokens",
    flag: str | None = "--max-response-tokens",
) -> None:
    """Refuse a response of more than ``max_response_tokens`` tokens (``flag``: the command
    line's name of the limit, also given in the message).

    >>> check_response_tokens(5000, 2048)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: the response has 5,000 tokens, more than max_response_tokens=2048 allows ...
    """
    if tokens <= max_response_tokens:
        return
    also = "" if flag is None else f" (rcstat ground: {_named(flag, max_response_tokens)})"
    raise ValueError(
        f"the response has {tokens:,} tokens, more than "
        f"{_named(option, max_response_tokens)} allows{also}; pass a larger limit to ground it "
        "(every response token is a row of every pass)"
    )


def check_pass_tokens(option: str, value: int | None, *, low: int = 1) -> int | None:
    """``max_tokens`` (None: the model's window) as an integer in ``[low,``
    :data:`~rcstat.defaults.MAX_PASS_TOKENS` ``]``."""
    return None if value is None else check_limit(option, value, low=low, high=MAX_PASS_TOKENS)
