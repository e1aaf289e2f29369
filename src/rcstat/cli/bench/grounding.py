"""``rcstat bench grounding``: its options, the
:class:`~rcstat.evaluation.bench.grounding.GroundingConfig` they make, and what it prints
(the run itself is :func:`rcstat.evaluation.bench.grounding.run`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.cli._common import (
    HelpFormatter,
    add_model_option,
    add_run_options,
    console,
    devices_and_shard,
)

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.grounding import GroundingConfig


def register(bench_sub: Any) -> None:
    """Add ``grounding`` to the sub-commands of ``bench``."""
    gb = bench_sub.add_parser(
        "grounding",
        help="grounding: zero-shot score, variants, baselines, probes (AUROC, bal. acc.)",
        formatter_class=HelpFormatter,
    )
    add_model_option(gb)
    gb.add_argument(
        "--dataset",
        default="faithbench",
        help="faithbench, summedits or squad-contrast (SQuAD v2: supporting vs unrelated)",
    )
    gb.add_argument("--data", default=None, help="upstream file/folder (default: the slice)")
    gb.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    gb.add_argument(
        "--questionable",
        action="store_true",
        help="faithbench: a 'Questionable' annotation also makes a response hallucinated",
    )
    gb.add_argument("--profile", default=None, metavar="PATH", help="head profile JSON")
    gb.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples")
    gb.add_argument("--out", default="runs/bench_grounding", help="output folder (resumable)")
    add_run_options(gb)


def from_namespace(ns: argparse.Namespace) -> GroundingConfig:
    """The checked config of ``rcstat bench grounding``."""
    from rcstat.evaluation.bench.grounding import GroundingConfig

    config = GroundingConfig(
        model=ns.model,
        dataset=ns.dataset,
        data=ns.data,
        n=ns.n,
        questionable=ns.questionable,
        profile=None if ns.profile is None else Path(ns.profile),
        resamples=ns.resamples,
        out=Path(ns.out),
        retry_failed=getattr(ns, "retry_failed", True),
    )
    config.check()  # the dataset first: its message names the choices
    config.devices, config.shard = devices_and_shard(ns)
    return config


def run(config: GroundingConfig, loader: Loader) -> int:
    """Run (or resume) the benchmark and print its metrics."""
    from rcstat.evaluation.bench.grounding import run as run_grounding

    for line in run_grounding(config, loader=loader).lines():
        console.print(line, markup=False)
    return 0
