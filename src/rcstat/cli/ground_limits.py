"""The limits of ``rcstat ground`` (one pair or ``--pairs``): ``--max-tokens``, ``--max-chars`` and
``--max-response-tokens``, registered once and checked before the model loads
(:mod:`rcstat.grounding.limits` holds the checks the library makes with them).

* ``--max-tokens``: the longest input of one pass, in [:data:`~rcstat.defaults.MIN_PASS_TOKENS`,
  :data:`~rcstat.defaults.MAX_PASS_TOKENS`]; the library lowers a value above the model's window
  to it (``rcstat ground`` says so in one line).
* ``--max-chars``: the most characters of each text, checked on the texts as they are read (of
  every line of ``--pairs``), before the model loads.
* ``--max-response-tokens``: the most tokens of a response, checked once the tokenizer has
  read it, before its forward pass.
"""

from __future__ import annotations

import argparse

from rcstat.defaults import (
    DEFAULT_MAX_RESPONSE_TOKENS,
    MAX_PASS_TOKENS,
    MIN_PASS_TOKENS,
)

__all__ = ["add_limit_options", "check_texts", "lowered_note"]


def add_limit_options(parser: argparse.ArgumentParser) -> None:
    """``--max-tokens``, ``--max-chars`` and ``--max-response-tokens`` on ``rcstat ground``."""
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help=f"longest input of one pass, {MIN_PASS_TOKENS:,} to {MAX_PASS_TOKENS:,} tokens "
        "(default: the model's window; a larger value is lowered to the window); a longer "
        "context is read in windows, and a response that cannot fit beside any context is "
        "checked up to where it fits, the rest reported unverified",
    )
    parser.add_argument(
        "--max-chars",
        type=int,
        default=None,
        help="most characters of each text (context, response, question; with --pairs, of "
        "every line), refused before the model loads when longer: each window of a long "
        "context is one more pass (default {DEFAULT_MAX_CHARS:,} characters: about 4 windows "
        "of the default model, minutes on a CPU)",
    )
    parser.add_argument(
        "--max-response-tokens",
        type=int,
        default=None,
        help=f"most tokens of a response (default {DEFAULT_MAX_RESPONSE_TOKENS:,}), refused "
        "before its forward pass when longer (with --pairs, its row records the error): every "
        "response token is a row of every pass",
    )


def check_texts(texts: dict[str, str | None], max_chars: int) -> None:
    """Refuse, before the model loads, a text longer than ``--max-chars`` and a response
    without a word (:func:`rcstat.grounding.limits.check_texts`)."""
    from rcstat.grounding.limits import check_texts as check

    check(texts, max_chars, option="--max-chars")


def lowered_note(asked: int | None, used: int | None) -> str | None:
    """The line that says ``--max-tokens`` was lowered to the model's window; None when not."""
    if asked is None or used is None or used >= asked:
        return None
    return f"note: --max-tokens {asked:,} is more than the model's window: {used:,} used"
