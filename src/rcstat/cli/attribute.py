"""``rcstat attribute``: attribute an answer to context chunks, sentences or tokens (eq. 10).

The work is :func:`rcstat.commands.attribute.run` (its options and their defaults:
:class:`~rcstat.commands.attribute.AttributeConfig`); this module parses the flags into that
config (reading ``--chunks-file`` and the text files), calls it with the command line's model
loader and progress lines, and prints the answer and a table of its attributed spans.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import (
    CUT_MARK,
    Devices,
    JsonArgs,
    add_command,
    add_config_option,
    answer_line,
    clip,
    console,
    flag_values,
    load_model_quietly,
    print_json_result,
    read_file_option,
    read_texts,
)
from rcstat.cli._common import step as show_step
from rcstat.cli.model_option import check_top_k
from rcstat.cli.options import (
    add_attribution_options,
    add_json_option,
    add_language_option,
    add_max_new_tokens_option,
    add_out_option,
    add_special_tokens_option,
    add_text_options,
)
from rcstat.commands.attribute import (
    GRANULARITIES,
    NAME,
    RANKINGS,
    AttributeConfig,
    AttributeResult,
)
from rcstat.commands.attribute import run as run_attribute

__all__ = ["NAME", "from_namespace", "parse_chunks", "register", "run"]


def register(sub: Any) -> None:
    """Add ``attribute`` to the sub-command parsers ``sub`` (the defaults are the config's)."""
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
        choices=list(GRANULARITIES),
        default=None,
        help="candidate spans (default: chunk for --chunks-file, else sentence)",
    )
    add_config_option(at, AttributeConfig, "top_k", int, "number of heads")
    add_config_option(
        at, AttributeConfig, "ranking", str, "how heads are chosen", choices=list(RANKINGS)
    )
    add_attribution_options(at)
    add_max_new_tokens_option(at, AttributeConfig.max_new_tokens, "length of a generated answer")
    add_language_option(at)
    add_out_option(at, NAME)
    add_special_tokens_option(at)
    add_json_option(
        at,
        "the texts, the heads, the candidate spans, every answer unit's span scores and "
        "attributed span",
        "the table",
    )


def from_namespace(ns: argparse.Namespace) -> JsonArgs[AttributeConfig]:
    """The checked config of ``rcstat attribute`` (a flag left out keeps the config's default)
    and whether to print ``--json``; ``--top-k`` beyond the heads of ``--model``'s config is
    refused before it loads."""
    if ns.chunks_file == "-" and "-" in (ns.context_file, ns.question_file, ns.answer_file):
        raise ValueError("only one option can read standard input")
    texts = read_texts(ns, ["context", "question", "answer"])
    context: str | list[str] | None = texts.pop("context")
    if ns.chunks_file is not None:
        if context is not None:
            raise ValueError("give --context/--context-file or --chunks-file, not both")
        context = parse_chunks(ns.chunks_file)
    config = AttributeConfig.from_dict(
        flag_values(
            AttributeConfig,
            ns,
            **texts,
            context=context,
            devices=Devices.from_namespace(ns),
            out=ns.out,
        )
    )
    if config.ranking != "all":  # --ranking all uses every head, whatever --top-k says
        check_top_k(config.top_k, config.model)
    return JsonArgs(config, json=bool(ns.json))


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


def attribution_table(result: AttributeResult) -> Table:
    """Each answer unit with its attributed span, the span's score and the span mean attention
    picks (clipped to one line; ``—``: none)."""
    attribution = result.attribution
    table = Table(title=f"attribution ({escape(attribution.method)})")
    table.add_column("answer unit")
    table.add_column("attributed span")
    table.add_column("score", justify="right")
    table.add_column("mean attention picks")
    baseline = attribution.attention_scores()[1]
    for u, (unit, picked, score_row, other) in enumerate(
        zip(attribution.units, attribution.attributed, attribution.scores, baseline, strict=True)
    ):
        span = "—" if picked is None else clip(attribution.spans[picked].text)
        alt = "—" if other is None else clip(attribution.spans[other].text)
        score = "—" if picked is None else f"{score_row[picked]:.3f}"
        text = clip(unit.text) + ("" if attribution.unit_complete(u) else CUT_MARK)
        table.add_row(escape(text), escape(span), score, escape(alt))
    return table


def run(args: JsonArgs[AttributeConfig]) -> int:
    """Attribute the answer's sentences; write attribution.{csv,json,npz,html}; print a table
    (or the ``--json`` object)."""
    config = args.config
    result = run_attribute(config, loader=load_model_quietly, step=show_step)
    if args.json:
        print_json_result(result.to_dict(), config.out)
        return 0
    attribution = result.attribution
    console.print(escape(answer_line("answer", attribution.answer, attribution.finished)))
    console.print(attribution_table(result))
    console.print(f"results written to {escape(str(config.out))}/ (open attribution.html)")
    return 0
