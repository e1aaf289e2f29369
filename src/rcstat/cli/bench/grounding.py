"""``rcstat bench grounding``: its options, the
:class:`~rcstat.evaluation.bench.grounding.GroundingConfig` they make, the run
(:func:`rcstat.evaluation.bench.grounding.run`) and the examples its folder holds (what it
prints is :mod:`rcstat.cli.bench`'s).

A flag whose default is the config's defaults to None and ``--help`` shows the config's
default: the flags given become the config's fields and the config's checks
(:meth:`~rcstat.evaluation.bench.common.JobConfig.from_flags`) are the only ones,
their messages naming the flag (lm-evaluation-harness's ``from_cli``); the grounder's flags
become its :class:`~rcstat.grounding.options.GroundingOptions` the way every command that
grounds makes them (:func:`rcstat.cli.ground_flags.grounding_options`).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rcstat.cli._common import add_config_option
from rcstat.cli.ground_flags import add_batch_tokens_option, grounding_options
from rcstat.cli.job_options import add_job_command, add_run_options, job_config
from rcstat.cli.options import (
    add_n_option,
    add_out_option,
)
from rcstat.data.ragtruth import TASKS
from rcstat.defaults import MAX_RESAMPLES
from rcstat.evaluation.bench.grounding import GroundingConfig
from rcstat.evaluation.bench.grounding import run as run_grounding
from rcstat.evaluation.choices import PAIR_DATASETS

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.results import GroundingResult


def register(bench_sub: Any) -> None:
    """Add ``grounding`` to the sub-commands of ``bench``."""
    gb, shown = add_job_command(
        bench_sub,
        GroundingConfig,
        "grounding",
        "grounding: the verdict, zero-shot score, variants, baselines, probes (AUROC, AUC-PR, "
        "example and span F1)",
        ("grounding",),
        extra=PAIR_DATASETS,
        note=" (ragtruth: RAGTruth's QA, summary and data-to-text responses, --task to pick "
        "one; jsonl: your labelled pairs, --data FILE; squad-contrast: SQuAD v2, supporting "
        "vs unrelated context; squad-swaps: SQuAD v2, the answer's sentence copied vs its "
        "answer changed)",
    )
    add_n_option(gb)
    gb.add_argument(
        "--questionable",
        action="store_true",
        default=None,
        help="faithbench: a 'Questionable' annotation also makes a response hallucinated",
    )
    gb.add_argument("--profile", default=None, metavar="PATH", help="head profile JSON")
    gb.add_argument(
        "--task",
        default=None,
        metavar="{" + ",".join(TASKS) + "}",
        help="ragtruth: only this task's responses (default: all three)",
    )
    gb.add_argument(
        "--detector",
        default=None,
        metavar="PATH",
        help="trained detector JSON for the default verdict (default: the one shipped for the "
        "model, if any; `rcstat ground-train` makes one)",
    )
    gb.add_argument(
        "--zero-shot",
        action="store_true",
        help="the zero-shot word score gives the default verdict, even where a detector ships",
    )
    add_config_option(
        gb, GroundingConfig, "resamples", int, f"bootstrap resamples (1 to {MAX_RESAMPLES:,})"
    )
    add_batch_tokens_option(gb)
    add_out_option(gb, None, f" (resumable) (default: {shown('out')})")
    add_run_options(gb)


def from_namespace(ns: argparse.Namespace) -> GroundingConfig:
    """The checked config of ``rcstat bench grounding``: the flags given, as the config's
    fields (nothing heavy is imported)."""
    return job_config(GroundingConfig, ns, options=grounding_options(ns))


def run(config: GroundingConfig, loader: Loader) -> GroundingResult:
    """Run (or resume) the benchmark."""
    return run_grounding(config, loader=loader)


def held(result: GroundingResult) -> int | None:
    """The examples the run folder holds (None while another shard works): one response each,
    or for squad-contrast and squad-swaps one answerable question each, scored twice (its
    unanswerable questions make no rows)."""
    if result.report is None:
        return None
    items = int(result.report["items"])
    return items // 2 if result.report["dataset"] in PAIR_DATASETS else items
