"""``rcstat bench kv``: its options, the :class:`~rcstat.evaluation.bench.kv.KVConfig` they
make, and what it prints (the run itself is :func:`rcstat.evaluation.bench.kv.run`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    PRESS_CHOICES,
    HelpFormatter,
    add_model_option,
    add_press_options,
    add_run_options,
    console,
    devices_and_shard,
    float_list,
    int_list,
    optional_count,
    split_list,
)
from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.kv import KVConfig

_PRESSES = "rcstat,knorm,snapkv,streaming_llm,tova,adakv_snapkv"


def register(bench_sub: Any) -> None:
    """Add ``kv`` to the sub-commands of ``bench``."""
    kv = bench_sub.add_parser(
        "kv",
        help="KV-cache compression: VER, ROUGE, realized ratio (needs rcstat[press])",
        formatter_class=HelpFormatter,
    )
    add_model_option(kv)
    kv.add_argument("--dataset", default="squad_v2", help="squad_v2, qmsum or 2wiki")
    kv.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    kv.add_argument("--presses", default=_PRESSES, help="comma-separated press names")
    kv.add_argument("--ratios", default="0.3,0.5,0.7", help="compression ratios in [0, 1)")
    kv.add_argument(
        "--thresholds", default="0.2,0.7,0.8,1.0,1.2,1.3,1.8", help="RCStat thresholds c >= 0"
    )
    kv.add_argument(
        "--window",
        default=f"{DEFAULT_WINDOW},16",
        help="RCStat window sizes; 'question' (with --placement question): the question's tokens",
    )
    add_press_options(kv, sweep=True)
    kv.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    kv.add_argument("--max-new-tokens", type=int, default=32, help="answer length limit")
    kv.add_argument("--out", default="runs/bench_kv", help="output folder (resumable)")
    kv.add_argument(
        "--context",
        choices=["full", "relevant", "window"],
        default=None,
        help="qmsum only: whole transcript (default), the query's relevant turns, or the most "
        "turns around them that fit the window (--max-tokens, else the model's)",
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
    from rcstat.press.registry import check_press_names

    dataset = dataset_for(ns.dataset, "qa", "bench kv")
    devices, shard = devices_and_shard(ns)
    config = KVConfig(
        model=ns.model,
        devices=devices,
        shard=shard,
        dataset=dataset,
        data=ns.data,
        presses=check_press_names(split_list(ns.presses)),
        ratios=float_list("--ratios", split_list(ns.ratios), low=0, high=1, high_open=True),
        thresholds=float_list("--thresholds", split_list(ns.thresholds), low=0),
        windows=_windows(split_list(ns.window), ns.placement),
        groups=_groups(ns.group),
        scores=_named("--score", split_list(ns.score)),
        budgets=_named("--budget", split_list(ns.budget)),
        floor=check_number("--floor", ns.floor, low=0, high=1),
        sinks=int_list("--sinks", split_list(ns.sinks), low=0),
        question_placement=ns.placement,
        n=optional_count("--n", ns.n),
        max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
        out=Path(ns.out),
        context=ns.context,
        max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
        retry_failed=getattr(ns, "retry_failed", True),
    )
    config.check()
    return config


def _named(option: str, names: list[str]) -> list[str]:
    """Comma-separated names of ``option``, each one it allows (:data:`PRESS_CHOICES`), none
    twice (checked here, where no torch is imported)."""
    allowed = next(values for flag, values, _ in PRESS_CHOICES if flag == option)
    unknown = [n for n in names if n not in allowed]
    if not names or unknown:
        raise ValueError(
            f"{option} takes {' and/or '.join(allowed)}, got {','.join(names) or '(none)'}"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{option} lists a value twice: {','.join(names)}")
    return list(names)


def _groups(value: str | None) -> list[str | None]:
    """``--group``: the rules named, or the press's default of each mode (None)."""
    return [None] if value is None else [*_named("--group", split_list(value))]


def _windows(values: list[str], placement: str) -> list[int | str]:
    """``--window``: token counts, and ``question`` where the question is compressed too."""
    if QUESTION_WINDOW in values and placement != "question":
        raise ValueError(f"--window {QUESTION_WINDOW} needs --placement question")
    if len(set(values)) != len(values):
        raise ValueError(f"--window lists a value twice: {','.join(values)}")
    sizes = [v for v in values if v != QUESTION_WINDOW]
    checked = iter(int_list("--window", sizes) if sizes else [])
    return [v if v == QUESTION_WINDOW else next(checked) for v in values]


def run(config: KVConfig, loader: Loader) -> int:
    """Run (or resume) the benchmark and print its summary."""
    from rcstat.evaluation.bench.kv import run as run_kv

    result = run_kv(config, loader=loader, say=lambda text: console.print(text, markup=False))
    for line in result.lines():
        console.print(line, markup=False)
    return 0
