"""The flags of the commands that ground (``rcstat ground``, ``--pairs``, ``rcstat bench
grounding``) turned into :class:`~rcstat.grounding.options.GroundingOptions`, before any heavy
import."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rcstat.cli.options import check_top_k
from rcstat.defaults import DEFAULT_BATCH_TOKENS

if TYPE_CHECKING:
    from rcstat.grounding.options import GroundingOptions

__all__ = ["add_batch_tokens_option", "detector_choice", "grounding_options"]


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
