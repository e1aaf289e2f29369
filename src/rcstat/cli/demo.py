"""``rcstat demo``: the paper's two contrasting examples (§5.1), on texts written for rcstat.

The job is :func:`rcstat.demo.run` (its texts are data, ``demo_texts.json``) and the report is
:mod:`rcstat.report.demo`; this command loads the model, prints the head counts side by side,
the full-cache and compressed-cache answers (with a warning when they differ) and the
attribution line, and writes the report with the scores.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_number
from rcstat.cli._common import (
    Devices,
    add_command,
    answer_line,
    check_output_folder,
    console,
    load_model_quietly,
    staged_output,
    step,
)
from rcstat.cli.options import add_out_option
from rcstat.defaults import DEFAULT_TAU
from rcstat.demo import (
    DEMO_TEXTS,
    MAX_NEW_TOKENS,
    SETTINGS,
    AnswerComparison,
    DemoResult,
    DemoTexts,
    Setting,
)
from rcstat.report.attribution_html import save_attribution_page
from rcstat.report.console import format_bytes

__all__ = ["run_contrast"]

NAME = "demo"


def print_answers(comparison: AnswerComparison) -> None:
    """The full-cache answer, each compressed answer with its agreement, and the warnings."""
    console.print(
        f"Answers on the supporting context ({comparison.context_tokens} tokens, greedy, at "
        f"most {comparison.max_new_tokens} new tokens):",
        markup=False,
    )
    console.print(
        answer_line("  full cache", comparison.full_answer, comparison.full_finished), markup=False
    )
    if comparison.missing_extra:
        console.print(f"  {comparison.missing_extra}", markup=False)
        return
    for item in comparison.compressed:
        report = item.report
        console.print(
            answer_line(f"  {item.label()}", report.answer, report.finished), markup=False
        )
        agreement = "same answer as the full cache" if item.same_as_full else "DIFFERS"
        console.print(
            f"    {report.ratio:.1%} of the KV entries evicted (KV cache "
            f"{format_bytes(report.dense_bytes)} → {format_bytes(report.live_bytes)} live); "
            f"ROUGE-L vs full {item.rouge_l:.2f}: {agreement}",
            markup=False,
        )
        if not item.same_as_full:
            console.print(f"  [bold red]⚠ WARNING: {escape(item.warning())}[/]")


def _counts_table(result: DemoResult) -> Table:
    heads = result.results["supporting"].expected.size
    table = Table(
        title=f"{heads} heads, τ = {result.tau}", caption=f"prompt tokens: {result.lengths}"
    )
    table.add_column("statistic")
    for name in result.results:
        table.add_column(name, justify="right")
    for label, values in result.rows.items():
        table.add_row(label, *(f"{v:g}" for v in values.values()))
    return table


def run_contrast(
    model_name: str | None,
    out: Path,
    tau: float,
    *,
    texts: DemoTexts | None = None,
    settings: tuple[Setting, ...] | None = None,
    max_new_tokens: int | None = None,
    devices: Devices | None = None,
) -> int:
    """Run :func:`rcstat.demo.run`, print the results and write ``report.html`` (linking
    ``attribution.html``), the scores and ``summary.json`` into ``out``.

    ``texts``, ``settings`` and ``max_new_tokens`` default to :data:`DEMO_TEXTS`,
    :data:`SETTINGS` and :data:`MAX_NEW_TOKENS` (tests give shorter texts to tiny models).
    """
    from rcstat.demo import run as run_demo

    check_output_folder(out, NAME)
    model, tokenizer = load_model_quietly(model_name, devices)
    result = run_demo(
        model,
        tokenizer,
        tau,
        texts=DEMO_TEXTS if texts is None else texts,
        settings=SETTINGS if settings is None else settings,
        max_new_tokens=MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens,
        step=step,
    )
    console.print(_counts_table(result))
    print_answers(result.comparison)
    console.print(result.grounding, markup=False)
    with step("writing the report…"):
        report = result.report_html()
        with staged_output(out, NAME) as stage:
            for name, scores in result.results.items():
                scores.to_frame().to_csv(stage / f"scores_{name}.csv", index=False)
                scores.save(stage / f"scores_{name}.json")
            (stage / "report.html").write_text(report, encoding="utf-8")
            save_attribution_page(stage / "attribution.html", result.attribution)
            (stage / "attribution.json").write_text(result.attribution.to_json(), encoding="utf-8")
            summary = json.dumps(result.summary(), indent=1)
            (stage / "summary.json").write_text(summary, encoding="utf-8")
    console.print(f"report written to {escape(str(out / 'report.html'))}")
    return 0


def register(sub: Any) -> None:
    """Add ``demo`` to the sub-command parsers ``sub``."""
    demo = add_command(
        sub,
        NAME,
        "contrast a supporting and an unrelated context; compress; attribute",
        "The paper's two contrasting examples on the embedded model: head counts, a "
        "compressed-cache answer beside the full-cache one, and attribution, in an HTML report.",
    )
    add_out_option(demo, NAME)
    demo.add_argument("--tau", type=float, default=DEFAULT_TAU, help="threshold on the upper bound")


@dataclass
class DemoArgs:
    """Arguments of ``rcstat demo`` (checked)."""

    model: str | None
    out: Path
    tau: float
    devices: Devices

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> DemoArgs:
        return cls(
            model=ns.model,
            out=Path(ns.out),
            tau=check_number("--tau", ns.tau),
            devices=Devices.from_namespace(ns),
        )


def run(args: DemoArgs) -> int:
    """Run the demo (see the module docstring)."""
    return run_contrast(args.model, args.out, args.tau, devices=args.devices)


#: The checked arguments of ``rcstat demo``.
from_namespace = DemoArgs.from_namespace
