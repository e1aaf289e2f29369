"""``rcstat demo``: the paper's two contrasting examples (§5.1), on texts written for rcstat.

The same question and answer are analysed after a context that supports them and after an
unrelated context. As in the paper, the context is the prompt and question + answer form the
generation (``question_placement="generation"``). The demo prints the head counts above τ
side by side and writes an HTML report with both heatmaps; it then compresses the supporting
context with RCStatPress and attributes the answer to the sentences of both contexts.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from rcstat.cli._common import (
    HelpFormatter,
    add_model_option,
    check_output_folder,
    console,
    load_model_quietly,
    number,
    staged_output,
    step,
)
from rcstat.defaults import DEFAULT_TAU
from rcstat.report.console import format_bytes
from rcstat.report.html import Panel, Section, figure_png, render_report
from rcstat.report.plots import heatmap

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis, Statistic
    from rcstat.attribution import Attribution

NAME = "demo"

_MAPS: tuple[Statistic, ...] = ("upper", "normalized")
_MEDIANS: tuple[Statistic, ...] = ("upper", "expected", "normalized")

QUESTION = "In which year did the Harrowgate lighthouse stop using a lamp keeper?"
ANSWER = "The Harrowgate lighthouse stopped using a lamp keeper in 1962, when it was automated."

SUPPORTING = (
    "The Harrowgate lighthouse stands on a granite spur at the northern end of Kessel Bay. "
    "It was built in 1871 by the harbour board after two grain ships ran aground on the spur "
    "in the same winter. For ninety years a resident lamp keeper lived in the cottage at its "
    "base, trimming the wick every four hours and winding the clockwork that turned the lens. "
    "In 1962 the light was automated: an electric lamp and a timer replaced the keeper, who "
    "moved to the village and later ran the harbour museum. Today the tower is painted white "
    "with a single red band, and its beam can be seen twenty-two nautical miles out to sea."
)

UNRELATED = (
    "Sourdough bread rises because of a culture of wild yeast and lactic acid bacteria. "
    "Bakers keep the culture alive by feeding it flour and water every day, discarding part "
    "of it before each feeding so that it does not grow without limit. The bacteria produce "
    "lactic and acetic acids, which give the bread its sour taste and help it keep longer. "
    "A long, cool fermentation overnight develops more flavour than a short, warm one, and "
    "steam in the first minutes of baking lets the loaf expand before the crust sets. The "
    "finished crumb should be open and glossy, with irregular holes of different sizes."
)


def summary_rows(results: dict[str, HeadAnalysis], tau: float) -> dict[str, dict[str, float]]:
    """Head counts above the thresholds and median statistics, one column per example."""
    rows: dict[str, dict[str, float]] = {}
    thresholds: tuple[tuple[str, Statistic, float], ...] = (
        (f"heads with upper bound A > {tau}", "upper", tau),
        (f"heads with expected E > {tau}", "expected", tau),
        ("heads with normalized RC > 0.5", "normalized", 0.5),
    )
    for label, by, threshold in thresholds:
        rows[label] = {n: r.count_above(threshold, by) for n, r in results.items()}
    for stat in _MEDIANS:
        rows[f"median {stat}"] = {n: float(np.median(r.values(stat))) for n, r in results.items()}
    return rows


def _maps_panel(
    name: str, result: HeadAnalysis, tau: float, limits: dict[Statistic, tuple[float, float]]
) -> Panel:
    import matplotlib.pyplot as plt

    images = []
    for by in _MAPS:
        fig, ax = plt.subplots(figsize=(5, 6))
        heatmap(
            result.values(by),
            ax=ax,
            label=by,
            title=f"{name}: {by}",
            vmin=limits[by][0],
            vmax=limits[by][1],
        )
        images.append(figure_png(fig))
    return Panel(
        heading=f"{name} context",
        texts=[
            f"A > {tau}: {result.count_above(tau)} heads; "
            f"normalized RC > 0.5: {result.count_above(0.5, 'normalized')} heads"
        ],
        preformatted=[result.prompt_text, result.generation_text],
        images=images,
    )


def _sorted_heads_png(results: dict[str, HeadAnalysis], tau: float) -> bytes:
    """Per-head RC sorted in decreasing order (the paper's Fig. 4b)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, result in results.items():
        ax.plot(np.sort(result.upper.ravel())[::-1], label=f"{name}: upper bound A")
        ax.plot(np.sort(result.expected.ravel())[::-1], "--", label=f"{name}: expected E")
    ax.axhline(tau, color="grey", lw=0.8)
    ax.set_xlabel("heads, sorted")
    ax.set_ylabel("RC (raw scores)")
    ax.legend(fontsize=8)
    return figure_png(fig)


def _table_html(rows: dict[str, dict[str, float]]) -> str:
    names = next(iter(rows.values())).keys()
    head = "<tr><th>statistic</th>" + "".join(f"<th>{n}</th>" for n in names) + "</tr>"
    body = "".join(
        f"<tr><td>{label}</td>" + "".join(f"<td>{v:g}</td>" for v in values.values()) + "</tr>"
        for label, values in rows.items()
    )
    return f"<table>{head}{body}</table>"


_ATTRIBUTION_NOTE = (
    "Context: the unrelated text followed by the supporting one, split into sentences. "
    "attribution.html shades every context token by its attribution to the answer, one panel "
    "per method."
)


def attribution_summary(result: Attribution) -> str:
    """One line: the sentence each method attributes the (single-sentence) answer to."""
    picks = {
        result.method: result.attributed[0],
        "all heads": result.scores_for("all", None)[1][0],
        "mean attention": result.attention_scores()[1][0],
    }
    parts = [
        f"{name} → {'none' if i is None else repr(result.spans[i].text)}"
        for name, i in picks.items()
    ]
    return "Attribution of the answer: " + "; ".join(parts)


def run_contrast(model_name: str | None, out: Path, tau: float) -> int:
    """Analyse both examples, print the counts side by side, write ``report.html``."""
    from rcstat.analysis import analyze
    from rcstat.attribution import Attributor

    check_output_folder(out, NAME)
    model, tokenizer = load_model_quietly(model_name)
    results = {}
    for name, context in (("supporting", SUPPORTING), ("unrelated", UNRELATED)):
        with step(f"analysing the {name} example…"):
            results[name] = analyze(
                model,
                tokenizer,
                context=context,
                question=QUESTION,
                answer=ANSWER,
                question_placement="generation",
            )
    from rcstat.press.answer import compress_and_answer
    from rcstat.press.rcstat_press import RCStatPress

    with step("compressing the supporting context (RCStatPress, c = 1)…"):
        compression = compress_and_answer(
            model, tokenizer, SUPPORTING, QUESTION, RCStatPress(threshold=1.0), max_new_tokens=40
        )
    memory = (
        f"RCStatPress (c = 1, w = 8) evicted {compression.ratio:.1%} of the KV entries of the "
        f"{compression.context_tokens}-token context; KV cache "
        f"{format_bytes(compression.dense_bytes)} → {format_bytes(compression.live_bytes)} live. "
        "Answer on the compressed cache: "
        f"{compression.answer!r}"
    )
    with step("attributing the answer to the sentences of both contexts…"):
        attribution = Attributor(model, tokenizer).attribute(
            UNRELATED + " " + SUPPORTING, QUESTION, ANSWER, granularity="sentence"
        )
    grounding = attribution_summary(attribution)
    rows = summary_rows(results, tau)
    table = Table(title=f"{results['supporting'].expected.size} heads, τ = {tau}")
    table.add_column("statistic")
    for name in results:
        table.add_column(name, justify="right")
    for label, values in rows.items():
        table.add_row(label, *(f"{v:g}" for v in values.values()))
    console.print(table)
    console.print(escape(memory))
    console.print(escape(grounding))

    limits = {
        by: (
            min(float(r.values(by).min()) for r in results.values()),
            max(float(r.values(by).max()) for r in results.values()),
        )
        for by in _MAPS
    }
    report = render_report(
        "rcstat demo: supporting vs unrelated context",
        [
            Section(
                "Head counts",
                [
                    Panel(
                        "summary",
                        table_html=_table_html(rows),
                        images=[_sorted_heads_png(results, tau)],
                    )
                ],
                intro="Same question and answer (the generation) after two contexts (the "
                "prompt). The paper (§5.1) reports 130 vs 12 heads with A > 1.5 on "
                "LLaMA-3.2-3B.",
            ),
            Section(
                "KV-cache compression",
                [Panel("RCStatPress on the ragged cache", texts=[memory])],
            ),
            Section(
                "Attribution",
                [Panel("eq. 10, sentence level", texts=[grounding, _ATTRIBUTION_NOTE])],
            ),
            Section(
                "Per-head maps (shared colour scale)",
                [_maps_panel(name, r, tau, limits) for name, r in results.items()],
            ),
        ],
    )
    with staged_output(out, NAME) as stage:
        for name, result in results.items():
            result.to_frame().to_csv(stage / f"scores_{name}.csv", index=False)
            result.save(stage / f"scores_{name}.json")
        (stage / "report.html").write_text(report, encoding="utf-8")
        attribution.to_html(stage / "attribution.html")
        (stage / "attribution.json").write_text(attribution.to_json(), encoding="utf-8")
        summary = {
            "tau": tau,
            "rows": rows,
            "compression": asdict(compression),
            "attribution": grounding,
        }
        (stage / "summary.json").write_text(json.dumps(summary, indent=1))
    console.print(f"report written to {escape(str(out / 'report.html'))}")
    return 0


def register(sub: Any) -> None:
    """Add ``demo`` to the sub-command parsers ``sub``."""
    demo = sub.add_parser(
        NAME,
        help="contrast a supporting and an unrelated context; compress; attribute",
        description="The paper's two contrasting examples on the embedded model: head counts, "
        "a compressed-cache answer beside the full-cache one, and attribution, in an HTML "
        "report.",
        formatter_class=HelpFormatter,
    )
    add_model_option(demo)
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument("--tau", type=float, default=DEFAULT_TAU, help="threshold on the upper bound")


@dataclass
class DemoArgs:
    """Arguments of ``rcstat demo`` (checked)."""

    model: str | None
    out: Path
    tau: float

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> DemoArgs:
        return cls(model=ns.model, out=Path(ns.out), tau=number("--tau", ns.tau))


def run(args: DemoArgs) -> int:
    """Run the demo (see the module docstring)."""
    return run_contrast(args.model, args.out, args.tau)


def from_namespace(ns: argparse.Namespace) -> DemoArgs:
    """The checked arguments of ``rcstat demo``."""
    return DemoArgs.from_namespace(ns)
