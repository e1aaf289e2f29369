"""``rcstat bench kv`` and ``rcstat bench attribution``: resumable benchmarks over a dataset."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.cli._common import (
    HelpFormatter,
    add_model_option,
    claim_output_folder,
    console,
    count,
    float_list,
    int_list,
    load_model_quietly,
    optional_count,
    split_list,
    step,
)
from rcstat.defaults import DEFAULT_MODEL_NAME, DEFAULT_WINDOW

NAME = "bench"
_KV_PRESSES = "rcstat,knorm,snapkv,streaming_llm,tova,adakv_snapkv"


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

    ab = bench_sub.add_parser(
        "attribution", help="chunk-level attribution accuracy vs k", formatter_class=HelpFormatter
    )
    add_model_option(ab)
    ab.add_argument("--dataset", default="quotesum", help="quotesum or verigran")
    ab.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    ab.add_argument("--k", default="1,2,5,10,20,50,100,all", help="numbers of heads")
    ab.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
    ab.add_argument("--out", default="runs/bench_attribution", help="output folder (resumable)")


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
            max_new_tokens=count("--max-new-tokens", ns.max_new_tokens),
            out=Path(ns.out),
            context=ns.context,
            max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
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

    options = {} if args.context is None else {"context": args.context}
    loaded = load_dataset(args.dataset, args.data, limit=args.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    claim_output_folder(args.out, "bench kv")
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
    grid = settings_grid(args.presses, args.ratios, args.thresholds, args.windows)
    bench = KVBench(
        args.out,
        args.dataset,
        args.model or DEFAULT_MODEL_NAME,
        grid,
        max_new_tokens=args.max_new_tokens,
        config={"skipped_too_long": skipped, "context": args.context, "max_tokens": window},
    )
    summary = bench.run(model, tokenizer, fitting)
    console.print(summary.to_string(index=False), markup=False)
    if "rcstat" in args.presses:
        with step("per-head ratio vs RC (Fig. 4a)…"):
            scatter = head_scatter(model, tokenizer, fitting[:10], window=args.windows[0])
        scatter.to_csv(args.out / "head_scatter.csv", index=False)
        plot_head_scatter(scatter, args.out / "head_scatter.png")
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
        )


def run_attribution(args: BenchAttributionArgs) -> int:
    """Chunk-level accuracy of every method and k (Table 1, Fig. 7); CSV + PNG."""
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout
    from rcstat.data import AttributionExample, load_dataset
    from rcstat.evaluation.attribution_bench import AttributionBench, parse_ks

    loaded = load_dataset(args.dataset, args.data, limit=args.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        console.print(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {args.dataset} ({args.data or 'slice'})")
    claim_output_folder(args.out, "bench attribution")
    model, tokenizer = load_model_quietly(args.model)
    layout = attention_layout(model)
    attributor = Attributor(  # k is set per accuracy row
        model, tokenizer, top_k=None, head_ranking="all", rank_post_softmax=True
    )
    heads = layout.num_layers * layout.num_heads
    bench = AttributionBench(
        args.out, args.dataset, args.model or DEFAULT_MODEL_NAME, parse_ks(",".join(args.ks), heads)
    )
    accuracy = bench.run(attributor, examples)
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
