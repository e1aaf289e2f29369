"""``rcstat compress``: answer with RCStatPress on a really compressed (ragged) cache."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    Devices,
    add_command,
    answer_line,
    console,
    int_list,
    load_model_quietly,
    read_lines_option,
    read_texts,
    step,
)
from rcstat.cli.options import (
    add_max_new_tokens_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.cli.press_options import add_press_options, check_windows
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.press.options import knob_default

NAME = "compress"


def register(sub: Any) -> None:
    """Add ``compress`` to the sub-command parsers ``sub``."""
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
    add_max_new_tokens_option(co, DEFAULT_MAX_NEW_TOKENS, "answer length limit")
    co.add_argument(
        "--no-full", action="store_true", help="skip the full-cache answer used for comparison"
    )
    add_special_tokens_option(co)


@dataclass
class CompressArgs:
    """Arguments of ``rcstat compress`` (checked)."""

    model: str | None
    devices: Devices
    context: str
    question: str
    threshold: float
    ratio: float | None
    window: int | str
    max_new_tokens: int
    full: bool = True
    allow_special_tokens: bool = False
    group: str | None = None
    score: str = "expected"
    budget: str | None = None
    floor: float = knob_default("floor")
    sinks: int = 0
    question_placement: str = "context"
    questions: tuple[str, ...] = ()  # --questions-file: answered in one batch

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> CompressArgs:
        texts = read_texts(ns, ["context", "question"])
        context, question = texts["context"], texts["question"]
        if ns.questions_file == "-" and ns.context_file == "-":
            raise ValueError(
                "only one option can read standard input: --context-file or --questions-file"
            )
        questions = _questions(ns.questions_file, question is not None)
        if questions:
            question = questions[0]
            if ns.window == QUESTION_WINDOW:
                raise ValueError(
                    "--window question makes each question its own window: answer them one "
                    "at a time with --question"
                )
        if context is None or question is None:
            raise ValueError("compress needs --context (or --context-file) and --question")
        ratio = ns.ratio
        if ratio is not None and ns.threshold is not None:
            raise ValueError(
                "--ratio and --threshold: give one of them (target-ratio or threshold mode)"
            )
        if ratio is not None:
            ratio = check_number("--ratio", ratio, low=0, high=1, high_open=True)
        if ns.budget == "pooled" and ratio is None:
            raise ValueError("--budget pooled needs --ratio (a target ratio for the whole model)")
        return cls(
            model=ns.model,
            devices=Devices.from_namespace(ns),
            context=context,
            question=question,
            threshold=check_number(
                "--threshold",
                knob_default("threshold") if ns.threshold is None else ns.threshold,
                low=0,
            ),
            ratio=ratio,
            window=check_windows([ns.window], ns.question_placement)[0],
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            full=not ns.no_full,
            allow_special_tokens=ns.allow_special_tokens,
            group=ns.group,
            score=ns.score,
            budget=ns.budget,
            floor=check_number("--floor", ns.floor, low=0, high=1),
            sinks=int_list("--sinks", [ns.sinks], low=0)[0],
            question_placement=ns.question_placement,
            questions=questions,
        )


def _questions(path: str | None, single: bool) -> tuple[str, ...]:
    """The non-empty lines of ``--questions-file`` (none without it)."""
    if path is None:
        return ()
    if single:
        raise ValueError("give --question (one) or --questions-file (several), not both")
    return read_lines_option("--questions-file", path, "question")


def run(args: CompressArgs) -> int:
    """Answer on the compressed cache; print the answers, the ratios and the KV memory."""
    from rcstat.press.extra import require_kvpress

    require_kvpress("rcstat compress")
    from rcstat.press.answer import (
        answer_full_batch,
        compress_and_answer,
        compress_and_answer_batch,
    )
    from rcstat.press.rcstat_press import RCStatPress
    from rcstat.report.console import compression_table, format_bytes, kv_memory_line

    question_window = args.window == QUESTION_WINDOW
    press = RCStatPress(
        threshold=args.threshold,
        window_size=DEFAULT_WINDOW if question_window else int(args.window),
        compression_ratio=args.ratio,
        group=args.group,  # type: ignore[arg-type]
        score=args.score,  # type: ignore[arg-type]
        **({} if args.budget is None else {"budget": args.budget}),  # type: ignore[arg-type]
        floor=args.floor,
        sinks=args.sinks,
    )
    model, tokenizer = load_model_quietly(args.model, args.devices)
    questions = list(args.questions) or [args.question]
    contexts = [args.context] * len(questions)
    options: dict[str, Any] = {
        "max_new_tokens": args.max_new_tokens,
        "allow_special_tokens": args.allow_special_tokens,
        "placement": args.question_placement,
    }
    with step(f"compressing the context and answering {len(questions)} question(s)…"):
        if args.questions:  # one padded batch
            reports = compress_and_answer_batch(
                model, tokenizer, contexts, questions, press, **options
            )
        else:
            single = compress_and_answer(
                model, tokenizer, args.context, args.question, press,
                question_window=question_window, **options,
            )  # fmt: skip
            reports = [single]
    fulls: list[Any] = [None] * len(questions)
    if args.full:
        with step("answering with the full cache for comparison…"):
            fulls = answer_full_batch(model, tokenizer, contexts, questions, **options)
    agreements = [
        _print_answers(index, question, report, full, tokenizer, several=bool(args.questions))
        for index, (question, report, full) in enumerate(
            zip(questions, reports, fulls, strict=True), 1
        )
    ]
    if not args.questions:
        console.print(compression_table(reports[0]))
        console.print(kv_memory_line(reports[0]))
        return 0
    table = Table(title=f"{len(questions)} questions answered in one batch")
    for column in ("#", "ratio", "KV full → live", "ROUGE-L vs full"):
        table.add_column(column, justify="right")
    for index, (report, agreement) in enumerate(zip(reports, agreements, strict=True), 1):
        memory = f"{format_bytes(report.dense_bytes)} → {format_bytes(report.live_bytes)}"
        score = "-" if agreement is None else f"{agreement:.3f}"
        table.add_row(str(index), f"{report.ratio:.3f}", memory, score)
    console.print(table)
    return 0


def _print_answers(
    index: int, question: str, report: Any, full: Any, tokenizer: Any, *, several: bool
) -> float | None:
    """Print one question's compressed answer and, when ``full`` is given, the full cache's
    and their agreement (ROUGE-L, returned)."""
    from rcstat.evaluation.metrics import rouge_f1

    if several:
        console.print(escape(f"question {index}: {question}"))
    console.print(escape(answer_line("answer (compressed cache)", report.answer, report.finished)))
    if full is None:
        return None
    text = tokenizer.decode(full.ids, skip_special_tokens=True)
    console.print(escape(answer_line("answer (full cache)      ", text, full.finished)))
    agreement = float(rouge_f1(report.answer, [text])["rougeL"])
    if not several:
        note = "" if agreement == 1.0 else "  [yellow]the answers differ[/yellow]"
        console.print(f"agreement with the full cache: ROUGE-L {agreement:.3f}{note}")
    return agreement


#: The checked arguments of ``rcstat compress``.
from_namespace = CompressArgs.from_namespace
