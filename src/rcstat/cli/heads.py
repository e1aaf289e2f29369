"""``rcstat heads``: dataset-scale head analysis from the command line.

Two modes. **Collect** (default): analyse ``--n`` examples of ``--dataset`` with ``--model``
into ``--out`` (resumable, see :mod:`rcstat.runs`: ``run.json`` records the model and the
options, ``heads.csv`` and ``examples.csv`` grow one example at a time, and a rerun with the
same settings skips what is there), then rebuild from the whole ``heads.csv`` the summary
(``summary.json``, ``summary.md``, ``percentiles.csv``, ``counts.csv``) and the figures
(``distributions.png``, ``percentile_bands.png``, ``median_heatmap.png``).
**Compare** (``--compare RUN_A RUN_B``): read the ``heads.csv`` of two earlier runs and write
``comparison.json``, ``comparison.md``, ``counts.csv`` and ``comparison.png`` into ``--out``.

This module imports only the standard library, rich and rcstat's light modules at import
time, so ``rcstat --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    HelpFormatter,
    Placement,
    add_model_option,
    add_shard_option,
    check_output_folder,
    check_run_options,
    claim_output_folder,
    console,
    load_model_quietly,
    optional_count,
    shard_from_namespace,
    staged_output,
    step,
)
from rcstat.data.registry import DATASETS
from rcstat.defaults import DEFAULT_TAU

if TYPE_CHECKING:
    from rcstat.heads.summary import Comparison, HeadSummary
    from rcstat.runs.shards import Shard

__all__ = ["DATASET_CHOICES", "HeadsArgs", "from_namespace", "register", "run"]

NAME = "heads"
# The registry's datasets with a question (QA and attribution), plus the user's own JSONL.
DATASET_CHOICES = (*(n for n, i in DATASETS.items() if i.task in ("qa", "attribution")), "jsonl")
DEFAULT_OUT = "runs/heads"
DEFAULT_COMPARE_OUT = "runs/heads_compare"
# Files a collect run grows example by example (kept when the summary is rewritten);
# rcstat.heads.collection.ROW_FILES, named here so that `rcstat --help` imports no torch.
_ROWS = ("run.json", "heads.csv", "examples.csv", "parts")


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``heads`` sub-command to ``sub`` (the result of ``add_subparsers``)."""
    p = sub.add_parser(
        NAME,
        formatter_class=HelpFormatter,
        help="per-head RC over a dataset: percentiles, head counts, figures; or compare two runs",
        description=(
            "Analyse every example of a dataset (context = prompt, question + answer = "
            "generation) and summarise each head's RC over the examples (paper §5.1); or, with "
            "--compare, test whether one run's examples have more high-RC heads than another's."
        ),
    )
    add_model_option(p)
    p.add_argument(
        "--dataset",
        default=None,
        metavar="{" + ",".join(DATASET_CHOICES) + "}",
        help="dataset to analyse (default squad_v2); jsonl reads --data as "
        '{"context", "question", "answer"?, "id"?} records',
    )
    p.add_argument("--data", default=None, help="data file (default: the shared slice)")
    p.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    p.add_argument(
        "--out",
        default=None,
        help=f"output folder (default {DEFAULT_OUT}, or {DEFAULT_COMPARE_OUT} with --compare)",
    )
    p.add_argument(
        "--context",
        choices=["full", "relevant"],
        default=None,
        help="qmsum only: whole transcript (default) or the query's relevant turns",
    )
    p.add_argument("--tau", type=float, default=DEFAULT_TAU, help="threshold for head counts")
    p.add_argument(
        "--statistic", choices=["upper", "expected"], default="upper", help="statistic summarised"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=32,
        help="answer length generated for examples without an answer",
    )
    p.add_argument("--top", type=int, default=10, help="rows of the top-heads table")
    p.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help="when resuming, skip the examples that failed instead of analysing them again",
    )
    add_shard_option(p)
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("RUN_A", "RUN_B"),
        default=None,
        help="compare two earlier runs (their --out folders) instead of collecting",
    )
    p.add_argument(
        "--labels", default=None, help="names of RUN_A,RUN_B (default: the folder names)"
    )
    return p


@dataclass
class HeadsArgs:
    """Arguments of ``rcstat heads`` (validated)."""

    model: str | None
    placement: Placement
    dataset: str
    data: str | None
    n: int | None
    out: Path
    context: str | None
    tau: float
    statistic: str
    max_new_tokens: int
    top: int
    compare: tuple[Path, Path] | None
    labels: tuple[str, str] | None
    retry_failed: bool = True
    shard: Shard | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> HeadsArgs:
        """Check the combination of options; raise ``ValueError`` with the fix."""
        optional_count("--n", ns.n)
        check_count("--max-new-tokens", ns.max_new_tokens)
        check_count("--top", ns.top)
        check_number("--tau", ns.tau)
        compare = None
        labels = None
        if ns.compare is not None:
            used = [
                f"--{name}"
                for name in ("model", "dataset", "data", "n", "context", "shard")
                if getattr(ns, name, None) is not None
            ]
            if used:
                raise ValueError(
                    f"--compare reads two earlier runs; {', '.join(used)} do(es) not apply"
                )
            a, b = (Path(v) for v in ns.compare)
            for run in (a, b):
                if not (run / "heads.csv").is_file():
                    raise ValueError(
                        f"--compare: {run} has no heads.csv; give the --out folders of two "
                        "earlier `rcstat heads` runs"
                    )
            compare = (a, b)
            names = [a.resolve().name, b.resolve().name]
            if ns.labels is not None:
                names = [v.strip() for v in ns.labels.split(",")]
                if len(names) != 2 or not all(names):
                    raise ValueError(f"--labels must look like A,B, got {ns.labels!r}")
            if names[0] == names[1]:
                raise ValueError(f"the two runs need distinct --labels, got {names[0]!r} twice")
            labels = (names[0], names[1])
        elif ns.labels is not None:
            raise ValueError("--labels applies to --compare only")
        dataset = (ns.dataset or "squad_v2").strip().lower()
        if compare is None:
            if dataset != "jsonl":
                from rcstat.data.registry import canonical_name

                dataset = canonical_name(dataset)
                if dataset not in DATASET_CHOICES:
                    raise ValueError(
                        f"heads analyses examples with a question; {dataset} has none "
                        f"(choose one of {', '.join(DATASET_CHOICES)})"
                    )
            if dataset == "jsonl" and ns.data is None:
                raise ValueError(
                    '--dataset jsonl needs --data FILE (one {"context", "question", '
                    '"answer"?, "id"?} object per line)'
                )
            if ns.context is not None and dataset != "qmsum":
                raise ValueError("--context applies to --dataset qmsum only")
        out = ns.out or (DEFAULT_COMPARE_OUT if compare else DEFAULT_OUT)
        shard = None if compare else shard_from_namespace(ns)
        placement = Placement.from_namespace(ns)
        return cls(
            model=ns.model,
            placement=placement if shard is None else placement.for_shard(shard),
            dataset=dataset,
            data=ns.data,
            n=ns.n,
            out=Path(out),
            context=ns.context,
            tau=ns.tau,
            statistic=ns.statistic,
            max_new_tokens=ns.max_new_tokens,
            top=ns.top,
            compare=compare,
            labels=labels,
            retry_failed=getattr(ns, "retry_failed", True),
            shard=shard,
        )


def from_namespace(ns: argparse.Namespace) -> HeadsArgs:
    """The checked arguments of ``rcstat heads``."""
    return HeadsArgs.from_namespace(ns)


def run(args: HeadsArgs) -> int:
    """Run ``rcstat heads`` (collect, or compare two runs)."""
    if args.compare is not None:
        return _run_compare(args)
    return _run_collect(args)


def _load_examples(args: HeadsArgs) -> list[Any]:
    from rcstat.data import load_dataset
    from rcstat.heads.collection import load_jsonl

    if args.dataset == "jsonl":
        assert args.data is not None  # checked in from_namespace
        return list(load_jsonl(args.data, limit=args.n))
    options = {} if args.context is None else {"context": args.context}
    return list(load_dataset(args.dataset, args.data, limit=args.n, **options))


def _run_options(args: HeadsArgs) -> dict[str, Any]:
    """The options recorded in the run's manifest besides ``max_new_tokens`` (not --n: a run
    grows by resuming with a larger --n; not --tau, --statistic, --top: they shape the summary,
    which is rewritten from every row each time)."""
    return {
        "dataset": args.dataset,
        "data": str(Path(args.data).resolve()) if args.data else None,
        "context": args.context,
    }


def _run_collect(args: HeadsArgs) -> int:
    from rcstat.heads.collection import collect
    from rcstat.runs import model_label

    options = _run_options(args)
    check_output_folder(args.out, NAME)
    compared = {**options, "max_new_tokens": args.max_new_tokens}
    check_run_options(args.out, NAME, compared, args.shard)
    examples = _load_examples(args)
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    model, tokenizer = load_model_quietly(args.model, args.placement)
    claim_output_folder(args.out, NAME)
    frame = collect(
        model,
        tokenizer,
        examples,
        out=args.out,
        max_new_tokens=args.max_new_tokens,
        retry_failed=args.retry_failed,
        model_name=model_label(args.model),
        options=options,
        shard=args.shard,
        merge_settings=summary_settings(args),
    )
    failed = frame.attrs.get("errors", {})
    if failed:
        console.print(
            f"[yellow]{len(failed)} example(s) failed and were skipped[/yellow] "
            f"(see {escape(str(args.out / 'examples.csv'))}); first: "
            f"{escape(next(iter(failed.values())))}"
        )
    if args.shard is not None and args.shard.split and not frame.attrs["merged"]:
        console.print(part_done(args.out, args.shard))
        return 0
    return summarize_run(args.out, summary_settings(args))


def summary_settings(args: HeadsArgs) -> dict[str, Any]:
    """The options that shape the summary (kept in each part for ``rcstat merge``)."""
    return {"statistic": args.statistic, "tau": args.tau, "top": args.top}


def part_done(out: Path, shard: Shard) -> str:
    """What a process of a data-parallel run says when its part is done before the others."""
    return (
        f"{shard}: part done in {escape(str(out / 'parts' / shard.name))}; the last shard to "
        f"finish merges the run (or run `rcstat merge {escape(str(out))}`)"
    )


def summarize_run(out: Path, settings: dict[str, Any]) -> int:
    """Summarise and plot the whole ``heads.csv`` of ``out`` (a run or a merged run)."""
    from rcstat.heads.collection import read_heads
    from rcstat.heads.plots import (
        plot_head_distributions,
        plot_median_heatmap,
        plot_percentile_bands,
    )
    from rcstat.heads.summary import summarize
    from rcstat.report.plots import save_figure

    statistic, tau, top = settings["statistic"], settings["tau"], settings["top"]
    heads_csv = out / "heads.csv"
    if not heads_csv.is_file():
        raise ValueError(f"no example could be analysed (see {out / 'examples.csv'})")
    everything = read_heads(heads_csv)  # the summary describes the whole folder
    with step("summarising and plotting…"):
        summary = summarize(everything, statistic=statistic, tau=tau)
        with staged_output(out, NAME, keep=_ROWS) as stage:
            (stage / "summary.json").write_text(
                json.dumps(summary.to_dict(), indent=1), encoding="utf-8"
            )
            (stage / "summary.md").write_text(summary.to_markdown(top), encoding="utf-8")
            summary.percentiles.to_csv(stage / "percentiles.csv", index=False)
            summary.counts.to_csv(stage / "counts.csv", index=False)
            save_figure(
                plot_head_distributions(everything, statistic, tau=tau),
                stage / "distributions.png",
            )
            save_figure(plot_percentile_bands(summary), stage / "percentile_bands.png")
            save_figure(plot_median_heatmap(summary), stage / "median_heatmap.png")
    _print_summary(summary, top)
    _print_timing(out)
    console.print(f"results written to {escape(str(out))}/")
    return 0


def _run_compare(args: HeadsArgs) -> int:
    from rcstat.heads.collection import read_heads
    from rcstat.heads.plots import plot_comparison
    from rcstat.heads.summary import compare
    from rcstat.report.plots import save_figure

    assert args.compare is not None and args.labels is not None
    frames = [read_heads(run / "heads.csv") for run in args.compare]
    comparison = compare(
        frames[0],
        frames[1],
        labels=args.labels,
        statistic=args.statistic,  # type: ignore[arg-type]
        tau=args.tau,
    )
    with step("writing the comparison…"), staged_output(args.out, "heads --compare") as stage:
        payload = {"runs": [str(run) for run in args.compare], **comparison.to_dict()}
        (stage / "comparison.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
        (stage / "comparison.md").write_text(comparison.to_markdown(), encoding="utf-8")
        comparison.counts.to_csv(stage / "counts.csv", index=False)
        save_figure(plot_comparison(comparison), stage / "comparison.png")
    _print_comparison(comparison)
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


def _print_summary(summary: HeadSummary, top: int) -> None:
    counts = summary.counts
    console.print(
        f"{summary.n_examples} examples, {summary.n_layers} layers × {summary.n_heads} heads, "
        f"statistic {summary.statistic}"
    )
    console.print(
        f"heads > τ = {summary.tau:g} per example: mean {counts['above_tau'].mean():.1f}, "
        f"median {counts['above_tau'].median():g}; > dataset p95 ({summary.p95:.3f}): mean "
        f"{counts['above_p95'].mean():.1f}"
    )
    stability = (
        "n/a (one example)"
        if summary.stability_mean is None
        else f"mean {summary.stability_mean:.3f}, median {summary.stability_median:.3f}"
    )
    console.print(f"ranking stability (pairwise Spearman between examples): {stability}")
    console.print(
        f"top {summary.top_n} heads by median: mean relative depth {summary.mean_depth:.2f} "
        "(0 = first layer, 1 = last)"
    )
    table = Table(title=f"top {min(top, len(summary.percentiles))} heads by median")
    for name in ("rank", "layer", "head", "p5", "p25", "median", "p75", "p95", "max"):
        table.add_column(name, justify="right")
    for row in summary.top(top).itertuples(index=False):
        table.add_row(
            str(row.rank),
            str(row.layer),
            str(row.head),
            *(f"{v:.3f}" for v in (row.p5, row.p25, row.p50, row.p75, row.p95, row.max)),
        )
    console.print(table)


def _print_timing(out: Path) -> None:
    import pandas as pd

    path = out / "examples.csv"
    if not path.is_file():
        return
    log = pd.read_csv(path, dtype=str, keep_default_na=False)
    ok = log[log["error"] == ""]
    if len(ok):
        seconds = pd.to_numeric(ok["seconds"])
        console.print(
            f"{len(ok)} examples analysed ({len(log) - len(ok)} failed): "
            f"{seconds.mean():.2f} s per example on average"
        )
    cut = int((ok["finished"] == "False").sum())
    if cut:
        console.print(
            f"[yellow]{cut} generated answer(s) were cut at --max-new-tokens[/yellow] "
            f"(finished = False in {escape(str(path))})"
        )


def _print_comparison(comparison: Comparison) -> None:
    la, lb = comparison.labels
    table = Table(
        title=f"{escape(la)} vs {escape(lb)}: heads per example "
        f"(τ = {comparison.tau:g}; common = pooled p95 = {comparison.common_threshold:.3f})"
    )
    for name in ("dataset", "examples", "mean > τ", "median > τ", "mean > common", "median"):
        table.add_column(name, justify="right")
    for row in comparison.count_stats().itertuples(index=False):
        table.add_row(
            escape(str(row.dataset)),
            str(row.n),
            f"{row.mean_above_tau:.1f}",
            f"{row.median_above_tau:g}",
            f"{row.mean_above_common:.1f}",
            f"{row.median_above_common:g}",
        )
    console.print(table)
    for name, test in comparison.tests.items():
        what = f"> τ = {comparison.tau:g}" if name == "tau" else "> common"
        console.print(
            f"Mann–Whitney U ({what}): U = {test.u:g}, p = {test.p_value:.3g}, "
            f"rank-biserial r = {test.effect:+.3f} (r > 0: {escape(lb)} has more)"
        )
    console.print(
        f"Spearman correlation of per-head medians: {comparison.rank_correlation:.3f}; "
        f"mean depth of top heads: {escape(la)} {comparison.a.mean_depth:.2f}, "
        f"{escape(lb)} {comparison.b.mean_depth:.2f}"
    )
