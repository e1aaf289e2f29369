"""``rcstat attribute``: attribute an answer to context chunks, sentences or tokens (eq. 10)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_count, check_language
from rcstat.cli._common import (
    CUT_MARK,
    Devices,
    add_command,
    answer_line,
    check_output_folder,
    clip,
    console,
    load_model_quietly,
    read_file_option,
    read_texts,
    staged_output,
    step,
)
from rcstat.cli.options import (
    add_attribution_options,
    add_language_option,
    add_max_new_tokens_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
    check_span_score,
    check_top_k,
)
from rcstat.defaults import DEFAULT_LANGUAGE, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TOP_K
from rcstat.report.attribution_html import save_attribution_page

NAME = "attribute"
RANKINGS = ("top", "bottom", "all", "top_post_softmax", "bottom_post_softmax")


def register(sub: Any) -> None:
    """Add ``attribute`` to the sub-command parsers ``sub``."""
    at = add_command(
        sub,
        NAME,
        "attribute an answer to context chunks/sentences/tokens",
        "Attribute each sentence of the answer to the context spans it comes from, with the "
        "top-k RC heads (paper eq. 10), from one forward pass.",
    )
    add_text_options(
        at,
        (
            ("context", "context text"),
            ("question", "question text"),
            ("answer", "answer to attribute (generated when absent)"),
        ),
    )
    at.add_argument(
        "--chunks-file",
        default=None,
        metavar="PATH",
        help="context as chunks: a JSON list of strings, or paragraphs separated by blank "
        "lines ('-': standard input)",
    )
    at.add_argument(
        "--granularity",
        choices=["chunk", "sentence", "token"],
        default=None,
        help="candidate spans (default: chunk for --chunks-file, else sentence)",
    )
    at.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, help="number of heads")
    at.add_argument("--ranking", choices=RANKINGS, default="top", help="how heads are chosen")
    add_attribution_options(at)
    add_max_new_tokens_option(at, DEFAULT_MAX_NEW_TOKENS, "length of a generated answer")
    add_language_option(at)
    add_out_option(at, NAME)
    add_special_tokens_option(at)


@dataclass
class AttributeArgs:
    """Arguments of ``rcstat attribute`` (checked)."""

    model: str | None
    devices: Devices
    context: str | list[str]
    question: str
    answer: str | None
    granularity: str | None
    top_k: int
    ranking: str
    statistic: str
    max_new_tokens: int
    out: Path
    allow_special_tokens: bool = False
    language: str = DEFAULT_LANGUAGE
    span_score: str = "sentence"
    question_first: bool = False

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> AttributeArgs:
        if ns.chunks_file == "-" and "-" in (ns.context_file, ns.question_file, ns.answer_file):
            raise ValueError("only one option can read standard input")
        texts = read_texts(ns, ["context", "question", "answer"])
        context: str | list[str] | None = texts["context"]
        if ns.chunks_file is not None:
            if context is not None:
                raise ValueError("give --context/--context-file or --chunks-file, not both")
            context = parse_chunks(ns.chunks_file)
        question = texts["question"]
        if context is None or question is None:
            raise ValueError(
                "attribute needs a context (--context, --context-file or --chunks-file) "
                "and --question"
            )
        if texts["answer"] is not None and not texts["answer"].strip():
            raise ValueError("--answer is empty or whitespace only")
        if ns.ranking != "all":  # --ranking all uses every head, whatever --top-k says
            check_top_k(ns.top_k, ns.model)
        return cls(
            model=ns.model,
            devices=Devices.from_namespace(ns),
            context=context,
            question=question,
            answer=texts["answer"],
            granularity=ns.granularity,
            top_k=check_count("--top-k", ns.top_k),
            ranking=ns.ranking,
            statistic=ns.statistic,
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            out=Path(ns.out),
            allow_special_tokens=ns.allow_special_tokens,
            language=check_language(ns.language),
            span_score=check_span_score(ns.span_score, ns.statistic),
            question_first=ns.question_first,
        )


def parse_chunks(path: str) -> list[str]:
    """A JSON list of strings, or a text whose blank-line-separated paragraphs are chunks."""
    text = read_file_option("--chunks-file", path)
    if path.endswith(".json") or text.lstrip().startswith("["):
        try:
            chunks = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--chunks-file {path}: invalid JSON ({err})") from err
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            raise ValueError(f"--chunks-file {path}: expected a JSON list of strings")
        return chunks
    return [c.strip() for c in text.split("\n\n") if c.strip()]


def run(args: AttributeArgs) -> int:
    """Attribute the answer's sentences; print a table, write attribution.{csv,json,npz,html}."""
    from rcstat.attribution import Attributor

    check_output_folder(args.out, NAME)
    model, tokenizer = load_model_quietly(args.model, args.devices)
    attributor = Attributor(
        model,
        tokenizer,
        top_k=args.top_k,
        head_ranking=args.ranking,  # type: ignore[arg-type]
        statistic=args.statistic,  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
        allow_special_tokens=args.allow_special_tokens,
        language=args.language,
        span_score=args.span_score,  # type: ignore[arg-type]
        question_first=args.question_first,
    )
    with step("attributing (one forward pass)…"):
        result = attributor.attribute(
            args.context,
            args.question,
            args.answer,
            granularity=args.granularity,  # type: ignore[arg-type]
        )
    with step("writing results…"), staged_output(args.out, NAME) as stage:
        result.to_frame().to_csv(stage / "attribution.csv", index=False)
        (stage / "attribution.json").write_text(result.to_json(), encoding="utf-8")
        result.save(stage / "attribution.npz")
        save_attribution_page(stage / "attribution.html", result)
    console.print(escape(answer_line("answer", result.answer, result.finished)))
    table = Table(title=f"attribution ({escape(result.method)})")
    table.add_column("answer unit")
    table.add_column("attributed span")
    table.add_column("score", justify="right")
    table.add_column("mean attention picks")
    baseline = result.attention_scores()[1]
    for u, (unit, picked, score_row, other) in enumerate(
        zip(result.units, result.attributed, result.scores, baseline, strict=True)
    ):
        span = "—" if picked is None else clip(result.spans[picked].text)
        alt = "—" if other is None else clip(result.spans[other].text)
        score = "—" if picked is None else f"{score_row[picked]:.3f}"
        text = clip(unit.text) + ("" if result.unit_complete(u) else CUT_MARK)
        table.add_row(escape(text), escape(span), score, escape(alt))
    console.print(table)
    console.print(f"results written to {escape(str(args.out))}/ (open attribution.html)")
    return 0


#: The checked arguments of ``rcstat attribute``.
from_namespace = AttributeArgs.from_namespace
