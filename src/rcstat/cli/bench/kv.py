"""``rcstat bench kv``: its options, the :class:`~rcstat.evaluation.bench.kv.KVConfig` they make,
the run (:func:`rcstat.evaluation.bench.kv.run`) and the examples its folder holds (what it
prints is :mod:`rcstat.cli.bench`'s).

Every flag defaults to None and the config holds the default (``--help`` shows it): the flags
given are the config's fields, checked once by the config (lm-evaluation-harness's
``from_cli``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rcstat.checks import float_list, split_list
from rcstat.cli._common import note
from rcstat.cli.job_options import add_job_command, add_run_options, job_config
from rcstat.cli.options import (
    add_max_new_tokens_option,
    add_n_option,
    add_out_option,
)
from rcstat.cli.press_options import add_press_options, knob_lists, window_list
from rcstat.evaluation.bench.kv import CONTEXTS, KVConfig
from rcstat.evaluation.bench.kv import run as run_kv

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.results import KVResult


def register(bench_sub: Any) -> None:
    """Add ``kv`` to the sub-commands of ``bench``."""
    kv, shown = add_job_command(
        bench_sub,
        KVConfig,
        "kv",
        "KV-cache compression: VER, ROUGE, realized ratio (needs rcstat[press])",
        ("qa",),
    )
    kv.add_argument("--presses", help=f"comma-separated press names (default: {shown('presses')})")
    kv.add_argument("--ratios", help=f"compression ratios in [0, 1) (default: {shown('ratios')})")
    kv.add_argument(
        "--thresholds", help=f"RCStat thresholds c >= 0 (default: {shown('thresholds')})"
    )
    add_press_options(kv, sweep=True, windows=shown("windows"))
    add_n_option(kv)
    add_max_new_tokens_option(kv, None, f"answer length limit (default: {shown('max_new_tokens')})")
    add_out_option(kv, None, f" (resumable; default: {shown('out')})")
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
    """The checked config of ``rcstat bench kv``: the flags given, as the config's fields
    (:meth:`~rcstat.evaluation.bench.common.JobConfig.from_flags`; nothing heavy is
    imported)."""
    given: dict[str, Any] = {"press_scope": ns.question_placement, "knobs": knob_lists(ns)}
    if ns.presses is not None:
        given["presses"] = split_list(ns.presses)
    if ns.ratios is not None:
        given["ratios"] = float_list("--ratios", split_list(ns.ratios))
    if ns.thresholds is not None:
        given["thresholds"] = float_list("--thresholds", split_list(ns.thresholds))
    if ns.window is not None:
        given["windows"] = window_list(split_list(ns.window))
    return job_config(KVConfig, ns, **given)


def run(config: KVConfig, loader: Loader) -> KVResult:
    """Run (or resume) the benchmark (its notes on standard error as they come)."""
    return run_kv(config, loader=loader, say=note)


def held(result: KVResult) -> int | None:
    """The examples the run folder holds (None while another shard works)."""
    return None if result.summary is None else int(result.summary["examples"].max())
