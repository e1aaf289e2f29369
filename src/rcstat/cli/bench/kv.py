"""``rcstat bench kv``: its options, the :class:`~rcstat.evaluation.bench.kv.KVConfig` they make,
the run (:func:`rcstat.evaluation.bench.kv.run`) and the examples its folder holds (what it
prints is :mod:`rcstat.cli.bench`'s)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    add_command,
    add_run_options,
    devices_and_shard,
    float_list,
    int_list,
    optional_count,
    say,
    split_list,
)
from rcstat.cli.options import (
    add_data_option,
    add_dataset_option,
    add_max_new_tokens_option,
    add_n_option,
    add_out_option,
)
from rcstat.cli.press_options import add_press_options, check_groups, check_named, check_windows
from rcstat.defaults import DATASET_MAX_NEW_TOKENS
from rcstat.press.registry import PRESS_NAMES, check_press_names

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.kv import KVConfig
    from rcstat.evaluation.bench.results import KVResult

#: ``--context`` values; ``window`` is the old name of ``fit`` (still accepted).
CONTEXTS = ("full", "relevant", "fit")


def register(bench_sub: Any) -> None:
    """Add ``kv`` to the sub-commands of ``bench``."""
    kv = add_command(
        bench_sub, "kv", "KV-cache compression: VER, ROUGE, realized ratio (needs rcstat[press])"
    )
    add_dataset_option(kv, "squad_v2", ("qa",))
    add_data_option(kv)
    kv.add_argument("--presses", default=",".join(PRESS_NAMES), help="comma-separated press names")
    kv.add_argument("--ratios", default="0.3,0.5,0.7", help="compression ratios in [0, 1)")
    kv.add_argument(
        "--thresholds", default="0.2,0.7,0.8,1.0,1.2,1.3,1.8", help="RCStat thresholds c >= 0"
    )
    add_press_options(kv, sweep=True)
    add_n_option(kv)
    add_max_new_tokens_option(kv, DATASET_MAX_NEW_TOKENS, "answer length limit")
    add_out_option(kv, "bench_kv", " (resumable)")
    kv.add_argument(
        "--context",
        choices=CONTEXTS,
        default=None,
        help="qmsum only: whole transcript (default), the query's relevant turns, or the most "
        "turns around them that fit the model's context (fit; --max-tokens, else the model's "
        "window)",
    )
    kv.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="skip examples longer than this (default: the model's window)",
    )
    add_run_options(kv)


def from_namespace(ns: argparse.Namespace) -> KVConfig:
    """The checked config of ``rcstat bench kv`` (nothing heavy is imported)."""
    from rcstat.evaluation.bench.common import dataset_for
    from rcstat.evaluation.bench.kv import KVConfig

    dataset = dataset_for(ns.dataset, "qa", "bench kv")
    config = KVConfig(
        model=ns.model,
        dataset=dataset,
        data=ns.data,
        presses=check_press_names(split_list(ns.presses)),
        ratios=float_list("--ratios", split_list(ns.ratios), low=0, high=1, high_open=True),
        thresholds=float_list("--thresholds", split_list(ns.thresholds), low=0),
        windows=check_windows(split_list(ns.window), ns.question_placement),
        groups=check_groups(ns.group),
        scores=check_named("--score", split_list(ns.score)),
        budgets=check_named("--budget", split_list(ns.budget)),
        floor=check_number("--floor", ns.floor, low=0, high=1),
        sinks=int_list("--sinks", split_list(ns.sinks), low=0),
        question_placement=ns.question_placement,
        n=optional_count("--n", ns.n),
        max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
        out=Path(ns.out),
        context=ns.context,
        max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
        retry_failed=getattr(ns, "retry_failed", True),
    )
    config.check()
    config.devices, config.shard = devices_and_shard(ns)  # may ask torch which GPUs it sees
    return config


def run(config: KVConfig, loader: Loader) -> KVResult:
    """Run (or resume) the benchmark (its notes printed as they come)."""
    from rcstat.evaluation.bench.kv import run as run_kv

    return run_kv(config, loader=loader, say=say)


def held(result: KVResult) -> int | None:
    """The examples the run folder holds (None while another shard works)."""
    return None if result.summary is None else int(result.summary["examples"].max())
