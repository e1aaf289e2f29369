"""``rcstat bench attribution``: its options, the
:class:`~rcstat.evaluation.bench.attribution.AttributionConfig` they make, the run
(:func:`rcstat.evaluation.bench.attribution.run`) and the examples its folder holds (what it
prints is :mod:`rcstat.cli.bench`'s)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.cli._common import (
    add_command,
    add_run_options,
    devices_and_shard,
    int_list,
    optional_count,
    say,
    split_list,
)
from rcstat.cli.options import (
    add_attribution_options,
    add_data_option,
    add_dataset_option,
    add_n_option,
    add_out_option,
    check_span_score,
)

if TYPE_CHECKING:
    from rcstat.evaluation.bench.attribution import AttributionConfig
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.results import AttributionResult


def register(bench_sub: Any) -> None:
    """Add ``attribution`` to the sub-commands of ``bench``."""
    ab = add_command(bench_sub, "attribution", "chunk-level attribution accuracy vs k")
    add_dataset_option(ab, "quotesum", ("attribution",))
    add_data_option(ab)
    ab.add_argument("--k", default="1,2,5,10,20,50,100,all", help="numbers of heads")
    add_n_option(ab)
    ab.add_argument(
        "--layout",
        choices=["numbered", "numbered-text", "plain"],
        default="numbered",
        help="numbered: sources as '[k] Title: text' paragraphs (as RAG prompts write them), "
        "each entry a candidate span; numbered-text: the same prompt, the chunk text alone "
        "the span; "
        "plain: the bare chunks joined by blank lines (the first benchmark runs)",
    )
    ab.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="skip examples whose prompt is longer than this (default: the model's window)",
    )
    add_attribution_options(ab)
    ab.add_argument(
        "--fixed-heads-from",
        default=None,
        metavar="RUN",
        help="another bench attribution run of the same model: adds top_fixed, one head set "
        "for every example (the heads of lowest mean rank over that run's examples)",
    )
    add_out_option(ab, "bench_attribution", " (resumable)")
    add_run_options(ab)


def from_namespace(ns: argparse.Namespace) -> AttributionConfig:
    """The checked config of ``rcstat bench attribution``."""
    from rcstat.evaluation.bench.attribution import AttributionConfig
    from rcstat.evaluation.bench.common import dataset_for

    ks = split_list(ns.k)
    if not ks:
        raise ValueError("--k needs at least one value")
    for k in ks:
        if k != "all":
            int_list("--k", [k])
    config = AttributionConfig(
        model=ns.model,
        dataset=dataset_for(ns.dataset, "attribution", "bench attribution"),
        data=ns.data,
        ks=ks,
        n=optional_count("--n", ns.n),
        out=Path(ns.out),
        retry_failed=getattr(ns, "retry_failed", True),
        layout=ns.layout,
        max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
        statistic=ns.statistic,
        span_score=check_span_score(ns.span_score, ns.statistic),
        question_first=ns.question_first,
        fixed_heads_from=None if ns.fixed_heads_from is None else Path(ns.fixed_heads_from),
    )
    config.check()
    config.devices, config.shard = devices_and_shard(ns)  # may ask torch which GPUs it sees
    return config


def run(config: AttributionConfig, loader: Loader) -> AttributionResult:
    """Run (or resume) the benchmark (its notes printed as they come): the accuracy table
    (Table 1, Fig. 7)."""
    from rcstat.evaluation.bench.attribution import run as run_attribution

    return run_attribution(config, loader=loader, say=say)


def held(result: AttributionResult) -> int | None:
    """The examples the run folder holds (None while another shard works)."""
    return None if result.accuracy is None else int(result.accuracy["examples"].max())
