"""The flags of the commands that ground (``rcstat ground``, ``--pairs``, ``rcstat bench
grounding``) turned into :class:`~rcstat.grounding.options.GroundingOptions`, before any heavy
import.

The limits of ``rcstat ground`` (one pair or ``--pairs``) are registered once here
(:func:`add_limit_options`) and checked before the model loads
(:mod:`rcstat.grounding.limits` holds the checks the library makes with them):

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
from pathlib import Path
from typing import TYPE_CHECKING

from rcstat.cli.model_option import check_top_k
from rcstat.defaults import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_RESPONSE_TOKENS,
    MAX_PASS_TOKENS,
    MIN_PASS_TOKENS,
)

if TYPE_CHECKING:
    from rcstat.grounding.options import GroundingOptions

__all__ = [
    "add_batch_tokens_option",
    "add_limit_options",
    "detector_choice",
    "grounding_options",
]


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
        f"context is one more pass (default {DEFAULT_MAX_CHARS:,} characters: about 4 windows "
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


def add_batch_tokens_option(parser: argparse.ArgumentParser, note: str = "") -> None:
    """``--batch-tokens N``: the most tokens of one batched grounding pass."""
    parser.add_argument(
        "--batch-tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"{note}the most tokens of one forward pass: pairs of similar length share a pass "
        f"up to N tokens (pairs x the longest; default {DEFAULT_BATCH_TOKENS:,} on a GPU, one "
        "pair a pass on a CPU, where batching saves nothing)",
    )


def detector_choice(path: Path | None, zero_shot: bool) -> Path | bool | None:
    """The ``detector`` option of the grounder: a file, ``False`` for ``--zero-shot``, or
    None (the shipped one, if any); both flags are refused together."""
    if path is not None and zero_shot:
        raise ValueError("--detector and --zero-shot exclude each other")
    return False if zero_shot else path


def grounding_options(ns: argparse.Namespace) -> GroundingOptions:
    """The checked grounding options of ``rcstat ground``'s flags (``--zero-shot`` is
    ``detector=False``; ``--top-k`` also against the model's heads where they are known before
    it loads)."""
    from rcstat.grounding.options import GroundingOptions

    detector = detector_choice(None if ns.detector is None else Path(ns.detector), ns.zero_shot)
    options = GroundingOptions.from_flags(ns, detector=detector)
    check_top_k(options.top_k, ns.model)
    return options
