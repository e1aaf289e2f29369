"""What ``rcstat heads`` found: the summary of a run folder, and the comparison of two runs,
with the lines the command line prints for them (:meth:`HeadsResult.lines`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd

from rcstat.defaults import DEFAULT_TAU
from rcstat.evaluation.bench.results import part_done
from rcstat.heads.table import RUN_FILES, read_heads
from rcstat.runs.folder import staged_output
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from rcstat.heads.comparison import Comparison
    from rcstat.heads.summary import HeadSummary

__all__ = ["CompareResult", "HeadsResult", "compare_runs", "summarize_run"]

COMMAND = "heads"


@dataclass
class HeadsResult:
    """The outcome of :func:`run` / :func:`summarize_run`: the summary of the whole folder
    (None while another shard still works), the errors of this call, and the per-example log."""

    out: Path
    shard: Shard = field(default_factory=Shard)
    summary: HeadSummary | None = None
    top: int = 10
    errors: dict[str, str] = field(default_factory=dict)
    log: pd.DataFrame | None = None

    def lines(self) -> list[str]:
        """What ``rcstat heads`` prints."""
        lines = []
        if self.errors:
            lines.append(
                f"{len(self.errors)} example(s) failed and were skipped (see "
                f"{self.out / 'examples.csv'}); first: {next(iter(self.errors.values()))}"
            )
        if self.summary is None:
            return [*lines, part_done(self.out, self.shard)]
        return [*lines, *_summary_lines(self.summary, self.top), *self._timing()]

    def _timing(self) -> list[str]:
        log, lines = self.log, []
        if log is not None:
            ok = log[log["error"] == ""]
            if len(ok):
                seconds = pd.to_numeric(ok["seconds"])
                # the merged run's examples: this process did only its shard of them
                whose = f" by the {self.shard.count} shards" if self.shard.split else ""
                lines.append(
                    f"{len(ok)} examples analysed{whose} ({len(log) - len(ok)} failed): "
                    f"{seconds.mean():.2f} s per example on average"
                )
            cut = int((ok["finished"] == "False").sum())
            if cut:
                lines.append(
                    f"{cut} generated answer(s) were cut at --max-new-tokens (finished = False "
                    f"in {self.out / 'examples.csv'})"
                )
        return [*lines, f"results written to {self.out}/"]


def _summary_lines(summary: HeadSummary, top: int) -> list[str]:
    counts = summary.counts
    stability = (
        "n/a (one example)"
        if summary.stability_mean is None
        else f"mean {summary.stability_mean:.3f}, median {summary.stability_median:.3f}"
    )
    table = summary.top(top)[["rank", "layer", "head", "p5", "p25", "p50", "p75", "p95", "max"]]
    table = table.rename(columns={"p50": "median"})
    return [
        f"{summary.n_examples} examples, {summary.n_layers} layers × {summary.n_heads} heads, "
        f"statistic {summary.statistic}",
        f"heads > τ = {summary.tau:g} per example: mean {counts['above_tau'].mean():.1f}, "
        f"median {counts['above_tau'].median():g}; > dataset p95 ({summary.p95:.3f}): mean "
        f"{counts['above_p95'].mean():.1f}",
        f"ranking stability (pairwise Spearman between examples): {stability}",
        f"top {summary.top_n} heads by median: mean relative depth {summary.mean_depth:.2f} "
        "(0 = first layer, 1 = last)",
        f"top {min(top, len(summary.percentiles))} heads by median",
        table.to_string(index=False, float_format=lambda v: f"{v:.3f}"),
    ]


def summarize_run(
    out: Path, settings: Mapping[str, Any], heads: pd.DataFrame | None = None
) -> HeadsResult:
    """Summarise and plot the whole ``heads.csv`` of ``out`` (a run or a merged run):
    ``summary.json``, ``summary.md``, ``percentiles.csv``, ``counts.csv`` and the figures.

    ``heads`` (the table a run just returned) is summarised instead of reading ``heads.csv``
    again when it holds exactly the folder's analysed examples in the file's order (those of
    ``examples.csv``), i.e. it is the file's content."""
    from rcstat.heads.summary import summarize
    from rcstat.report.heads_plots import (
        plot_head_distributions,
        plot_median_heatmap,
        plot_percentile_bands,
    )
    from rcstat.report.plots import save_figure

    statistic, tau, top = settings["statistic"], settings["tau"], settings["top"]
    heads_csv, log_path = out / "heads.csv", out / "examples.csv"
    if not heads_csv.is_file():
        raise ValueError(f"no example could be analysed (see {log_path})")
    log = pd.read_csv(log_path, dtype=str, keep_default_na=False) if log_path.is_file() else None
    analysed = None if log is None else log.loc[log["error"] == "", "id"].tolist()
    if heads is not None and heads["example"].unique().tolist() == analysed:
        everything = heads  # what the run just read: the whole folder
    else:
        everything = read_heads(heads_csv)  # the summary describes the whole folder
    summary = summarize(everything, statistic=statistic, tau=tau)
    with staged_output(out, COMMAND, keep=RUN_FILES.row_names()) as stage:
        (stage / "summary.json").write_text(
            json.dumps(summary.to_dict(), indent=1), encoding="utf-8"
        )
        (stage / "summary.md").write_text(summary.to_markdown(top), encoding="utf-8")
        summary.percentiles.to_csv(stage / "percentiles.csv", index=False)
        summary.counts.to_csv(stage / "counts.csv", index=False)
        save_figure(
            plot_head_distributions(everything, statistic, tau=tau), stage / "distributions.png"
        )
        save_figure(plot_percentile_bands(summary), stage / "percentile_bands.png")
        save_figure(plot_median_heatmap(summary), stage / "median_heatmap.png")
    return HeadsResult(out, Shard(), summary, top, log=log)


@dataclass
class CompareResult:
    """The outcome of :func:`compare_runs`."""

    out: Path
    comparison: Comparison

    def lines(self) -> list[str]:
        """What ``rcstat heads --compare`` prints."""
        c = self.comparison
        la, lb = c.labels
        stats = c.count_stats().rename(
            columns={
                "n": "examples",
                "mean_above_tau": "mean > τ",
                "median_above_tau": "median > τ",
                "mean_above_common": "mean > common",
                "median_above_common": "median",
            }
        )
        lines = [
            f"{la} vs {lb}: heads per example (τ = {c.tau:g}; common = pooled p95 = "
            f"{c.common_threshold:.3f})",
            stats.to_string(index=False, float_format=lambda v: f"{v:.1f}"),
        ]
        for name, test in c.tests.items():
            what = f"> τ = {c.tau:g}" if name == "tau" else "> common"
            lines.append(
                f"Mann–Whitney U ({what}): U = {test.u:g}, p = {test.p_value:.3g}, "
                f"rank-biserial r = {test.effect:+.3f} (r > 0: {lb} has more)"
            )
        lines.append(
            f"Spearman correlation of per-head medians: {c.rank_correlation:.3f}; "
            f"mean depth of top heads: {la} {c.a.mean_depth:.2f}, {lb} {c.b.mean_depth:.2f}"
        )
        return [*lines, f"results written to {self.out}/"]


def compare_runs(
    runs: tuple[Path, Path],
    labels: tuple[str, str],
    out: Path,
    *,
    statistic: Literal["upper", "expected"] = "upper",
    tau: float = DEFAULT_TAU,
) -> CompareResult:
    """Compare the ``heads.csv`` of two earlier runs; write ``comparison.json``,
    ``comparison.md``, ``counts.csv`` and ``comparison.png`` into ``out``."""
    from rcstat.heads.comparison import compare
    from rcstat.report.heads_plots import plot_comparison
    from rcstat.report.plots import save_figure

    frames = [read_heads(run / "heads.csv") for run in runs]
    comparison = compare(
        frames[0],
        frames[1],
        labels=labels,
        statistic=statistic,
        tau=tau,
    )
    with staged_output(out, "heads --compare") as stage:
        payload = {"runs": [str(run) for run in runs], **comparison.to_dict()}
        (stage / "comparison.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
        (stage / "comparison.md").write_text(comparison.to_markdown(), encoding="utf-8")
        comparison.counts.to_csv(stage / "counts.csv", index=False)
        save_figure(plot_comparison(comparison), stage / "comparison.png")
    return CompareResult(out, comparison)
