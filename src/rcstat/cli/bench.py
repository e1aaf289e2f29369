"""``rcstat bench kv``, ``attribution`` and ``grounding``: resumable benchmarks over a dataset.

Both grow their rows in ``--out`` one item at a time (see :mod:`rcstat.runs`): the options that
change rows are compared with the run's manifest before the model loads, the model and the
tokenizer after; the summaries are then rebuilt from every row through
:func:`~rcstat.cli._common.staged_output`, so that a failed summary leaves the rows as they were.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.checks import check_count, check_number
from rcstat.cli._common import (
    PRESS_CHOICES,
    HelpFormatter,
    Placement,
    add_attribution_options,
    add_model_option,
    add_press_options,
    add_shard_option,
    check_output_folder,
    check_run_options,
    check_span_score,
    claim_output_folder,
    console,
    float_list,
    int_list,
    load_model_quietly,
    optional_count,
    shard_from_namespace,
    split_list,
    staged_output,
    step,
)
from rcstat.defaults import DEFAULT_WINDOW, QUESTION_WINDOW
from rcstat.runs.shards import Shard

NAME = "bench"
_KV_PRESSES = "rcstat,knorm,snapkv,streaming_llm,tova,adakv_snapkv"
# The row files of each benchmark (rcstat.evaluation.*_bench.ROW_FILES, named here so that
# `rcstat --help` imports no torch).
_KV_ROWS = ("run.json", "config.json", "predictions.jsonl", "parts")
_ATTRIBUTION_ROWS = ("run.json", "predictions.jsonl", "parts")
_GROUNDING_ROWS = ("run.json", "predictions.jsonl", "tokens", "parts")
_SCATTER = "head_scatter.csv"


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """``--no-retry-failed`` and ``--shard`` (every benchmark is a resumable dataset run)."""
    _add_retry_option(parser)
    add_shard_option(parser)


def _placed(ns: argparse.Namespace) -> tuple[Placement, Shard]:
    """The checked placement and shard of a benchmark process."""
    shard = shard_from_namespace(ns)
    return Placement.from_namespace(ns).for_shard(shard), shard


def _add_retry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help="when resuming, skip the items that failed instead of running them again",
    )


def register(sub: Any) -> None:
    """Add ``bench kv``, ``bench attribution`` and ``bench grounding`` to ``sub``."""
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
    _add_run_options(kv)

    ab = bench_sub.add_parser(
        "attribution", help="chunk-level attribution accuracy vs k", formatter_class=HelpFormatter
    )
    add_model_option(ab)
    ab.add_argument("--dataset", default="quotesum", help="quotesum or verigran")
    ab.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    ab.add_argument("--k", default="1,2,5,10,20,50,100,all", help="numbers of heads")
    ab.add_argument("--n", type=int, default=None, help="first N examples (default: all)")
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
    ab.add_argument(
        "--statistic",
        choices=["expected", "upper"],
        default="expected",
        help="the RC statistic that scores spans and ranks heads",
    )
    add_attribution_options(ab)
    ab.add_argument(
        "--fixed-heads-from",
        default=None,
        metavar="RUN",
        help="another bench attribution run of the same model: adds top_fixed, one head set "
        "for every example (the heads of lowest mean rank over that run's examples)",
    )
    ab.add_argument("--out", default="runs/bench_attribution", help="output folder (resumable)")
    _add_run_options(ab)

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
    _add_run_options(gb)


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
    placement: Placement
    dataset: str
    data: str | None
    presses: list[str]
    ratios: list[float]
    thresholds: list[float]
    windows: list[int | str]
    n: int | None
    max_new_tokens: int
    out: Path
    groups: list[str | None] = field(default_factory=lambda: [None])
    scores: list[str] = field(default_factory=lambda: ["expected"])
    budgets: list[str] = field(default_factory=lambda: ["layer"])
    floor: float = 0.2
    sinks: list[int] = field(default_factory=lambda: [0])
    placement_of_question: str = "context"
    context: str | None = None
    max_tokens: int | None = None
    retry_failed: bool = True
    shard: Shard = field(default_factory=Shard)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> BenchKVArgs:
        from rcstat.press.registry import check_press_names

        dataset = _dataset(ns.dataset, "qa", "bench kv")
        if ns.context is not None and dataset != "qmsum":
            raise ValueError("--context applies to --dataset qmsum only")
        placement, shard = _placed(ns)
        return cls(
            model=ns.model,
            placement=placement,
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
            placement_of_question=ns.placement,
            n=optional_count("--n", ns.n),
            max_new_tokens=check_count("--max-new-tokens", ns.max_new_tokens),
            out=Path(ns.out),
            context=ns.context,
            max_tokens=optional_count("--max-tokens", ns.max_tokens, low=2),
            retry_failed=getattr(ns, "retry_failed", True),
        )


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


def _fits(tokenizer: Any, example: Any, budget: int) -> bool:
    """Whether the chat-rendered context + question fit in ``budget`` tokens."""
    text = example.context + "\n\n" + example.question
    return _count(tokenizer, text) + _TEMPLATE_TOKENS <= budget


#: Tokens left for the chat template around context and question.
_TEMPLATE_TOKENS = 32


def _count(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _fit_windows(tokenizer: Any, examples: list[Any], budget: int) -> list[Any]:
    """Each QMSum query's transcript cut to the turns around its span that fit ``budget``
    with the question and template (:func:`rcstat.data.qmsum.fit_turns`); a query whose span
    alone is too long keeps its whole transcript (and is then skipped as too long)."""
    from rcstat.data.qmsum import fit_turns

    fitted = []
    for example in examples:
        room = budget - _TEMPLATE_TOKENS - _count(tokenizer, "\n\n" + example.question)
        cut = fit_turns(example, lambda text: _count(tokenizer, text), room)
        fitted.append(example if cut is None else cut)
    return fitted


def run_kv(args: BenchKVArgs) -> int:
    """Run (or resume) the KV-compression benchmark and print the summary."""
    from rcstat.press.extra import require_kvpress

    require_kvpress("rcstat bench kv")
    from rcstat.data import QAExample, load_dataset
    from rcstat.evaluation.head_scatter import head_scatter
    from rcstat.evaluation.kv_bench import KVBench, settings_grid
    from rcstat.runs import model_label
    from rcstat.runs.parts import part_folder

    grid = settings_grid(
        args.presses,
        args.ratios,
        args.thresholds,
        args.windows,
        args.groups,
        scores=args.scores,
        budgets=args.budgets,
        floor=args.floor,
        sinks=args.sinks,
    )
    # Not --n: a run grows by resuming with a larger --n.
    run_options = {
        "data": str(Path(args.data).resolve()) if args.data else None,
        "context": args.context,
        "max_tokens": args.max_tokens,
    }
    probe = KVBench(
        args.out,
        args.dataset,
        "",
        grid,
        args.max_new_tokens,
        options=run_options,
        placement=args.placement_of_question,
    )
    check_output_folder(args.out, "bench kv")
    check_run_options(args.out, "bench kv", probe.manifest_options(), args.shard)
    options = {} if args.context is None else {"context": args.context}
    if args.context == "window":  # whole transcripts, cut once the tokenizer is loaded
        options["context"] = "full"
    loaded = load_dataset(args.dataset, args.data, limit=args.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    model, tokenizer = load_model_quietly(args.model, args.placement)
    window = int(model.config.max_position_embeddings)
    if args.max_tokens is not None:
        window = min(window, args.max_tokens)
    if args.context == "window":
        examples = _fit_windows(tokenizer, examples, window - args.max_new_tokens)
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
        placement=args.placement_of_question,
    )
    claim_output_folder(args.out, "bench kv")
    settings = {
        "dataset": args.dataset,
        "model_name": model_label(args.model),
        "presses": args.presses,
        "scatter_examples": min(len(fitting), 10) if "rcstat" in args.presses else 0,
        "shards": args.shard.count,
    }
    scatter = None
    if "rcstat" in args.presses and args.shard.index == 0:  # before the rows: the last
        sized = [w for w in args.windows if isinstance(w, int)]
        scatter = head_scatter(
            model, tokenizer, fitting[:10], window=sized[0] if sized else DEFAULT_WINDOW
        )
        if args.shard.split:  # process to finish summarises with it
            folder = part_folder(args.out, args.shard)
            folder.mkdir(parents=True, exist_ok=True)
            scatter.to_csv(folder / _SCATTER, index=False)
    bench.collect(model, tokenizer, fitting, shard=args.shard, merge_settings=settings)
    return _summary_or_part(args, bench.merged, lambda: summarize_kv(args.out, settings, scatter))


def _summary_or_part(args: Any, merged: bool, summarize: Callable[[], int]) -> int:
    """Summarise the run, unless this process's part is done but the run is not merged
    (another shard is still working; say where the part is)."""
    from rcstat.cli.heads import part_done

    if args.shard.split and not merged:
        console.print(part_done(args.out, args.shard))
        return 0
    return summarize()


def summarize_kv(out: Path, settings: dict[str, Any], scatter: Any = None) -> int:
    """Rebuild the summaries of a ``bench kv`` run (or merged run) in ``out`` and print them;
    ``scatter`` (the head scatter) is read from shard 0's part when not given."""
    from rcstat.evaluation.head_scatter import plot_head_scatter, with_spearman
    from rcstat.evaluation.kv_bench import KVBench
    from rcstat.runs.parts import read_parts

    if scatter is None and settings["scatter_examples"]:
        import pandas as pd

        first = read_parts(out, count=settings["shards"])[0].folder / _SCATTER
        if first.is_file():  # round trip: the floats shard 0 wrote, to the last digit
            frame = pd.read_csv(first, float_precision="round_trip")
            scatter = with_spearman(frame, settings["scatter_examples"])
        else:  # shard 0 has not started yet (its part was complete before it ran)
            console.print(f"no head scatter yet: {escape(str(first))} is not written")
    bench = KVBench(out, settings["dataset"], settings["model_name"], [])
    with step("summarising…"), staged_output(out, "bench kv", keep=_KV_ROWS) as stage:
        summary = bench.summarize(stage)
        if scatter is not None:
            scatter.to_csv(stage / _SCATTER, index=False)
            plot_head_scatter(scatter, stage / "head_scatter.png")
    console.print(summary.to_string(index=False), markup=False)
    compared = pd_table_frame(out / "comparison.csv", metric=True)
    if compared is not None:
        console.print("RCStat − the best baseline at each ratio, paired over examples:")
        console.print(compared, markup=False)
    if scatter is not None:
        console.print(
            f"per-head ratio vs RC: Spearman rho = {scatter.attrs['spearman_rho']:.2f} "
            f"(p = {scatter.attrs['spearman_p']:.1e}, {scatter.attrs['examples']} examples)"
        )
    console.print(f"results written to {escape(str(out))}/")
    return 0


@dataclass
class BenchAttributionArgs:
    """Arguments of ``rcstat bench attribution`` (checked)."""

    model: str | None
    placement: Placement
    dataset: str
    data: str | None
    ks: list[str] = field(default_factory=list)
    n: int | None = None
    out: Path = Path("runs/bench_attribution")
    retry_failed: bool = True
    shard: Shard = field(default_factory=Shard)
    layout: str = "numbered"
    max_tokens: int | None = None
    statistic: str = "expected"
    span_score: str = "sentence"
    question_first: bool = False
    fixed_heads_from: Path | None = None

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> BenchAttributionArgs:
        ks = split_list(ns.k)
        if not ks:
            raise ValueError("--k needs at least one value")
        for k in ks:
            if k != "all":
                int_list("--k", [k])
        placement, shard = _placed(ns)
        return cls(
            model=ns.model,
            placement=placement,
            shard=shard,
            dataset=_dataset(ns.dataset, "attribution", "bench attribution"),
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
            fixed_heads_from=_fixed_heads_from(ns.fixed_heads_from, Path(ns.out)),
        )


def _fixed_heads_from(value: str | None, out: Path) -> Path | None:
    """``--fixed-heads-from``: an existing run folder other than ``--out``."""
    if value is None:
        return None
    path = Path(value)
    if not (path / "predictions.jsonl").is_file():
        raise ValueError(f"--fixed-heads-from {value}: no bench attribution run there")
    if path.resolve() == out.resolve():
        raise ValueError("--fixed-heads-from: give another run than --out")
    return path


def run_attribution(args: BenchAttributionArgs) -> int:
    """Chunk-level accuracy of every method and k (Table 1, Fig. 7); CSV + PNG."""
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout
    from rcstat.data import AttributionExample, load_dataset
    from rcstat.evaluation.attribution_bench import (
        AttributionBench,
        parse_ks,
        prompt_tokens,
        read_head_scores,
    )
    from rcstat.runs import model_label

    # The k values are resolved against the model's head count; they are compared later.
    run_options = {
        "data": str(Path(args.data).resolve()) if args.data else None,
        "max_tokens": args.max_tokens,
    }
    check_output_folder(args.out, "bench attribution")
    compared: dict[str, Any] = {
        "dataset": args.dataset,
        "layout": args.layout,
        "statistic": args.statistic,
        **run_options,
    }
    if args.span_score != "mean":
        compared["span_score"] = args.span_score
    if args.question_first:
        compared["question_first"] = True
    fixed = read_head_scores(args.fixed_heads_from) if args.fixed_heads_from else None
    check_run_options(args.out, "bench attribution", compared, args.shard)
    loaded = load_dataset(args.dataset, args.data, limit=args.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        console.print(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {args.dataset} ({args.data or 'slice'})")
    model, tokenizer = load_model_quietly(args.model, args.placement)
    layout = attention_layout(model)
    if args.max_tokens is not None:
        fitting = [
            e
            for e in examples
            if prompt_tokens(tokenizer, e, args.layout, question_first=args.question_first)
            <= args.max_tokens
        ]
        if len(fitting) != len(examples):
            console.print(
                f"skipping {len(examples) - len(fitting)} examples whose prompt is longer than "
                f"{args.max_tokens} tokens"
            )
        if not fitting:
            raise ValueError(f"every example's prompt is longer than {args.max_tokens} tokens")
        examples = fitting
    attributor = Attributor(  # k is set per accuracy row
        model,
        tokenizer,
        top_k=None,
        head_ranking="all",
        rank_post_softmax=True,
        statistic=args.statistic,  # type: ignore[arg-type]
        span_score=args.span_score,  # type: ignore[arg-type]
        question_first=args.question_first,
    )
    heads = layout.num_layers * layout.num_heads
    bench = AttributionBench(
        args.out,
        args.dataset,
        model_label(args.model),
        parse_ks(",".join(args.ks), heads),
        options=run_options,
        retry_failed=args.retry_failed,
        layout=args.layout,
        fixed_rankings=None if fixed is None else fixed[0],
        fixed_source=None if args.fixed_heads_from is None else str(args.fixed_heads_from),
        fixed_model=None if fixed is None else fixed[1],
    )
    claim_output_folder(args.out, "bench attribution")
    settings = {"dataset": args.dataset, "model_name": model_label(args.model), "ks": bench.ks}
    bench.collect(attributor, examples, shard=args.shard, merge_settings=settings)
    return _summary_or_part(args, bench.merged, lambda: summarize_attribution(args.out, settings))


def summarize_attribution(out: Path, settings: dict[str, Any]) -> int:
    """Rebuild the summaries of a ``bench attribution`` run in ``out`` and print them."""
    from rcstat.evaluation.attribution_bench import AttributionBench

    bench = AttributionBench(out, settings["dataset"], settings["model_name"], settings["ks"])
    with staged_output(out, "bench attribution", keep=_ATTRIBUTION_ROWS) as stage:
        accuracy = bench.summarize(stage)
    console.print(accuracy.to_string(index=False), markup=False)
    comparison = pd_table_frame(out / "comparison.csv")
    if comparison is not None:
        console.print("paired over examples (accuracy points, 95 % bootstrap interval):")
        console.print(comparison, markup=False)
    console.print(f"results written to {escape(str(out))}/")
    return 0


def pd_table_frame(path: Path, *, metric: bool = False) -> str | None:
    """A ``comparison.csv`` as a short text table (None when it is empty)."""
    import pandas as pd

    frame = pd.read_csv(path) if path.stat().st_size > 1 else pd.DataFrame()
    if frame.empty:
        return None
    knobs = [c for c in ("window", "group", "score", "budget", "floor", "sinks") if c in frame]
    varying = [c for c in knobs if frame[c].nunique() > 1] if metric else []  # RCStat's knobs
    first = ["subset", "ratio", *varying, "metric", "quotient"] if metric else ["method", "k"]
    shown = frame[[*first, "baseline", "difference", "low", "high", "win_share", "examples"]]
    return shown.to_string(index=False, float_format=lambda v: f"{v:.3g}")


@dataclass
class BenchGroundingArgs:
    """Arguments of ``rcstat bench grounding`` (checked)."""

    model: str | None
    placement: Placement
    dataset: str
    data: str | None
    n: int | None
    questionable: bool
    profile: Path | None
    resamples: int
    out: Path
    retry_failed: bool = True
    shard: Shard = field(default_factory=Shard)

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> BenchGroundingArgs:
        dataset = ns.dataset.strip().lower().replace("_", "-")
        choices = ("faithbench", "summedits", "squad-contrast")
        if dataset not in choices:
            raise ValueError(
                f"bench grounding needs --dataset {' or '.join(choices)}, not {ns.dataset}"
            )
        if ns.questionable and dataset != "faithbench":
            raise ValueError("--questionable applies to --dataset faithbench only")
        if ns.profile is not None and not Path(ns.profile).is_file():
            raise ValueError(f"--profile {ns.profile}: no such file")
        placement, shard = _placed(ns)
        return cls(
            model=ns.model,
            placement=placement,
            shard=shard,
            dataset=dataset,
            data=ns.data,
            n=optional_count("--n", ns.n),
            questionable=ns.questionable,
            profile=None if ns.profile is None else Path(ns.profile),
            resamples=check_count("--resamples", ns.resamples),
            out=Path(ns.out),
            retry_failed=getattr(ns, "retry_failed", True),
        )


def run_grounding(args: BenchGroundingArgs) -> int:
    """Every grounding method on one dataset; metrics.csv, report.json, roc.png."""
    from rcstat.capture import attention_layout
    from rcstat.data import load_dataset
    from rcstat.evaluation.grounding_bench import (
        GroundingBench,
        contrast_items,
        grounding_items,
    )
    from rcstat.grounding import Grounder
    from rcstat.runs import model_label

    run_options = {
        "data": str(Path(args.data).resolve()) if args.data else None,
        "questionable": args.questionable,
        "profile": str(args.profile.resolve()) if args.profile else None,
    }
    check_output_folder(args.out, "bench grounding")
    compared = {"dataset": args.dataset, **run_options}
    check_run_options(args.out, "bench grounding", compared, args.shard)
    if args.dataset == "squad-contrast":
        items = contrast_items(load_dataset("squad_v2", args.data, limit=args.n))  # type: ignore[arg-type]
    else:
        options = {"questionable": True} if args.questionable else {}
        loaded = load_dataset(args.dataset, args.data, limit=args.n, **options)
        items = grounding_items(loaded)  # type: ignore[arg-type]
    if not items:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    model, tokenizer = load_model_quietly(args.model, args.placement)
    layout = attention_layout(model)
    grounder = Grounder(model, tokenizer, profile=args.profile, all_heads=True)
    bench = GroundingBench(
        args.out,
        args.dataset,
        model_label(args.model),
        options=run_options,
        retry_failed=args.retry_failed,
        n_resamples=args.resamples,
    )
    claim_output_folder(args.out, "bench grounding")
    settings = {
        "dataset": args.dataset,
        "model_name": model_label(args.model),
        "resamples": args.resamples,
        "layers": layout.num_layers,
        "heads": layout.num_heads,
    }
    bench.collect(grounder, items, shard=args.shard, merge_settings=settings)
    return _summary_or_part(args, bench.merged, lambda: summarize_grounding(args.out, settings))


def summarize_grounding(out: Path, settings: dict[str, Any]) -> int:
    """Rebuild the summaries of a ``bench grounding`` run in ``out`` and print them."""
    import json

    from rcstat.evaluation.grounding_bench import GroundingBench

    bench = GroundingBench(
        out, settings["dataset"], settings["model_name"], n_resamples=settings["resamples"]
    )
    with (
        step("summarising…"),
        staged_output(out, "bench grounding", keep=_GROUNDING_ROWS) as stage,
    ):
        report = bench.summarize(stage, layers=settings["layers"], heads=settings["heads"])
        (stage / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    table = pd_table(report["metrics"])
    console.print(table, markup=False)
    probe = report.get("probe", {})
    if "note" in probe:
        console.print(f"probe: not trained ({probe['note']})", markup=False)
    elif probe:
        folds = ", ".join(f"{k} features {v['auroc']:.3f}" for k, v in probe.items())
        console.print(f"probe (grouped 5-fold, out-of-fold AUROC): {folds}", markup=False)
    if "spans" in report and "rcstat_zero_shot_token_auroc" in report["spans"]:
        spans = report["spans"]
        console.print(
            f"span level (token AUROC on unwanted spans): zero-shot "
            f"{spans['rcstat_zero_shot_token_auroc']:.3f}, probe "
            + ", ".join(f"{k} {v:.3f}" for k, v in spans["probe_token_auroc"].items()),
            markup=False,
        )
    console.print(f"results written to {escape(str(out))}/")
    return 0


def pd_table(rows: list[dict[str, Any]]) -> str:
    """The metrics rows as an aligned text table (3 decimals)."""
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.3f}")


def run(args: BenchKVArgs | BenchAttributionArgs | BenchGroundingArgs) -> int:
    """Dispatch to the benchmark of ``args``."""
    if isinstance(args, BenchKVArgs):
        return run_kv(args)
    if isinstance(args, BenchGroundingArgs):
        return run_grounding(args)
    return run_attribution(args)


def from_namespace(
    ns: argparse.Namespace,
) -> BenchKVArgs | BenchAttributionArgs | BenchGroundingArgs:
    """The checked arguments of the benchmark named by ``ns.bench``."""
    if ns.bench == "kv":
        return BenchKVArgs.from_namespace(ns)
    if ns.bench == "grounding":
        return BenchGroundingArgs.from_namespace(ns)
    return BenchAttributionArgs.from_namespace(ns)
