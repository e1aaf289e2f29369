"""``rcstat compress``: answer with RCStatPress on a really compressed (ragged) cache.

The work is :func:`rcstat.commands.compress.run` (its options and their defaults:
:class:`~rcstat.commands.compress.CompressConfig`); this module parses the flags into that
config (reading ``--questions-file``), calls it with the command line's model loader and
progress lines, and prints the answers, the ratios and the KV memory (``--json``: the result's
``to_dict`` as one JSON object).
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
    answer_line,
    console,
    flag_values,
    int_list,
    load_model_quietly,
    print_json,
    read_lines_option,
    read_texts,
    step,
)
from rcstat.cli.options import (
    add_json_option,
    add_max_new_tokens_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.cli.press_options import add_press_options, knob_values
from rcstat.commands.compress import NAME, CompressConfig
from rcstat.commands.compress import run as run_compress
from rcstat.defaults import QUESTION_WINDOW
from rcstat.press.options import knob_default

__all__ = ["NAME", "from_namespace", "register", "run"]


def register(sub: Any) -> None:
    """Add ``compress`` to the sub-command parsers ``sub`` (the defaults are the config's and
    the press's)."""
    co = add_command(
        sub,
        NAME,
        "answer with RCStatPress on a really compressed cache",
        "Compress the context's KV cache with RCStatPress (paper eq. 9; evicted entries are "
        "freed), answer the question on it, and compare with the full-cache answer. Needs the "
        "rcstat[press] extra.",
    )
    add_text_options(co, (("context", "context text"), ("question", "question text")))
    co.add_argument(
        "--questions-file",
        default=None,
        metavar="PATH",
        help="several questions on the context, one a line, answered in one batch (the "
        "padded batch decodes like each question alone)",
    )
    co.add_argument(
        "--threshold",
        type=float,
        default=None,
        help=f"c of eq. 9, threshold mode (default: {knob_default('threshold')})",
    )
    co.add_argument(
        "--ratio",
        type=float,
        default=None,
        help="target compression ratio in [0, 1): target-ratio mode instead of --threshold",
    )
    add_press_options(co, sweep=False)
    add_max_new_tokens_option(co, CompressConfig.max_new_tokens, "answer length limit")
    co.add_argument(
        "--no-full",
        dest="full",
        action="store_false",
        default=None,
        help="skip the full-cache answer used for comparison",
    )
    add_special_tokens_option(co)
    add_json_option(
        co,
        "answers, eviction ratios per layer and KV head, KV memory in bytes, the full-cache "
        "answers",
        "the tables",
    )


def from_namespace(ns: argparse.Namespace) -> JsonArgs[CompressConfig]:
    """The checked config of ``rcstat compress`` (a flag left out keeps the config's
    default)."""
    texts = read_texts(ns, ["context", "question"])
    if ns.questions_file == "-" and ns.context_file == "-":
        raise ValueError(
            "only one option can read standard input: --context-file or --questions-file"
        )
    questions = _questions(ns.questions_file, texts["question"] is not None)
    window = ns.window
    if window is not None and window != QUESTION_WINDOW:
        window = int_list("--window", [window])[0]
    config = CompressConfig.from_dict(
        flag_values(
            CompressConfig,
            ns,
            **texts,
            questions=questions,
            window=window,
            knobs=knob_values(ns),
            press_scope=ns.question_placement,
            devices=Devices.from_namespace(ns),
        )
    )
    return JsonArgs(config, json=bool(ns.json))


def _questions(path: str | None, single: bool) -> tuple[str, ...]:
    """The non-empty lines of ``--questions-file`` (none without it)."""
    if path is None:
        return ()
    if single:
        raise ValueError("give --question (one) or --questions-file (several), not both")
    return read_lines_option("--questions-file", path, "question")


def run(args: JsonArgs[CompressConfig]) -> int:
    """Answer on the compressed cache; print the answers, the ratios and the KV memory (or the
    ``--json`` object)."""
    from rcstat.report.console import compression_table, format_bytes, kv_memory_line

    result = run_compress(args.config, loader=load_model_quietly, step=step)
    if args.json:
        print_json(result.to_dict())
        return 0
    for index, (question, report, full) in enumerate(
        zip(result.questions, result.reports, result.fulls, strict=True), 1
    ):
        _print_answers(index, question, report, full, several=result.batched)
    if not result.batched:
        console.print(compression_table(result.reports[0]))
        console.print(kv_memory_line(result.reports[0]))
        return 0
    table = Table(title=f"{len(result.questions)} questions answered in one batch")
    for column in ("#", "ratio", "KV full → live", "ROUGE-L vs full"):
        table.add_column(column, justify="right")
    for index, (report, agreement) in enumerate(
        zip(result.reports, result.agreements(), strict=True), 1
    ):
        memory = f"{format_bytes(report.dense_bytes)} → {format_bytes(report.live_bytes)}"
        score = "-" if agreement is None else f"{agreement:.3f}"
        table.add_row(str(index), f"{report.ratio:.3f}", memory, score)
    console.print(table)
    return 0


def _print_answers(index: int, question: str, report: Any, full: Any, *, several: bool) -> None:
    """Print one question's compressed answer and, when ``full`` is given, the full cache's
    and their agreement (ROUGE-L)."""
    if several:
        console.print(escape(f"question {index}: {question}"))
    console.print(escape(answer_line("answer (compressed cache)", report.answer, report.finished)))
    if full is None:
        return
    console.print(escape(answer_line("answer (full cache)      ", full.text, full.finished)))
    if not several:
        note = "" if full.agreement == 1.0 else "  [yellow]the answers differ[/yellow]"
        console.print(f"agreement with the full cache: ROUGE-L {full.agreement:.3f}{note}")
