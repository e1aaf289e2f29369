"""``rcstat heads``: dataset-scale head analysis from the command line.

Two modes. **Collect** (default): analyse ``--n`` examples of ``--dataset`` with ``--model``
into ``--out`` (resumable, see :mod:`rcstat.runs`: ``run.json`` records the model and the
options, ``heads.csv`` and ``examples.csv`` grow one example at a time, and a rerun with the
same settings skips what is there), then rebuild from the whole ``heads.csv`` the summary
(``summary.json``, ``summary.md``, ``percentiles.csv``, ``counts.csv``) and the figures
(``distributions.png``, ``percentile_bands.png``, ``median_heatmap.png``).
**Compare** (``--compare RUN_A RUN_B``): read the ``heads.csv`` of two earlier runs and write
``comparison.json``, ``comparison.md``, ``counts.csv`` and ``comparison.png`` into ``--out``.

The work is the library's (:mod:`rcstat.evaluation.bench.heads`): this module parses, builds
a :class:`~rcstat.evaluation.bench.heads.HeadsConfig` (or the two runs to compare), calls one
function and prints its lines. It imports only the standard library, rich and rcstat's light
modules at import time, so ``rcstat --help`` stays fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rcstat.checks import check_count, check_tau
from rcstat.cli._common import (
    add_command,
    add_config_option,
    folder_note,
    load_model_quietly,
    say,
    shown_default,
    step,
)
from rcstat.cli.job_options import add_run_options, job_config
from rcstat.cli.options import (
    add_dataset_options,
    add_max_new_tokens_option,
    add_n_option,
    add_out_option,
)
from rcstat.evaluation.bench.heads import HeadsConfig
from rcstat.evaluation.bench.heads import run as run_heads

__all__ = ["CompareArgs", "from_namespace", "register", "run"]

NAME = "heads"
DEFAULT_OUT = "runs/heads"
DEFAULT_COMPARE_OUT = "runs/heads_compare"


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``heads`` sub-command to ``sub`` (the result of ``add_subparsers``)."""
    p = add_command(
        sub,
        NAME,
        "per-head RC over a dataset: percentiles, head counts, figures; or compare two runs",
        "Analyse every example of a dataset (context = prompt, question + answer = generation) "
        "and summarise each head's RC over the examples (paper §5.1); or, with --compare, test "
        "whether one run's examples have more high-RC heads than another's.",
    )
    # The datasets with a question (QA and attribution), plus the user's own JSONL (None: no
    # dataset is named, which --compare checks; squad_v2 when collecting).
    add_dataset_options(
        p,
        None,
        ("qa", "attribution"),
        extra=("jsonl",),
        note=' (default squad_v2); jsonl reads --data as {"context", "question", "answer"?, '
        '"id"?} records',
    )
    add_n_option(p)
    add_out_option(p, None, f" (default {DEFAULT_OUT}, or {DEFAULT_COMPARE_OUT} with --compare)")
    p.add_argument(
        "--context",
        choices=["full", "relevant"],
        default=None,
        help="qmsum only: whole transcript (default) or the query's relevant turns",
    )
    add_config_option(p, HeadsConfig, "tau", float, "threshold for head counts, >= 0")
    add_config_option(
        p, HeadsConfig, "statistic", str, "statistic summarised", choices=["upper", "expected"]
    )
    add_max_new_tokens_option(
        p,
        None,
        "answer length generated for examples without an answer (default: "
        f"{shown_default(HeadsConfig, 'max_new_tokens')})",
    )
    add_config_option(p, HeadsConfig, "top", int, "rows of the top-heads table")
    add_run_options(p, items="examples", redo="analysing them again")
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
class CompareArgs:
    """Arguments of ``rcstat heads --compare`` (checked)."""

    runs: tuple[Path, Path]
    labels: tuple[str, str]
    out: Path
    statistic: Literal["upper", "expected"]
    tau: float


def _compare_args(ns: argparse.Namespace) -> CompareArgs:
    if ns.top is not None:
        check_count("--top", ns.top)
    tau = check_tau("--tau", HeadsConfig.default("tau") if ns.tau is None else ns.tau)
    statistic = HeadsConfig.default("statistic") if ns.statistic is None else ns.statistic
    used = [
        f"--{name}"
        for name in ("model", "dataset", "data", "n", "context", "shard")
        if getattr(ns, name, None) is not None
    ]
    if used:
        raise ValueError(f"--compare reads two earlier runs; {', '.join(used)} do(es) not apply")
    a, b = (Path(v) for v in ns.compare)
    for folder in (a, b):
        if not (folder / "heads.csv").is_file():
            raise ValueError(
                f"--compare: {folder} has no heads.csv; give the --out folders of two "
                "earlier `rcstat heads` runs"
            )
    names = [a.resolve().name, b.resolve().name]
    if ns.labels is not None:
        names = [v.strip() for v in ns.labels.split(",")]
        if len(names) != 2 or not all(names):
            raise ValueError(f"--labels must look like A,B, got {ns.labels!r}")
    if names[0] == names[1]:
        raise ValueError(f"the two runs need distinct --labels, got {names[0]!r} twice")
    out = Path(ns.out or DEFAULT_COMPARE_OUT)
    return CompareArgs((a, b), (names[0], names[1]), out, statistic, tau)


def from_namespace(ns: argparse.Namespace) -> HeadsConfig | CompareArgs:
    """The checked config of ``rcstat heads`` (or the runs to compare)."""
    if ns.compare is not None:
        return _compare_args(ns)
    if ns.labels is not None:
        raise ValueError("--labels applies to --compare only")
    return job_config(HeadsConfig, ns)


def run(args: HeadsConfig | CompareArgs) -> int:
    """Run ``rcstat heads`` (collect, or compare two runs) and print what it found."""
    from rcstat.evaluation.bench.heads_results import compare_runs

    note = None
    if isinstance(args, CompareArgs):
        with step("writing the comparison…"):
            found: Any = compare_runs(
                args.runs, args.labels, args.out, statistic=args.statistic, tau=args.tau
            )
    else:
        found = run_heads(args, loader=load_model_quietly)
        summary = found.summary
        note = folder_note(None if summary is None else summary.n_examples, args.n)
    for line in ([] if note is None else [note]) + found.lines():
        say(line)
    return 0
