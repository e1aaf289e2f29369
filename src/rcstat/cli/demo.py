"""``rcstat demo``: the paper's two contrasting examples (§5.1), on texts written for rcstat.

The same question and answer are analysed after a context that supports them and after an
unrelated context. As in the paper, the context is the prompt and question + answer form the
generation (``question_placement="generation"``). The demo prints the head counts above τ
side by side and writes an HTML report with both heatmaps and their per-head difference.

It then answers the question on the full KV cache of the supporting context and on caches
compressed by RCStatPress at two settings (:data:`SETTINGS`): a *faithful* one, whose answer
equals the full-cache answer on the default model, and a *strong* one, whose answer may not.
Each compressed answer is shown beside the full-cache one with its ROUGE-L against it, and a
warning when the two differ — a compressed answer alone cannot tell whether the compression
changed it. Without the ``rcstat[press]`` extra the full-cache answer is still shown and the
compression part says how to install the extra. Finally the answer is attributed to the
sentences of both contexts (``attribution.html``, linked from the report).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_number
from rcstat.cli._common import (
    CUT_MARK,
    HelpFormatter,
    Placement,
    add_model_option,
    answer_line,
    check_output_folder,
    console,
    load_model_quietly,
    staged_output,
    step,
)
from rcstat.defaults import DEFAULT_TAU, DEFAULT_TOP_K, DEFAULT_WINDOW, INSTALL_PRESS
from rcstat.report.console import format_bytes
from rcstat.report.html import Panel, Section, figure_png, html_table, render_report
from rcstat.report.plots import difference_heatmap, heatmap

if TYPE_CHECKING:
    from rcstat.analysis import HeadAnalysis, Statistic
    from rcstat.attribution import Attribution
    from rcstat.press.answer import CompressionReport

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


@dataclass(frozen=True)
class DemoTexts:
    """The demo's question, answer and two contexts."""

    question: str
    answer: str
    supporting: str
    unrelated: str


DEMO_TEXTS = DemoTexts(QUESTION, ANSWER, SUPPORTING, UNRELATED)


@dataclass(frozen=True)
class Setting:
    """One RCStatPress setting the demo compresses the supporting context with."""

    name: str
    threshold: float  # c of eq. (9): a token is evicted from a head when s_i <= c · mean s_i


#: Chosen by measuring c = 0.2 … 1.5 on the default model (README, "The demo"): every c up to
#: 0.6 answers exactly as the full cache, and c = 0.5 (23 % of the KV entries evicted) sits
#: inside that range, not at its edge; c = 1 (the paper's setting) evicts 49 % and answers
#: "… in 2022" where the context says 1962.
SETTINGS = (Setting("faithful", 0.5), Setting("strong", 1.0))
#: Token limit of the full-cache and compressed answers (the full answer needs 28).
MAX_NEW_TOKENS = 40


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


@dataclass(frozen=True)
class CompressedAnswer:
    """The answer on a cache compressed at one setting, compared with the full-cache answer."""

    setting: Setting
    report: CompressionReport
    rouge_l: float  # ROUGE-L F1 against the full-cache answer
    same_as_full: bool  # the same text (up to white space), finished or cut alike

    def label(self) -> str:
        return f"{self.setting.name} (c = {self.setting.threshold:g})"

    def warning(self) -> str:
        """Why this answer must not be trusted as the model's answer ("" when it agrees)."""
        if self.same_as_full:
            return ""
        return (
            f"{self.label()}: the compressed-cache answer differs from the full-cache answer "
            f"(ROUGE-L {self.rouge_l:.2f}); the compression changed what the model says."
        )


@dataclass(frozen=True)
class AnswerComparison:
    """The full-cache answer and the compressed-cache answers of the supporting context."""

    full_answer: str
    full_finished: bool
    context_tokens: int
    max_new_tokens: int
    compressed: list[CompressedAnswer] = field(default_factory=list)
    missing_extra: str = ""  # why there are no compressed answers (kvpress not installed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.max_new_tokens,
            "window": DEFAULT_WINDOW,
            "full": {"answer": self.full_answer, "finished": self.full_finished},
            "settings": [
                {
                    "name": c.setting.name,
                    "threshold": c.setting.threshold,
                    "rougeL_vs_full": c.rouge_l,
                    "same_as_full": c.same_as_full,
                    **asdict(c.report),
                }
                for c in self.compressed
            ],
            "missing_extra": self.missing_extra,
        }


def compare_answers(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    settings: tuple[Setting, ...] = SETTINGS,
    *,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> AnswerComparison:
    """Answer on the full cache, then on a cache compressed at each of ``settings``.

    Both use the same prompt split and greedy decoding (:mod:`rcstat.press.answer`). Without
    kvpress only the full-cache answer is computed and ``missing_extra`` says what to install.
    """
    from rcstat.press.answer import answer_full, split_context_question
    from rcstat.press.extra import has_kvpress

    with step("answering on the full KV cache…"):
        full = answer_full(model, tokenizer, context, question, max_new_tokens=max_new_tokens)
    full_answer = tokenizer.decode(full.ids, skip_special_tokens=True)
    context_tokens = int(split_context_question(tokenizer, context, question)[0].shape[1])
    if not has_kvpress():
        missing = (
            "KV-cache compression needs the rcstat[press] extra (kvpress), which is not "
            f"installed; install it with: {INSTALL_PRESS}"
        )
        return AnswerComparison(
            full_answer, full.finished, context_tokens, max_new_tokens, missing_extra=missing
        )
    from rcstat.evaluation.metrics import rouge_f1
    from rcstat.press.answer import compress_and_answer
    from rcstat.press.rcstat_press import RCStatPress

    compressed = []
    for setting in settings:
        what = f"{setting.name}: RCStatPress, c = {setting.threshold:g}"
        with step(f"compressing the context and answering ({what})…"):
            report = compress_and_answer(
                model,
                tokenizer,
                context,
                question,
                RCStatPress(threshold=setting.threshold),
                max_new_tokens=max_new_tokens,
            )
        rouge_l = rouge_f1(report.answer, [full_answer])["rougeL"]
        same = _same_text(report.answer, full_answer) and report.finished == full.finished
        compressed.append(CompressedAnswer(setting, report, rouge_l, same))
    return AnswerComparison(full_answer, full.finished, context_tokens, max_new_tokens, compressed)


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


def _answers_panel(comparison: AnswerComparison) -> Panel:
    def shown(text: str, finished: bool) -> str:
        return text + ("" if finished else CUT_MARK)

    dense = comparison.compressed[0].report.dense_bytes if comparison.compressed else None
    header = ["cache", "KV entries evicted", "KV cache live", "answer", "ROUGE-L vs full", ""]
    rows: list[list[object]] = [
        [
            "full",
            "0 %",
            "—" if dense is None else format_bytes(dense),
            shown(comparison.full_answer, comparison.full_finished),
            "",
            "reference",
        ]
    ]
    classes = [""]
    notices = []
    for item in comparison.compressed:
        report = item.report
        rows.append(
            [
                item.label(),
                f"{report.ratio:.1%}",
                f"{format_bytes(report.live_bytes)} of {format_bytes(report.dense_bytes)}",
                shown(report.answer, report.finished),
                f"{item.rouge_l:.2f}",
                "same answer" if item.same_as_full else "⚠ differs",
            ]
        )
        classes.append("" if item.same_as_full else "differs")
        if item.same_as_full:
            notices.append(
                f"✓ {item.label()}: the same answer as the full cache with {report.ratio:.0%} "
                "of the KV entries evicted."
            )
    texts = [comparison.missing_extra] if comparison.missing_extra else []
    return Panel(
        "full cache vs compressed caches",
        texts=texts,
        preformatted=[INSTALL_PRESS] if comparison.missing_extra else [],
        table_html=html_table(header, rows, text_columns=[0, 3], row_classes=classes),
        warnings=[item.warning() for item in comparison.compressed if not item.same_as_full],
        notices=notices,
    )


def _answers_intro(comparison: AnswerComparison) -> str:
    return (
        f"The question answered greedily (at most {comparison.max_new_tokens} new tokens) after "
        f"the {comparison.context_tokens}-token supporting context, on its full KV cache and on "
        f"caches compressed by RCStatPress (paper eq. 9, window w = {DEFAULT_WINDOW}; c: the "
        "eviction threshold relative to the mean score). ROUGE-L is measured against the "
        "full-cache answer. The settings were chosen on the default model, where the faithful "
        "one keeps the full-cache answer and the strong one, evicting more, changes it."
    )


def _difference_panel(results: dict[str, HeadAnalysis]) -> Panel:
    import matplotlib.pyplot as plt

    supporting, unrelated = results["supporting"], results["unrelated"]
    images, texts = [], []
    for by in _MAPS:
        fig, ax = plt.subplots(figsize=(5, 6))
        difference_heatmap(
            supporting.values(by),
            unrelated.values(by),
            ax=ax,
            label=f"{by}: supporting − unrelated",
            title=f"{by}: supporting − unrelated",
        )
        images.append(figure_png(fig))
        higher = int((supporting.values(by) > unrelated.values(by)).sum())
        texts.append(
            f"{by}: {higher} of {supporting.values(by).size} heads are higher after the "
            "supporting context."
        )
    return Panel("per-head difference", texts=texts, images=images)


_DIFFERENCE_INTRO = (
    "Per head, the statistic after the supporting context minus the same statistic after the "
    "unrelated one, on a diverging colour map centred at 0: red heads contextualize more with "
    "the supporting context, blue heads with the unrelated one, white heads do not change."
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
    names = list(next(iter(rows.values())).keys())
    body = [[label, *(f"{v:g}" for v in values.values())] for label, values in rows.items()]
    return html_table(["statistic", *names], body, text_columns=[0])


_ATTRIBUTION_NOTE = (
    "Context: the unrelated text followed by the supporting one, split into sentences. The "
    "attribution page shades every context token by its attribution to the answer (this "
    "method, all heads, mean attention) and ranks the sentences by score."
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


def run_contrast(
    model_name: str | None,
    out: Path,
    tau: float,
    *,
    texts: DemoTexts | None = None,
    settings: tuple[Setting, ...] | None = None,
    max_new_tokens: int | None = None,
    placement: Placement | None = None,
) -> int:
    """Analyse both examples, compare full-cache and compressed answers, attribute the answer,
    print the results and write ``report.html`` (linking ``attribution.html``) into ``out``.

    ``texts``, ``settings`` and ``max_new_tokens`` default to :data:`DEMO_TEXTS`,
    :data:`SETTINGS` and :data:`MAX_NEW_TOKENS` (tests give shorter texts to tiny models).
    """
    from rcstat.analysis import analyze
    from rcstat.attribution import Attributor

    texts = DEMO_TEXTS if texts is None else texts
    settings = SETTINGS if settings is None else settings
    max_new_tokens = MAX_NEW_TOKENS if max_new_tokens is None else max_new_tokens

    check_output_folder(out, NAME)
    model, tokenizer = load_model_quietly(model_name, placement)
    results = {}
    for name, context in (("supporting", texts.supporting), ("unrelated", texts.unrelated)):
        with step(f"analysing the {name} example…"):
            results[name] = analyze(
                model,
                tokenizer,
                context=context,
                question=texts.question,
                answer=texts.answer,
                question_placement="generation",
            )
    comparison = compare_answers(
        model, tokenizer, texts.supporting, texts.question, settings, max_new_tokens=max_new_tokens
    )
    heads = results["supporting"].expected.size
    with step("attributing the answer to the sentences of both contexts…"):
        attribution = Attributor(model, tokenizer, top_k=min(DEFAULT_TOP_K, heads)).attribute(
            texts.unrelated + " " + texts.supporting,
            texts.question,
            texts.answer,
            granularity="sentence",
        )
    grounding = attribution_summary(attribution)
    rows = summary_rows(results, tau)
    lengths = ", ".join(f"{n} {r.prompt_len}" for n, r in results.items())
    table = Table(title=f"{heads} heads, τ = {tau}", caption=f"prompt tokens: {lengths}")
    table.add_column("statistic")
    for name in results:
        table.add_column(name, justify="right")
    for label, values in rows.items():
        table.add_row(label, *(f"{v:g}" for v in values.values()))
    console.print(table)
    print_answers(comparison)
    console.print(grounding, markup=False)

    with step("writing the report…"):
        report = _report(results, rows, tau, comparison, grounding, lengths)
        with staged_output(out, NAME) as stage:
            for name, result in results.items():
                result.to_frame().to_csv(stage / f"scores_{name}.csv", index=False)
                result.save(stage / f"scores_{name}.json")
            (stage / "report.html").write_text(report, encoding="utf-8")
            attribution.to_html(stage / "attribution.html")
            (stage / "attribution.json").write_text(attribution.to_json(), encoding="utf-8")
            summary = {
                "tau": tau,
                "prompt_tokens": {n: r.prompt_len for n, r in results.items()},
                "rows": rows,
                "compression": comparison.to_dict(),
                "attribution": grounding,
            }
            (stage / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    console.print(f"report written to {escape(str(out / 'report.html'))}")
    return 0


def _report(
    results: dict[str, HeadAnalysis],
    rows: dict[str, dict[str, float]],
    tau: float,
    comparison: AnswerComparison,
    grounding: str,
    lengths: str,
) -> str:
    limits = {
        by: (
            min(float(r.values(by).min()) for r in results.values()),
            max(float(r.values(by).max()) for r in results.values()),
        )
        for by in _MAPS
    }
    return render_report(
        "rcstat demo: supporting vs unrelated context",
        [
            Section(
                "Head counts",
                [
                    Panel(
                        "summary",
                        texts=[f"Prompt tokens: {lengths}."],
                        table_html=_table_html(rows),
                        images=[_sorted_heads_png(results, tau)],
                    )
                ],
                intro="Same question and answer (the generation) after two contexts (the "
                "prompt). The paper (§5.1) reports 130 vs 12 heads with A > 1.5 on "
                "LLaMA-3.2-3B. Raw counts depend on the model's score scale and on the "
                "prompt length, so compare them only between prompts of similar length.",
            ),
            Section(
                "Answers: full KV cache vs compressed",
                [_answers_panel(comparison)],
                intro=_answers_intro(comparison),
            ),
            Section(
                "Supporting − unrelated, per head",
                [_difference_panel(results)],
                intro=_DIFFERENCE_INTRO,
            ),
            Section(
                "Attribution",
                [
                    Panel(
                        "eq. 10, sentence level",
                        texts=[grounding, _ATTRIBUTION_NOTE],
                        links=[
                            (
                                "attribution.html",
                                "Open the attribution page (attribution.html, next to this report)",
                            )
                        ],
                    )
                ],
            ),
            Section(
                "Per-head maps (shared colour scale)",
                [_maps_panel(name, r, tau, limits) for name, r in results.items()],
            ),
        ],
    )


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
    placement: Placement

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> DemoArgs:
        return cls(
            model=ns.model,
            out=Path(ns.out),
            tau=check_number("--tau", ns.tau),
            placement=Placement.from_namespace(ns),
        )


def run(args: DemoArgs) -> int:
    """Run the demo (see the module docstring)."""
    return run_contrast(args.model, args.out, args.tau, placement=args.placement)


def from_namespace(ns: argparse.Namespace) -> DemoArgs:
    """The checked arguments of ``rcstat demo``."""
    return DemoArgs.from_namespace(ns)
