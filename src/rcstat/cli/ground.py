"""``rcstat ground``: is a response supported by its context? Scores per token and sentence.

The work is the library's: one pair is :mod:`rcstat.commands.ground` (a
:class:`~rcstat.commands.ground.GroundConfig`, ``run``, a result that writes the folder), many
pairs (``--pairs``) are :mod:`rcstat.evaluation.bench.ground_pairs`. :func:`from_namespace`
chooses one of the two from the flags, once, and returns arguments whose ``run()`` calls the
library and prints (:mod:`rcstat.cli.ground_output`, :mod:`rcstat.cli.ground_pairs`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rich.markup import escape

from rcstat.cli._common import (
    Devices,
    add_command,
    console,
    error_console,
    load_model_quietly,
    print_json,
    read_texts,
    step,
)
from rcstat.cli.exit_codes import ERROR, exit_status_text
from rcstat.cli.ground_flags import add_limit_options, grounding_options
from rcstat.cli.ground_output import print_table, verdict_status
from rcstat.cli.ground_pairs import add_pairs_option
from rcstat.cli.ground_pairs import from_namespace as pairs_from_namespace
from rcstat.cli.ground_pairs import run as run_pairs
from rcstat.cli.options import (
    add_json_option,
    add_language_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.cli.parser import error_line
from rcstat.commands.ground import (
    MODEL_LANGUAGES,
    NAME,
    TEXTS,
    GroundConfig,
    NotSavedError,
)
from rcstat.commands.ground import run as run_ground
from rcstat.defaults import (
    DEFAULT_GROUNDING_QUANTILE,
    DEFAULT_TOP_K,
)

if TYPE_CHECKING:
    from rcstat.evaluation.bench.ground_pairs import PairsConfig
    from rcstat.grounding.options import GroundingOptions

#: The JSON files ``ground`` reads: (option, what it holds); each must exist.
_FILES = (
    ("--profile", "head profile JSON (default: shipped)"),
    ("--probe", "trained probe JSON to report beside"),
    (
        "--detector",
        "trained detector JSON (`rcstat ground-train`; default: the one shipped for "
        "the model, else the zero-shot word score)",
    ),
)
#: Numbers whose default is the head profile's: (option, what it sets).
_PROFILE_NUMBERS = (("--fraction", "share of heads"), ("--threshold", "flag threshold"))


def register(sub: Any) -> None:
    """Add ``ground`` to the sub-command parsers ``sub``."""
    gr = add_command(
        sub,
        NAME,
        "score how well a response is supported by its context",
        "Teacher-force a response (written by any model) after its context and score every "
        "word and sentence for support: a word is supported when the copy heads attend to its "
        "source in the context or the model, reading the context, expects it. Unsupported "
        "sentences name their weakest word; supported ones show the context sentence they "
        "rest on. A context longer than the model's window is read in windows (progress on "
        "standard error). A response without a word (punctuation only) is refused: nothing in "
        "it could be supported. Texts longer than --max-chars and responses longer than "
        "--max-response-tokens are refused before any forward pass.",
    )
    gr.epilog = (
        f"Languages: {MODEL_LANGUAGES}; a text mostly not in the Latin script "
        "gets a warning on standard error; scores in other languages are unreliable "
        "(pass --model). "
        "Without --pairs: " + exit_status_text() + " With --pairs: see --pairs."
    )
    add_text_options(
        gr,
        (
            ("context", "context (source) text"),
            ("response", "response to check"),
            ("question", "question or instruction the response answers (optional)"),
        ),
    )
    for option, what in _FILES:
        gr.add_argument(option, default=None, metavar="PATH", help=what)
    for option, what in _PROFILE_NUMBERS:
        gr.add_argument(option, type=float, default=None, help=f"{what} (default: the profile's)")
    gr.add_argument(
        "--quantile",
        type=float,
        default=None,
        help="lower quantile over the response tokens of each head statistic (the probe's "
        f"features; default {DEFAULT_GROUNDING_QUANTILE})",
    )
    add_limit_options(gr)
    gr.add_argument(
        "--top-k",
        type=int,
        default=None,
        help=f"heads that find supporting spans (default: {DEFAULT_TOP_K}, at most every head; "
        "0: none, evidence only where the words were copied from, a cheaper pass)",
    )
    gr.add_argument(
        "--zero-shot",
        action="store_true",
        help="judge with the zero-shot word score (the copy heads and the NLL; no training) "
        "even where a trained detector ships",
    )
    add_language_option(gr)
    add_out_option(gr, NAME)
    add_special_tokens_option(gr)
    add_json_option(
        gr,
        "verdict, score, threshold, every sentence with its score, verdict and evidence",
        "the table",
    )
    add_pairs_option(gr)


class GroundCommand(Protocol):
    """What :func:`from_namespace` returns: one pair (:class:`GroundArgs`) or many
    (:class:`PairsArgs`), chosen once from the flags; :func:`run` runs either."""

    def run(self) -> int: ...


@dataclass
class GroundArgs:
    """``rcstat ground`` on one pair: the library's checked
    :class:`~rcstat.commands.ground.GroundConfig`, and whether to print ``--json``."""

    config: GroundConfig
    json: bool = False

    @property
    def options(self) -> GroundingOptions:
        """The grounder's options (``config.options``)."""
        return self.config.options

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> GroundArgs:
        texts = read_texts(ns, TEXTS)
        config = GroundConfig(
            context=texts["context"],
            response=texts["response"],
            question=texts["question"],
            model=ns.model,
            out=Path(ns.out),
            options=grounding_options(ns),  # with --top-k against the model's heads
        )
        config.check()
        config.devices = Devices.from_namespace(ns)  # last: it may ask torch for the GPUs
        return cls(config, json=ns.json)

    def run(self) -> int:
        """Ground the response (:func:`rcstat.commands.ground.run`, which writes
        ground.{json,csv,html}); print its sentences (or the ``--json`` object); exit with the
        verdict (0 supported, 1 unsupported, 3 unverified), or 2 after the verdict when --out
        could not be written."""
        try:
            result = run_ground(self.config, loader=load_model_quietly, say=_note, step=step)
            failed = None
        except NotSavedError as err:  # the verdict first, then the one error line
            result, failed = err.result, f"{err}; the verdict above is not saved"
        if self.json:
            print_json(result.document())
        else:
            print_table(result.grounding)
            baselines = ", ".join(f"{k} {v:.3f}" for k, v in result.grounding.baselines.items())
            console.print(f"same-pass baselines (higher = more supported): {escape(baselines)}")
        if failed is not None:
            error_line(failed)
            return ERROR
        where = escape(str(self.config.out))
        if self.json:
            error_console.print(f"results written to {where}/")
        else:
            console.print(f"results written to {where}/ (open ground.html)")
        return verdict_status(result.verdict)


def _note(line: str) -> None:
    """A warning or note of the library, as it is, on standard error."""
    error_console.print(line, markup=False)


@dataclass
class PairsArgs:
    """``rcstat ground --pairs``: the library's checked
    :class:`~rcstat.evaluation.bench.ground_pairs.PairsConfig`
    (:mod:`rcstat.cli.ground_pairs`)."""

    config: PairsConfig

    def run(self) -> int:
        return run_pairs(self.config)


def from_namespace(ns: argparse.Namespace) -> GroundCommand:
    """The checked arguments of ``rcstat ground``: one pair, or with ``--pairs`` many."""
    if ns.pairs is not None:
        if ns.json:
            raise ValueError("--json grounds one pair; --pairs writes a JSON row a pair to --out")
        return PairsArgs(pairs_from_namespace(ns))
    if ns.batch_tokens is not None:
        raise ValueError("--batch-tokens sizes the passes of --pairs; one pair is one pass")
    return GroundArgs.from_namespace(ns)


def run(args: GroundCommand) -> int:
    """Run ``rcstat ground`` on one pair or many (see :class:`GroundArgs` and
    :mod:`rcstat.cli.ground_pairs`)."""
    return args.run()
