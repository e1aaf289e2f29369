"""``rcstat bench kv`` and ``rcstat bench attribution``: resumable benchmarks over a dataset.

Both grow their rows in ``--out`` one item at a time (see :mod:`rcstat.runs`): the options that
change rows are compared with the run's manifest before the model loads, the model and the
tokenizer after; the summaries are then rebuilt from every row through
:func:`~rcstat.cli._common.staged_output`, so that a failed summary leaves the rows as they were.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.checks import check_count
from rcstat.cli._common import (
    HelpFormatter,
    add_model_option,
    check_output_folder,
    claim_output_folder,
    console,
    float_list,
    int_list,
    load_model_quietly,
    optional_count,
    split_list,
    staged_output,
    step,
)
from rcstat.defaults import DEFAULT_WINDOW

NAME = "bench"
_KV_PRESSES = "rcstat,knorm,snapkv,streaming_llm,tova,adakv_snapkv"
# The row files of each benchmark (rcstat.evaluation.*_bench.ROW_FILES, named here so that
# `rcstat --help` imports no torch).
_KV_ROWS = ("run.json", "config.json", "predictions.jsonl")
_ATTRIBUTION_ROWS = ("run.json", "predictions.jsonl")


def _add_retry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help="when resuming, skip the items that failed instead of running them again",
    )


def register(sub: Any) -> None:
    """Add ``bench kv`` and ``bench attribution`` to the sub-command parsers ``sub``."""
    bench = sub.add_parser(NAME, help="benchmarks over a dataset", formatter_class=HelpFormatter)
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    kv = bench_sub.add_parser(
        "kv",
        help="KV-cache compression: VER, ROUGE, realized ratio (needs rcstat[press])",
        formatter_class=HelpFormatter,
    )
    add_model_option(kv)
    kv.add_argument("--dataset", default="squad_v2", help="squad_v2, qmsum or 2wiki")
    kv.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    kv.add_argument("--presses", default=_KV_PRESSES, help="comma-separated press names")
    kv.add_argument("--ratios", default="0.3,0.5,0.7", help="compression ratios in [0, 1)")
    kv.add_argument(
        "--thresholds", default="0.2,0.7,0.8,1.0,1.2,1.3,1.8", help="RCStat thresholds c >= 0"
    )
    kv.add_argument("--window", default=f"{DEFAULT_WINDOW},16", help="RCStat window sizes")
    kv.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    kv.add_argument("--max-new-tokens", type=int, default=32, help="answer length limit")
    kv.add_argument("--out", default="runs/bench_kv", help="output folder (resumable)")
    kv.add_argument(
        "--context",
        choices=["full", "relevant"],
        default=None,
        help="qmsum only: whole transcript (default) or the query's relevant turns",
    )
    kv.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="skip examples longer than this (default: the model's window)",
    )
    _add_retry_option(kv)

    ab = bench_sub.add_parser(
        "attribution", help="chunk-level attribution accuracy vs k", formatter_class=HelpFormatter
    )
    add_model_option(ab)
    ab.add_argument("--dataset", default="quotesum", help="quotesum or verigran")
    ab.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    ab.add_argument("--k", default="1,2,5,10,20,50,100,all", help="numbers of heads")
    ab.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    ab.add_argument("--out", default="runs/bench_attribution", help="output folder (resumable)")
    _add_retry_option(ab)


def _dataset(name: str, task: str, what: str) -> str:
    from rcstat.data.registry import DATASETS, canonical_name, dataset_task

    key = canonical_name(name)
    if dataset_task(key) != task:
        names = [n for n in DATASETS if dataset_task(n) == task]
        choices = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise ValueError(f"{what} needs {choices}, not {name}")
    return key


@dataclass
class BenchKVArgs:
    """Arguments of ``rcstat bench kv`` (checked)."""

    model: str | None
    dataset: str
    data: str | None
    presses: list[str]
    ratios: list[float]
    thresholds: list[float]
    windows: list[int]
    n: int | None
    max_new_tokens: int
    out: Path
    context: str | None = None
    max_tokens: int | None = None
    retry_failed: bool = True

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> BenchKVArgs:
        from rcstat.press.registry import check_press_names

        dataset = _dataset(ns.dataset, "qa", "bench kv")
        if ns.context is not None and dataset != "qmsum":
            raise ValueError("--context applies to --dataset qmsum only")
        return cls(
            model=ns.model,
            dataset=dataset,
            data=ns.data,
            presses=check_press_names(split_list(ns.presses)),
            ratios=float_list("--ratios", split_list(ns.ratios), low=0, high=1, high_open=True),
            thresholds=float_list("--thresholds", split_list(ns.thresholds), low=0),
            windows=int_list("--window", split_list(ns.window)),
            n=optional_count("--n", ns.n),
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            out=Path(ns.out),
            context=ns.context,
            max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
            retry_failed=getattr(ns, "retry_failed", True),
        )


def _fits(tokenizer: Any, example: Any, budget: int) -> bool:
    """Whether the chat-rendered context + question fit in ``budget`` tokens."""
    text = example.context + "\n\n" + example.question
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 32 <= budget


def run_kv(args: BenchKVArgs) -> int:
    """Run (or resume) the KV-compression benchmark and print the summary."""
    from rcstat.press.extra import require_kvpress

    require_kvpress("rcstat bench kv")
    from rcstat.data import QAExample, load_dataset
    from rcstat.evaluation.head_scatter import head_scatter, plot_head_scatter
    from rcstat.evaluation.kv_bench import KVBench, settings_grid
    from rcstat.runs import check_options, model_label

    grid = settings_grid(args.presses, args.ratios, args.thresholds, args.windows)
    # Not --n: a run grows by resuming with a larger --n.
    run_options = {
        "data": str(Path(args.data).resolve()) if args.data else None,
        "context": args.context,
        "max_tokens": args.max_tokens,
    }
    probe = KVBench(args.out, args.dataset, "", grid, args.max_new_tokens, options=run_options)
    check_output_folder(args.out, "bench kv")
    check_options(args.out, "bench kv", probe.manifest_options())
    options = {} if args.context is None else {"context": args.context}
    loaded = load_dataset(args.dataset, args.data, limit=args.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    model, tokenizer = load_model_quietly(args.model)
    window = int(model.config.max_position_embeddings)
    if args.max_tokens is not None:
        window = min(window, args.max_tokens)
    fitting = [e for e in examples if _fits(tokenizer, e, window - args.max_new_tokens)]
    skipped = [e.id for e in examples if e not in fitting]
    if skipped:
        console.print(f"skipping {len(skipped)} examples longer than {window} tokens")
    if not fitting:
        raise ValueError(f"every example is longer than the model's window ({window} tokens)")
    bench = KVBench(
        args.out,
        args.dataset,
        model_label(args.model),
        grid,
        max_new_tokens=args.max_new_tokens,
        config={"skipped_too_long": skipped, "window": window},
        options=run_options,
        retry_failed=args.retry_failed,
    )
    claim_output_folder(args.out, "bench kv")
    bench.collect(model, tokenizer, fitting)
    with step("summarising…"), staged_output(args.out, "bench kv", keep=_KV_ROWS) as stage:
        summary = bench.summarize(stage)
        if "rcstat" in args.presses:
            scatter = head_scatter(model, tokenizer, fitting[:10], window=args.windows[0])
            scatter.to_csv(stage / "head_scatter.csv", index=False)
            plot_head_scatter(scatter, stage / "head_scatter.png")
    console.print(summary.to_string(index=False), markup=False)
    if "rcstat" in args.presses:
        console.print(
            f"per-head ratio vs RC: Spearman rho = {scatter.attrs['spearman_rho']:.2f} "
            f"(p = {scatter.attrs['spearman_p']:.1e}, {scatter.attrs['examples']} examples)"
        )
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


@dataclass
class BenchAttributionArgs:
    """Arguments of ``rcstat bench attribution`` (checked)."""

    model: str | None
    dataset: str
    data: str | None
    ks: list[str] = field(default_factory=list)
    n: int | None = None
    out: Path = Path("runs/bench_attribution")
    retry_failed: bool = True

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> BenchAttributionArgs:
        ks = split_list(ns.k)
        if not ks:
            raise ValueError("--k needs at least one value")
        for k in ks:
            if k != "all":
                int_list("--k", [k])
        return cls(
            model=ns.model,
            dataset=_dataset(ns.dataset, "attribution", "bench attribution"),
            data=ns.data,
            ks=ks,
            n=optional_count("--n", ns.n),
            out=Path(ns.out),
            retry_failed=getattr(ns, "retry_failed", True),
        )


def run_attribution(args: BenchAttributionArgs) -> int:
    """Chunk-level accuracy of every method and k (Table 1, Fig. 7); CSV + PNG."""
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout
    from rcstat.data import AttributionExample, load_dataset
    from rcstat.evaluation.attribution_bench import AttributionBench, parse_ks
    from rcstat.runs import check_options, model_label

    # The k values are resolved against the model's head count; they are compared later.
    run_options = {"data": str(Path(args.data).resolve()) if args.data else None}
    check_output_folder(args.out, "bench attribution")
    check_options(args.out, "bench attribution", {"dataset": args.dataset, **run_options})
    loaded = load_dataset(args.dataset, args.data, limit=args.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        console.print(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {args.dataset} ({args.data or 'slice'})")
    model, tokenizer = load_model_quietly(args.model)
    layout = attention_layout(model)
    attributor = Attributor(  # k is set per accuracy row
        model, tokenizer, top_k=None, head_ranking="all", rank_post_softmax=True
    )
    heads = layout.num_layers * layout.num_heads
    bench = AttributionBench(
        args.out,
        args.dataset,
        model_label(args.model),
        parse_ks(",".join(args.ks), heads),
        options=run_options,
        retry_failed=args.retry_failed,
    )
    claim_output_folder(args.out, "bench attribution")
    bench.collect(attributor, examples)
    with staged_output(args.out, "bench attribution", keep=_ATTRIBUTION_ROWS) as stage:
        accuracy = bench.summarize(stage)
    console.print(accuracy.to_string(index=False), markup=False)
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


def run(args: BenchKVArgs | BenchAttributionArgs) -> int:
    """Dispatch to the benchmark of ``args``."""
    if isinstance(args, BenchKVArgs):
        return run_kv(args)
    return run_attribution(args)


def from_namespace(ns: argparse.Namespace) -> BenchKVArgs | BenchAttributionArgs:
    """The checked arguments of the benchmark named by ``ns.bench``."""
    if ns.bench == "kv":
        return BenchKVArgs.from_namespace(ns)
    return BenchAttributionArgs.from_namespace(ns)
