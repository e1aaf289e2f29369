"""``rcstat analyze``: per-head RC scores of one example (paper §5.1).

The work is :func:`rcstat.commands.analyze.run` (its options and their defaults:
:class:`~rcstat.commands.analyze.AnalyzeConfig`); this module parses the flags into that
config, calls it with the command line's model loader and progress lines, and prints the
generation and the top-heads table.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import (
    Devices,
    JsonArgs,
    add_command,
    add_config_option,
    answer_line,
    console,
    flag_values,
    load_model_quietly,
    print_json_result,
    read_texts,
    step,
)
from rcstat.cli.options import (
    add_json_option,
    add_max_new_tokens_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.commands.analyze import NAME, PLACEMENTS, AnalyzeConfig, AnalyzeResult
from rcstat.commands.analyze import run as run_analyze

__all__ = ["NAME", "from_namespace", "parse_head", "register", "run", "top_heads_table"]

_TEXTS = (
    ("context", "context text (chat mode)"),
    ("question", "question text (chat mode)"),
    ("answer", "answer to teacher-force (chat mode; generated when absent)"),
    ("prompt", "raw prompt, no chat template"),
    ("generation", "raw continuation to analyse (generated when absent)"),
)


def parse_head(value: str) -> tuple[int, int]:
    """``"LAYER.HEAD"`` → ``(layer, head)`` (argparse type of ``--head``)."""
    try:
        layer, head = value.split(".")
        return int(layer), int(head)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"--head must look like LAYER.HEAD, got {value!r}"
        ) from err


def register(sub: Any) -> None:
    """Add ``analyze`` to the sub-command parsers ``sub`` (the defaults are the config's)."""
    an = add_command(
        sub,
        NAME,
        "per-head RC scores of one example",
        "Per-head RC statistics of one example from one forward pass: chat mode (--context, "
        "--question, optional --answer) or raw mode (--prompt, optional --generation).",
    )
    add_text_options(an, _TEXTS)
    add_out_option(an, NAME)
    add_config_option(an, AnalyzeConfig, "tau", float, "threshold for head counts, >= 0")
    add_config_option(an, AnalyzeConfig, "top", int, "rows of the top-heads table")
    an.add_argument(
        "--head",
        type=parse_head,
        action="append",
        help="LAYER.HEAD: also plot that head's cross vs self scores (repeatable)",
    )
    add_config_option(
        an,
        AnalyzeConfig,
        "question_placement",
        str,
        "chat mode: the question ends the prompt or starts the generation",
        choices=PLACEMENTS,
    )
    add_max_new_tokens_option(an, AnalyzeConfig.max_new_tokens, "length of a generated answer")
    an.add_argument("--scaled", action="store_true", help="use <q,k>/sqrt(d) instead of raw")
    an.add_argument(
        "--lower-bound",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute the lower bound a (default: where it is free, i.e. not on CUDA with Triton)",
    )
    add_special_tokens_option(an)
    add_json_option(
        an,
        "the texts, every head's statistics, the head counts above τ, the top heads",
        "the table",
    )


def from_namespace(ns: argparse.Namespace) -> JsonArgs[AnalyzeConfig]:
    """The checked config of ``rcstat analyze`` (a flag left out keeps the config's
    default) and whether to print ``--json``."""
    texts = read_texts(ns, [name for name, _ in _TEXTS])
    config = AnalyzeConfig.from_dict(
        flag_values(
            AnalyzeConfig,
            ns,
            **texts,
            heads=tuple(ns.head or ()),
            devices=Devices.from_namespace(ns),
            out=ns.out,
        )
    )
    return JsonArgs(config, json=bool(ns.json))


def top_heads_table(result: AnalyzeResult) -> Table:
    """The top heads of ``result`` by expected RC, with the counts of heads above its τ."""
    table = Table(title=result.title())
    for name in result.columns():
        table.add_column(name, justify="right")
    for row in result.rows():
        table.add_row(*row)
    return table


def run(args: JsonArgs[AnalyzeConfig]) -> int:
    """Analyse one example and write scores.csv, scores.json, heatmap.png (+ head plots);
    print the generation and the top heads (or the ``--json`` object)."""
    config = args.config
    result = run_analyze(config, loader=load_model_quietly, step=step)
    if args.json:
        print_json_result(result.to_dict(), config.out)
        return 0
    analysis = result.analysis
    # User text and paths may contain [brackets]: escape them, they are not rich markup.
    finished = analysis.generation_finished
    console.print(escape(answer_line("generation", analysis.generation_text, finished)))
    console.print(top_heads_table(result))
    console.print(f"results written to {escape(str(config.out))}/")
    return 0
