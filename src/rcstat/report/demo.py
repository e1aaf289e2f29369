"""The demo's HTML report (``rcstat demo``): head counts, full vs compressed answers, the
per-head difference of the two contexts, the attribution link and the per-head maps.

It renders plain data through the small protocols below (what :class:`~rcstat.analysis.
HeadAnalysis` and :class:`~rcstat.demo.AnswerComparison` provide); it imports no application.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from rcstat.defaults import DEFAULT_WINDOW, INSTALL_PRESS
from rcstat.report.console import CUT_MARK, format_bytes
from rcstat.report.html import Panel, Section, figure_png, html_table, render_report
from rcstat.report.plots import difference_heatmap, heatmap

__all__ = ["MAPS", "HeadScores", "render_demo_report"]

#: The statistics drawn as per-head maps.
MAPS = ("upper", "normalized")


class HeadScores(Protocol):
    """Per-head scores of one example (:class:`~rcstat.analysis.HeadAnalysis`)."""

    prompt_text: str
    generation_text: str

    def values(self, by: Any) -> np.ndarray: ...
    def count_above(self, threshold: float, by: Any = ...) -> int: ...


class CompressedRun(Protocol):
    """One compressed-cache answer compared with the full-cache one."""

    @property
    def report(self) -> Any: ...  # answer, finished, ratio, dense_bytes, live_bytes
    @property
    def rouge_l(self) -> float: ...
    @property
    def same_as_full(self) -> bool: ...
    def label(self) -> str: ...
    def warning(self) -> str: ...


class Comparison(Protocol):
    """The full-cache answer and the compressed ones (:class:`~rcstat.demo.AnswerComparison`)."""

    @property
    def full_answer(self) -> str: ...
    @property
    def full_finished(self) -> bool: ...
    @property
    def context_tokens(self) -> int: ...
    @property
    def max_new_tokens(self) -> int: ...
    @property
    def missing_extra(self) -> str: ...
    @property
    def compressed(self) -> Sequence[CompressedRun]: ...


def _shown(text: str, finished: bool) -> str:
    return text + ("" if finished else CUT_MARK)


def _answers_panel(comparison: Comparison) -> Panel:
    dense = comparison.compressed[0].report.dense_bytes if comparison.compressed else None
    header = ["cache", "KV entries evicted", "KV cache live", "answer", "ROUGE-L vs full", ""]
    rows: list[list[object]] = [
        [
            "full",
            "0 %",
            "—" if dense is None else format_bytes(dense),
            _shown(comparison.full_answer, comparison.full_finished),
            "",
            "reference",
        ]
    ]
    classes, notices = [""], []
    for item in comparison.compressed:
        report = item.report
        rows.append(
            [
                item.label(),
                f"{report.ratio:.1%}",
                f"{format_bytes(report.live_bytes)} of {format_bytes(report.dense_bytes)}",
                _shown(report.answer, report.finished),
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
    return Panel(
        "full cache vs compressed caches",
        texts=[comparison.missing_extra] if comparison.missing_extra else [],
        preformatted=[INSTALL_PRESS] if comparison.missing_extra else [],
        table_html=html_table(header, rows, text_columns=[0, 3], row_classes=classes),
        warnings=[item.warning() for item in comparison.compressed if not item.same_as_full],
        notices=notices,
    )


def _difference_panel(results: Mapping[str, HeadScores]) -> Panel:
    import matplotlib.pyplot as plt

    supporting, unrelated = results["supporting"], results["unrelated"]
    images, texts = [], []
    for by in MAPS:
        fig, ax = plt.subplots(figsize=(5, 6))
        title = f"{by}: supporting − unrelated"
        difference_heatmap(
            supporting.values(by), unrelated.values(by), ax=ax, label=title, title=title
        )
        images.append(figure_png(fig))
        higher = int((supporting.values(by) > unrelated.values(by)).sum())
        texts.append(
            f"{by}: {higher} of {supporting.values(by).size} heads are higher after the "
            "supporting context."
        )
    return Panel("per-head difference", texts=texts, images=images)


def _maps_panel(
    name: str, result: HeadScores, tau: float, limits: Mapping[str, tuple[float, float]]
) -> Panel:
    import matplotlib.pyplot as plt

    images = []
    for by in MAPS:
        fig, ax = plt.subplots(figsize=(5, 6))
        low, high = limits[by]
        heatmap(result.values(by), ax=ax, label=by, title=f"{name}: {by}", vmin=low, vmax=high)
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


def _sorted_heads_png(results: Mapping[str, HeadScores], tau: float) -> bytes:
    """Per-head RC sorted in decreasing order (the paper's Fig. 4b)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, result in results.items():
        ax.plot(np.sort(result.values("upper").ravel())[::-1], label=f"{name}: upper bound A")
        ax.plot(np.sort(result.values("expected").ravel())[::-1], "--", label=f"{name}: expected E")
    ax.axhline(tau, color="grey", lw=0.8)
    ax.set_xlabel("heads, sorted")
    ax.set_ylabel("RC (raw scores)")
    ax.legend(fontsize=8)
    return figure_png(fig)


def _table_html(rows: Mapping[str, Mapping[str, float]]) -> str:
    names = list(next(iter(rows.values())).keys())
    body = [[label, *(f"{v:g}" for v in values.values())] for label, values in rows.items()]
    return html_table(["statistic", *names], body, text_columns=[0])


def render_demo_report(
    results: Mapping[str, HeadScores],
    rows: Mapping[str, Mapping[str, float]],
    tau: float,
    comparison: Comparison,
    grounding: str,
    lengths: str,
    texts: Mapping[str, str],
) -> str:
    """The demo's report page; ``texts`` holds its title and intros (the demo's data file)."""
    limits = {
        by: (
            min(float(r.values(by).min()) for r in results.values()),
            max(float(r.values(by).max()) for r in results.values()),
        )
        for by in MAPS
    }
    answers_intro = texts["answers_intro"].format(
        max_new_tokens=comparison.max_new_tokens,
        context_tokens=comparison.context_tokens,
        window=DEFAULT_WINDOW,
    )
    summary = Panel(
        "summary",
        texts=[f"Prompt tokens: {lengths}."],
        table_html=_table_html(rows),
        images=[_sorted_heads_png(results, tau)],
    )
    attribution = Panel(
        "eq. 10, sentence level",
        texts=[grounding, texts["attribution_note"]],
        links=[
            (
                "attribution.html",
                "Open the attribution page (attribution.html, next to this report)",
            )
        ],
    )
    return render_report(
        texts["title"],
        [
            Section("Head counts", [summary], intro=texts["head_counts_intro"]),
            Section(
                "Answers: full KV cache vs compressed",
                [_answers_panel(comparison)],
                intro=answers_intro,
            ),
            Section(
                "Supporting − unrelated, per head",
                [_difference_panel(results)],
                intro=texts["difference_intro"],
            ),
            Section("Attribution", [attribution]),
            Section(
                "Per-head maps (shared colour scale)",
                [_maps_panel(name, r, tau, limits) for name, r in results.items()],
            ),
        ],
    )
