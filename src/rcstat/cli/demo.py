"""``rcstat demo``: the paper's two contrasting examples (§5.1), on texts written for rcstat.

The work is the library's: :func:`rcstat.demo.run` of a :class:`~rcstat.demo.DemoConfig` (its
texts are data, ``demo_texts.json``) loads the model, contrasts the two examples and writes the
report with the scores (:meth:`rcstat.demo.DemoResult.write`; the report is
:mod:`rcstat.report.demo`); this command parses, calls it and prints the head counts side by
side, the full-cache and compressed-cache answers (with a warning when they differ) and the
attribution line.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import (
    Devices,
    add_command,
    answer_line,
    console,
    load_model_quietly,
    step,
)
from rcstat.cli.options import add_out_option
from rcstat.demo import (
    DEMO_TEXTS,
    MAX_NEW_TOKENS,
    NAME,
    SETTINGS,
    AnswerComparison,
    DemoConfig,
    DemoResult,
    DemoTexts,
    Setting,
)
from rcstat.report.console import format_bytes

__all__ = ["from_namespace", "register", "run", "run_contrast"]


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
    """``rcstat demo`` with other texts, settings or answer length (tests give shorter texts
    to tiny models): the config checked, then :func:`run`."""
    config = DemoConfig(
        model=model_name,
        devices=devices or Devices(),
        out=out,
        tau=tau,
        texts=DEMO_TEXTS if texts is None else texts,
        settings=SETTINGS if settings is None else settings,
        max_new_tokens=MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens,
    )
    config.check()
    return run(config)


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
    demo.add_argument(
        "--tau", type=float, default=DemoConfig.tau, help="threshold on the upper bound, >= 0"
    )


def from_namespace(ns: argparse.Namespace) -> DemoConfig:
    """The checked config of ``rcstat demo`` (``ValueError`` naming the flag)."""
    config = DemoConfig(
        model=ns.model,
        out=Path(ns.out),
        tau=ns.tau,
        # this module's names, which a test replaces with short texts for a tiny model
        texts=DEMO_TEXTS,
        max_new_tokens=MAX_NEW_TOKENS,
    )
    config.check()
    config.devices = Devices.from_namespace(ns)  # last: it may ask torch for the GPUs
    return config


def run(config: DemoConfig) -> int:
    """Run the demo (:func:`rcstat.demo.run`, which writes the report into ``config.out``);
    print the head counts, the answers and the attribution line."""
    from rcstat.demo import run as run_demo

    result = run_demo(config, loader=load_model_quietly, step=step)
    console.print(_counts_table(result))
    print_answers(result.comparison)
    console.print(result.grounding, markup=False)
    if config.out is not None:
        console.print(f"report written to {escape(str(config.out / 'report.html'))}")
    return 0
