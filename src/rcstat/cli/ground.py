"""``rcstat ground``: is a response supported by its context? Scores per token and sentence."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from rcstat.cli._common import (
    Devices,
    add_command,
    check_output_folder,
    check_writable,
    console,
    error_console,
    load_model_quietly,
    read_texts,
    step,
)
from rcstat.cli.exit_codes import ERROR, exit_status_text
from rcstat.cli.ground_flags import grounding_options
from rcstat.cli.ground_limits import add_limit_options, check_texts, lowered_note
from rcstat.cli.ground_output import (
    MODEL_LANGUAGES,
    language_warning,
    print_json,
    print_table,
    verdict_status,
    write_results,
)
from rcstat.cli.ground_pairs import add_pairs_option
from rcstat.cli.ground_pairs import from_namespace as pairs_from_namespace
from rcstat.cli.ground_pairs import run as run_pairs
from rcstat.cli.options import (
    add_language_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.defaults import (
    DEFAULT_GROUNDING_QUANTILE,
    DEFAULT_TOP_K,
)

if TYPE_CHECKING:
    from rcstat.evaluation.bench.ground_pairs import PairsConfig
    from rcstat.grounding.options import GroundingOptions

NAME = "ground"
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
        help=f"heads that find supporting spans (default: {DEFAULT_TOP_K}, at most every head)",
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
    gr.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on standard output (verdict, score, threshold, every "
        "sentence with its score, verdict and evidence) instead of the table",
    )
    add_pairs_option(gr)


@dataclass
class GroundArgs:
    """Arguments of ``rcstat ground`` (checked): the texts, where to write, and the
    grounder's :class:`~rcstat.grounding.options.GroundingOptions`."""

    model: str | None
    devices: Devices
    context: str
    response: str
    question: str | None
    out: Path
    options: GroundingOptions
    json: bool = False

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> GroundArgs:
        texts = read_texts(ns, ["context", "response", "question"])
        context, response, question = texts["context"], texts["response"], texts["question"]
        if context is None or response is None:
            raise ValueError(
                "ground needs --context (or --context-file) and --response (or --response-file)"
            )
        for option, text in (("--context", context), ("--response", response)):
            if not text.strip():
                raise ValueError(f"{option} is empty or whitespace only")
        if question is not None and not question.strip():
            raise ValueError("--question is empty or whitespace only")
        options = grounding_options(ns)
        check_texts(
            {"context": context, "response": response, "question": question}, options.max_chars
        )
        return cls(
            model=ns.model,
            devices=Devices.from_namespace(ns),
            context=context,
            response=response,
            question=question,
            out=Path(ns.out),
            options=options,
            json=ns.json,
        )


def run(args: GroundArgs | PairsConfig) -> int:
    """Ground the response; write ground.{json,csv,html}; print its sentences (or the
    ``--json`` object); exit with the verdict (0 supported, 1 unsupported, 3 unverified), or 2
    after the verdict when --out could not be written."""
    from rcstat.grounding import Grounder

    if not isinstance(args, GroundArgs):  # --pairs (rcstat.cli.ground_pairs)
        return run_pairs(args)

    check_output_folder(args.out, NAME)
    check_writable(args.out)
    texts = {"context": args.context, "response": args.response}
    warning = language_warning(args.model, texts)
    if warning is not None:
        error_console.print(warning, markup=False)
    model, tokenizer = load_model_quietly(args.model, args.devices)
    grounder = Grounder(model, tokenizer, args.options)
    note = lowered_note(args.options.max_tokens, grounder.max_tokens)
    if note is not None:
        error_console.print(note, markup=False)
    with step("grounding…"):
        result = grounder.ground(args.context, args.response, args.question, show_progress=True)
    failed = write_results(result, args.out, NAME)
    out = None if failed else args.out
    if args.json:
        print_json(result, out)
    else:
        print_table(result)
        baselines = ", ".join(f"{k} {v:.3f}" for k, v in result.baselines.items())
        console.print(f"same-pass baselines (higher = more supported): {escape(baselines)}")
    if failed is not None:  # the verdict first, then the one error line
        error_console.print(f"[red]error:[/red] {escape(failed)}")
        return ERROR
    where = escape(str(args.out))
    if args.json:
        error_console.print(f"results written to {where}/")
    else:
        console.print(f"results written to {where}/ (open ground.html)")
    return verdict_status(result)


def from_namespace(ns: argparse.Namespace) -> GroundArgs | PairsConfig:
    """The checked arguments of ``rcstat ground`` (with ``--pairs``, its config)."""
    if ns.pairs is not None:
        if ns.json:
            raise ValueError("--json grounds one pair; --pairs writes a JSON row a pair to --out")
        return pairs_from_namespace(ns)
    if ns.batch_tokens is not None:
        raise ValueError("--batch-tokens sizes the passes of --pairs; one pair is one pass")
    return GroundArgs.from_namespace(ns)
