"""``rcstat analyze``: per-head RC scores of one example (paper §5.1)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    Devices,
    add_command,
    answer_line,
    check_output_folder,
    console,
    load_model_quietly,
    read_texts,
    staged_output,
    step,
)
from rcstat.cli.options import (
    add_max_new_tokens_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TAU

NAME = "analyze"
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
    """Add ``analyze`` to the sub-command parsers ``sub``."""
    an = add_command(
        sub,
        NAME,
        "per-head RC scores of one example",
        "Per-head RC statistics of one example from one forward pass: chat mode (--context, "
        "--question, optional --answer) or raw mode (--prompt, optional --generation).",
    )
    add_text_options(an, _TEXTS)
    add_out_option(an, NAME)
    an.add_argument("--tau", type=float, default=DEFAULT_TAU, help="threshold for head counts")
    an.add_argument("--top", type=int, default=10, help="rows of the top-heads table")
    an.add_argument(
        "--head",
        type=parse_head,
        action="append",
        help="LAYER.HEAD: also plot that head's cross vs self scores (repeatable)",
    )
    an.add_argument(
        "--question-placement",
        choices=["prompt", "generation"],
        default="prompt",
        help="chat mode: the question ends the prompt or starts the generation",
    )
    add_max_new_tokens_option(an, DEFAULT_MAX_NEW_TOKENS, "length of a generated answer")
    an.add_argument("--scaled", action="store_true", help="use <q,k>/sqrt(d) instead of raw")
    an.add_argument(
        "--lower-bound",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compute the lower bound a (default: where it is free, i.e. not on CUDA with Triton)",
    )
    add_special_tokens_option(an)


@dataclass
class AnalyzeArgs:
    """Arguments of ``rcstat analyze`` (checked)."""

    inputs: dict[str, Any]
    model: str | None
    devices: Devices
    out: Path
    tau: float
    top: int
    heads: list[tuple[int, int]]
    max_new_tokens: int
    scaled: bool
    lower_bound: bool | None
    allow_special_tokens: bool

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> AnalyzeArgs:
        texts = read_texts(ns, [name for name, _ in _TEXTS])
        for name, text in texts.items():
            if text is not None and not text.strip():
                raise ValueError(f"--{name}: is empty or whitespace only")
        chat = [f"--{n}" for n in ("context", "question", "answer") if texts[n] is not None]
        raw = [f"--{n}" for n in ("prompt", "generation") if texts[n] is not None]
        if chat and raw:
            raise ValueError(
                f"give chat-mode inputs ({', '.join(chat)}) or raw-mode inputs "
                f"({', '.join(raw)}), not both"
            )
        if raw:
            if texts["prompt"] is None:
                raise ValueError("raw mode needs --prompt (or --prompt-file)")
            inputs: dict[str, Any] = {"prompt": texts["prompt"], "generation": texts["generation"]}
        else:
            if texts["context"] is None or texts["question"] is None:
                raise ValueError("give --context and --question (chat mode) or --prompt (raw mode)")
            inputs = {
                "context": texts["context"],
                "question": texts["question"],
                "answer": texts["answer"],
                "question_placement": ns.question_placement,
            }
        heads = list(ns.head or [])
        for layer, head in heads:
            if layer < 0 or head < 0:
                raise ValueError(f"--head {layer}.{head}: layer and head are >= 0")
        return cls(
            inputs=inputs,
            model=ns.model,
            devices=Devices.from_namespace(ns),
            out=Path(ns.out),
            tau=check_number("--tau", ns.tau),
            top=check_count("--top", ns.top),
            heads=heads,
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            scaled=ns.scaled,
            lower_bound=ns.lower_bound,
            allow_special_tokens=ns.allow_special_tokens,
        )


def top_heads_table(result: Any, k: int, tau: float) -> Table:
    """The top-``k`` heads of a :class:`~rcstat.analysis.HeadAnalysis` by expected RC, with
    the counts of heads above ``tau``."""
    layers, heads = result.shape
    table = Table(
        title=(
            f"top {k} of {layers * heads} heads by expected RC — "
            f"A > {tau}: {result.count_above(tau, 'upper')} heads, "
            f"E > {tau}: {result.count_above(tau, 'expected')} heads"
        )
    )
    names = ("expected", "upper", "lower", "normalized")
    shown = [name for name in names if name in result.statistics]
    for name in ("layer", "head", *shown):
        table.add_column(name, justify="right")
    for row in result.top(k).to_dict("records"):
        table.add_row(str(row["layer"]), str(row["head"]), *(f"{row[name]:.3f}" for name in shown))
    return table


def run(args: AnalyzeArgs) -> int:
    """Analyse one example and write scores.csv, scores.json, heatmap.png (+ head plots)."""
    from rcstat.analysis import analyze
    from rcstat.capture import attention_layout
    from rcstat.report.plots import heatmap, save_figure, score_distributions

    check_output_folder(args.out, NAME)
    model, tokenizer = load_model_quietly(args.model, args.devices)
    layout = attention_layout(model)
    for layer, head in args.heads:
        if layer >= layout.num_layers or head >= layout.num_heads:
            raise ValueError(
                f"--head {layer}.{head} does not exist: the model has {layout.num_layers} "
                f"layers × {layout.num_heads} heads"
            )
    with step("generating and analysing (one forward pass)…"):
        result = analyze(
            model,
            tokenizer,
            **args.inputs,
            max_new_tokens=args.max_new_tokens,
            scaled=args.scaled,
            lower_bound=args.lower_bound,
            keep_samples=args.heads,
            allow_special_tokens=args.allow_special_tokens,
        )
    with step("writing results…"), staged_output(args.out, NAME) as stage:
        result.to_frame().to_csv(stage / "scores.csv", index=False)
        result.save(stage / "scores.json")
        save_figure(
            heatmap(
                result.values("upper"),
                label="upper",
                title=f"upper bound A per head (τ = {args.tau:g})",
            ),
            stage / "heatmap.png",
        )
        for sample in result.samples:
            fig = score_distributions(
                sample.cross, sample.self_, title=f"layer {sample.layer}, head {sample.head}"
            )
            save_figure(fig, stage / f"head_{sample.layer}_{sample.head}.png")
    # User text and paths may contain [brackets]: escape them, they are not rich markup.
    finished = result.generation_finished
    console.print(escape(answer_line("generation", result.generation_text, finished)))
    console.print(top_heads_table(result, k=args.top, tau=args.tau))
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


#: The checked arguments of ``rcstat analyze``.
from_namespace = AnalyzeArgs.from_namespace
