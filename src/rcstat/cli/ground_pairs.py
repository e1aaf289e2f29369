"""``rcstat ground --pairs FILE.jsonl``: ground many (context, response[, question]) pairs.

``rcstat ground`` registers ``--pairs`` with :func:`add_pairs_option` and hands a namespace
that has it to :func:`from_namespace` (the checked
:class:`~rcstat.evaluation.bench.ground_pairs.PairsConfig`, every option checked and the
single-pair options refused before any model loads) and the config to :func:`run` (the
library's :func:`~rcstat.evaluation.bench.ground_pairs.run`: one row per line in
``--out``/grounded.jsonl, resumable, progress on standard error; the count of each verdict on
standard output), whose exit status reflects the verdicts
(:func:`~rcstat.cli.exit_codes.pairs_status`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rcstat.cli._common import Devices, load_model_quietly, say
from rcstat.cli.exit_codes import SUPPORTED, pairs_status, pairs_status_text
from rcstat.cli.ground_flags import add_batch_tokens_option, grounding_options

if TYPE_CHECKING:
    from rcstat.evaluation.bench.ground_pairs import PairsConfig

#: The options of a single pair, which ``--pairs`` replaces.
_SINGLE = ("context", "response", "question")


def add_pairs_option(parser: argparse.ArgumentParser) -> None:
    """``--pairs FILE.jsonl`` on ``rcstat ground``."""
    parser.add_argument(
        "--pairs",
        default=None,
        metavar="FILE.jsonl",
        help='ground many pairs, one JSON object a line: {"context", "response", "question"?, '
        '"id"?}; one row per line in --out/grounded.jsonl (resumable). Exit status: '
        + pairs_status_text(),
    )
    add_batch_tokens_option(parser, "with --pairs, ")


def from_namespace(ns: argparse.Namespace) -> PairsConfig:
    """The checked config of ``rcstat ground --pairs`` (``ValueError`` naming the option)."""
    from rcstat.evaluation.bench.ground_pairs import PairsConfig

    given = [
        f"--{name}{suffix}"
        for name in _SINGLE
        for suffix in ("", "-file")
        if getattr(ns, f"{name}{suffix.replace('-', '_')}") is not None
    ]
    if given:
        raise ValueError(f"--pairs reads every pair from its file; drop {', '.join(given)}")
    config = PairsConfig.from_flags(ns, data=ns.pairs, options=grounding_options(ns))
    config.devices = Devices.from_namespace(ns)
    return config


def run(config: PairsConfig) -> int:
    """Ground every pair not yet done; print the count of each verdict; exit with the status
    of the verdicts (0 when a shard finished its part and another merges the run)."""
    from rcstat.evaluation.bench.ground_pairs import run as run_pairs

    result = run_pairs(config, loader=load_model_quietly)
    for line in result.lines():
        say(line)
    return SUPPORTED if result.counts is None else pairs_status(result.counts)
