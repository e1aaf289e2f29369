"""``rcstat bench attribution``: its options, the
:class:`~rcstat.evaluation.bench.attribution.AttributionConfig` they make, the run
(:func:`rcstat.evaluation.bench.attribution.run`) and the examples its folder holds (what it
prints is :mod:`rcstat.cli.bench`'s).

A flag the config has a default for defaults to None, and ``--help`` shows the config's
default: the flags given become the config's fields
(:meth:`~rcstat.evaluation.bench.attribution.AttributionConfig.from_flags`), checked once, by
the config, with messages that name the flags (lm-evaluation-harness's ``from_cli``).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rcstat.cli._common import add_config_option, note
from rcstat.cli.job_options import add_job_command, add_run_options, job_config
from rcstat.cli.options import (
    add_attribution_options,
    add_n_option,
    add_out_option,
)
from rcstat.evaluation.bench.attribution import AttributionConfig
from rcstat.evaluation.bench.attribution import run as run_attribution
from rcstat.evaluation.choices import LAYOUTS

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.results import AttributionResult


def register(bench_sub: Any) -> None:
    """Add ``attribution`` to the sub-commands of ``bench``."""
    ab, shown = add_job_command(
        bench_sub,
        AttributionConfig,
        "attribution",
        "chunk-level attribution accuracy vs k",
        ("attribution",),
    )
    ab.add_argument(
        "--k",
        dest="ks",
        metavar="K",
        help=f"numbers of heads, comma-separated; all: every head (default: {shown('ks')})",
    )
    add_n_option(ab)
    add_config_option(
        ab,
        AttributionConfig,
        "layout",
        str,
        "numbered: sources as '[k] Title: text' paragraphs (as RAG prompts write them), "
        "each entry a candidate span; numbered-text: the same prompt, the chunk text alone "
        "the span; plain: the bare chunks joined by blank lines (the first benchmark runs)",
        choices=list(LAYOUTS),
    )
    ab.add_argument(
        "--max-tokens",
        type=int,
        help="skip examples whose prompt is longer than this (default: the model's window)",
    )
    add_attribution_options(ab)
    ab.add_argument(
        "--fixed-heads-from",
        metavar="RUN",
        help="another bench attribution run of the same model: adds top_fixed, one head set "
        "for every example (the heads of lowest mean rank over that run's examples)",
    )
    add_out_option(ab, None, f" (resumable; default: {shown('out')})")
    add_run_options(ab)


def from_namespace(ns: argparse.Namespace) -> AttributionConfig:
    """The checked config of ``rcstat bench attribution``: the flags given, as the config's
    fields (nothing heavy is imported before they are checked)."""
    return job_config(AttributionConfig, ns)


def run(config: AttributionConfig, loader: Loader) -> AttributionResult:
    """Run (or resume) the benchmark (its notes printed as they come): the accuracy table
    (Table 1, Fig. 7)."""
    return run_attribution(config, loader=loader, say=note)


def held(result: AttributionResult) -> int | None:
    """The examples the run folder holds (None while another shard works)."""
    return None if result.accuracy is None else int(result.accuracy["examples"].max())
