"""The results of the dataset benchmarks: what a run (or ``rcstat merge``) summarised, and
the lines the command line prints for it (:meth:`lines`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.press.options import KNOBS
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "AttributionResult",
    "GroundingResult",
    "KVResult",
    "Outcome",
    "comparison_table",
    "paired_table",
    "part_done",
    "table_lines",
]


@dataclass
class Outcome(ABC):
    """Where a run stands after ``run(config)``: summarised, or this process's part done
    while another shard still works (then ``summary`` is None)."""

    out: Path
    shard: Shard
    merged: bool

    @property
    def part_only(self) -> bool:
        """This process's part is done but the run is not merged (another shard works)."""
        return self.shard.split and not self.merged

    def part_line(self) -> str:
        """What a process of a data-parallel run says when its part is done before the others."""
        return part_done(self.out, self.shard)

    def lines(self) -> list[str]:
        """What the command prints: the summary's lines and where they were written, or
        :meth:`part_line` while another shard still works."""
        summary = self.summary_lines()
        if summary is None:
            return [self.part_line()]
        return [*summary, f"results written to {self.out}/"]

    @abstractmethod
    def summary_lines(self) -> list[str] | None:
        """The lines of the summary (None while another shard still works)."""


@dataclass
class KVResult(Outcome):
    """The outcome of :func:`run`: the summary (per setting), the paired comparison with the
    best baseline and the head scatter; all None while another shard still works."""

    summary: pd.DataFrame | None = None
    comparison: pd.DataFrame | None = None
    scatter: pd.DataFrame | None = None

    def summary_lines(self) -> list[str] | None:
        """What ``rcstat bench kv`` prints about the summary."""
        heading = "RCStat − the best baseline at each ratio, paired over examples:"
        lines = table_lines(self.summary, heading, comparison_table(self.comparison))
        if lines is not None and self.scatter is not None:
            attrs = self.scatter.attrs
            lines.append(
                f"per-head ratio vs RC: Spearman rho = {attrs['spearman_rho']:.2f} "
                f"(p = {attrs['spearman_p']:.1e}, {attrs['examples']} examples)"
            )
        return lines


def part_done(out: Path, shard: Shard) -> str:
    """What process ``shard`` of a data-parallel run into ``out`` says when its part is done
    before the others (every dataset job says the same)."""
    return (
        f"{shard}: part done in {out / 'parts' / shard.name}; the last shard to finish merges "
        f"the run (or run `rcstat merge {out}`)"
    )


def comparison_table(frame: pd.DataFrame | None) -> str | None:
    """``comparison.csv`` of a bench kv run as a short text table (None when empty)."""
    if frame is None or frame.empty:
        return None
    knobs = [c for c in ("window", *KNOBS) if c in frame]
    varying = [c for c in knobs if frame[c].nunique() > 1]  # RCStat's knobs
    return paired_table(frame, ["subset", "ratio", *varying, "metric", "quotient"])


def paired_table(frame: pd.DataFrame | None, first: Sequence[str]) -> str | None:
    """The rows of a paired comparison (:mod:`rcstat.metrics.paired`) as a short text table:
    its ``first`` columns (what is compared), then the baseline, the difference with its
    interval, the share of wins and the number of examples (None when empty)."""
    if frame is None or frame.empty:
        return None
    shown = frame[[*first, "baseline", "difference", "low", "high", "win_share", "examples"]]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3g}")


def table_lines(table: pd.DataFrame | None, heading: str, compared: str | None) -> list[str] | None:
    """A summary ``table``, then the ``compared`` text table under its ``heading`` (when there
    is one); None without a table (another shard still works)."""
    if table is None:
        return None
    lines = [table.to_string(index=False)]
    return lines if compared is None else [*lines, heading, compared]


@dataclass
class AttributionResult(Outcome):
    """The outcome of :func:`run`: the accuracy table (per method and ``k``) and the paired
    comparison; None while another shard still works."""

    accuracy: pd.DataFrame | None = None
    comparison: pd.DataFrame | None = None

    def summary_lines(self) -> list[str] | None:
        """What ``rcstat bench attribution`` prints about the accuracy."""
        heading = "paired over examples (accuracy points, 95 % bootstrap interval):"
        return table_lines(self.accuracy, heading, paired_table(self.comparison, ["method", "k"]))


@dataclass
class GroundingResult(Outcome):
    """The outcome of :func:`run`: ``report.json``'s content (None while another shard
    works)."""

    report: dict[str, Any] | None = None

    def summary_lines(self) -> list[str] | None:
        """What ``rcstat bench grounding`` prints about the report."""
        if self.report is None:
            return None
        report = self.report
        if "note" in report:  # no metric could be computed (e.g. one class only)
            lines = [f"note: {report['note']}"]
        else:
            import pandas as pd

            table = pd.DataFrame(report["metrics"])
            lines = [table.to_string(index=False, float_format=lambda v: f"{v:.3f}")]
        probe = report.get("probe", {})
        if "note" in probe:
            lines.append(f"probe: not trained ({probe['note']})")
        elif probe:
            folds = ", ".join(f"{k} features {v['auroc']:.3f}" for k, v in probe.items())
            lines.append(f"probe (grouped 5-fold, out-of-fold AUROC): {folds}")
        spans = report.get("spans", {})
        if "rcstat_zero_shot_token_auroc" in spans:
            lines.append(
                f"span level (token AUROC on unwanted spans): zero-shot "
                f"{spans['rcstat_zero_shot_token_auroc']:.3f}, probe "
                + ", ".join(f"{k} {v:.3f}" for k, v in spans["probe_token_auroc"].items())
            )
        return lines
