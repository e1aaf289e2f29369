"""The ``rcstat`` command line: ``demo``, ``analyze``, ``compress``, ``attribute``, ``heads``,
``bench``.

Each sub-command parses into an arguments dataclass and writes its results into ``--out``
atomically: files are written to a temporary folder beside it and moved in only when the
whole command succeeded, so a failure leaves no partial files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rcstat.heads.command import add_heads_parser, run_heads

console = Console(stderr=False)


@contextmanager
def staged_output(out: Path) -> Iterator[Path]:
    """Yield a temporary folder; on success move its files into ``out``, else delete it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield stage
        out.mkdir(parents=True, exist_ok=True)
        for item in stage.iterdir():
            target = out / item.name
            if target.exists():
                target.unlink()
            shutil.move(str(item), target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _text(value: str | None, path: str | None, name: str) -> str | None:
    if value is not None and path is not None:
        raise SystemExit(f"error: give --{name} or --{name}-file, not both")
    if path is not None:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as err:
            raise SystemExit(f"error: cannot read --{name}-file {path}: {err}") from err
    return value


def _head(value: str) -> tuple[int, int]:
    try:
        layer, head = value.split(".")
        return int(layer), int(head)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"--head must look like LAYER.HEAD, got {value!r}"
        ) from err


@dataclass
class AnalyzeArgs:
    """Arguments of ``rcstat analyze``."""

    context: str | None
    question: str | None
    answer: str | None
    prompt: str | None
    generation: str | None
    model: str | None
    out: Path
    tau: float
    top: int
    heads: list[tuple[int, int]]
    question_placement: str
    max_new_tokens: int
    scaled: bool

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> AnalyzeArgs:
        return cls(
            context=_text(ns.context, ns.context_file, "context"),
            question=_text(ns.question, ns.question_file, "question"),
            answer=_text(ns.answer, ns.answer_file, "answer"),
            prompt=_text(ns.prompt, ns.prompt_file, "prompt"),
            generation=_text(ns.generation, ns.generation_file, "generation"),
            model=ns.model,
            out=Path(ns.out),
            tau=ns.tau,
            top=ns.top,
            heads=list(ns.head or []),
            question_placement=ns.question_placement,
            max_new_tokens=ns.max_new_tokens,
            scaled=ns.scaled,
        )


def run_analyze(args: AnalyzeArgs) -> int:
    """Analyse one example and write scores.csv, scores.json, heatmap.png (+ head plots)."""
    from rcstat.analysis import analyze
    from rcstat.models import load_model
    from rcstat.report.console import top_heads_table
    from rcstat.report.plots import save, score_distributions

    with console.status("loading model…"):
        model, tokenizer = load_model(args.model)
    with console.status("generating and analysing (one forward pass)…"):
        if args.prompt is not None or args.generation is not None:
            inputs: dict[str, Any] = {"prompt": args.prompt, "generation": args.generation}
        else:
            inputs = {
                "context": args.context,
                "question": args.question,
                "answer": args.answer,
                "question_placement": args.question_placement,
            }
        result = analyze(
            model,
            tokenizer,
            **inputs,
            max_new_tokens=args.max_new_tokens,
            scaled=args.scaled,
            keep_samples=args.heads,
        )
    with staged_output(args.out) as stage, console.status("writing results…"):
        result.to_frame().to_csv(stage / "scores.csv", index=False)
        result.save(stage / "scores.json")
        save(
            result.heatmap("upper", title=f"upper bound A per head (τ = {args.tau})"),
            str(stage / "heatmap.png"),
        )
        for sample in result.samples:
            fig = score_distributions(
                sample.cross, sample.self_, title=f"layer {sample.layer}, head {sample.head}"
            )
            save(fig, str(stage / f"head_{sample.layer}_{sample.head}.png"))
    # User text and paths may contain [brackets]: escape them, they are not rich markup.
    console.print(f"generation: {escape(repr(result.generation_text))}")
    console.print(top_heads_table(result, k=args.top, tau=args.tau))
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


@dataclass
class DemoArgs:
    """Arguments of ``rcstat demo``."""

    model: str | None
    out: Path
    tau: float


def run_demo(args: DemoArgs) -> int:
    """Contrast a supporting and an unrelated context (paper §5.1) and write an HTML report."""
    from rcstat.demo import run_contrast

    return run_contrast(args.model, args.out, args.tau, console)


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def _names(text: str) -> list[str]:
    return [v for v in text.split(",") if v]


@dataclass
class BenchKVArgs:
    """Arguments of ``rcstat bench kv``."""

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


def _fits(tokenizer: Any, example: Any, budget: int) -> bool:
    """Whether the chat-rendered context + question fit in ``budget`` tokens."""
    text = example.context + "\n\n" + example.question
    return len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 32 <= budget


def run_bench_kv(args: BenchKVArgs) -> int:
    """Run (or resume) the KV-compression benchmark and print the summary."""
    from rcstat.data import QAExample, load_dataset
    from rcstat.evaluation.kv_bench import KVBench, settings_grid
    from rcstat.models import load_model

    options = {} if args.context is None else {"context": args.context}
    loaded = load_dataset(args.dataset, args.data, limit=args.n, **options)
    examples = [e for e in loaded if isinstance(e, QAExample)]
    if len(examples) != len(loaded):
        raise ValueError(
            f"bench kv needs a QA dataset (squad_v2, qmsum, 2wiki), not {args.dataset}"
        )
    if not examples:
        raise ValueError(f"no examples in {args.dataset} ({args.data or 'default slice'})")
    with console.status("loading model…"):
        model, tokenizer = load_model(args.model)
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
        args.model or "SmolLM2-135M-Instruct",
        grid,
        max_new_tokens=args.max_new_tokens,
        config={"skipped_too_long": skipped, "context": args.context, "max_tokens": window},
    )
    summary = bench.run(model, tokenizer, fitting)
    console.print(summary.to_string(index=False))
    if "rcstat" in args.presses:
        from rcstat.evaluation.head_scatter import head_scatter, plot_head_scatter

        with console.status("per-head ratio vs RC (Fig. 4a)…"):
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
class CompressArgs:
    """Arguments of ``rcstat compress``."""

    model: str | None
    context: str
    question: str
    threshold: float
    ratio: float | None
    window: int
    max_new_tokens: int


def run_compress(args: CompressArgs) -> int:
    """Answer with RCStatPress on the ragged cache; print ratios and KV memory."""
    from rich.table import Table

    from rcstat.compress import compress_and_answer, format_bytes
    from rcstat.models import load_model
    from rcstat.press.rcstat_press import RCStatPress

    with console.status("loading model…"):
        model, tokenizer = load_model(args.model)
    press = RCStatPress(
        threshold=args.threshold, window_size=args.window, compression_ratio=args.ratio
    )
    with console.status("compressing the context and answering…"):
        report = compress_and_answer(
            model, tokenizer, args.context, args.question, press, max_new_tokens=args.max_new_tokens
        )
    console.print(f"answer: {escape(report.answer)!s}")
    table = Table(title=f"realized compression ratio per layer (global {report.ratio:.3f})")
    table.add_column("layer", justify="right")
    table.add_column("ratio", justify="right")
    table.add_column("per KV head", justify="left")
    for layer, ratio in report.layer_ratios.items():
        heads = " ".join(f"{r:.2f}" for r in report.head_ratios[layer])
        table.add_row(str(layer), f"{ratio:.3f}", heads)
    console.print(table)
    console.print(
        f"KV cache of the {report.context_tokens}-token context: full "
        f"{format_bytes(report.dense_bytes)} → live {format_bytes(report.live_bytes)} "
        f"({report.live_bytes / report.dense_bytes:.1%}; allocated with spare room "
        f"{format_bytes(report.allocated_bytes)})"
    )
    return 0


@dataclass
class AttributeArgs:
    """Arguments of ``rcstat attribute``."""

    model: str | None
    context: str | list[str]
    question: str
    answer: str | None
    granularity: str | None
    top_k: int
    ranking: str
    statistic: str
    max_new_tokens: int
    out: Path

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> AttributeArgs:
        context: str | list[str] | None = _text(ns.context, ns.context_file, "context")
        if ns.chunks_file is not None:
            if context is not None:
                raise ValueError("give --context/--context-file or --chunks-file, not both")
            context = _chunks_file(ns.chunks_file)
        question = _text(ns.question, ns.question_file, "question")
        if context is None or question is None:
            raise ValueError(
                "attribute needs a context (--context, --context-file or --chunks-file) "
                "and --question"
            )
        return cls(
            model=ns.model,
            context=context,
            question=question,
            answer=_text(ns.answer, ns.answer_file, "answer"),
            granularity=ns.granularity,
            top_k=ns.top_k,
            ranking=ns.ranking,
            statistic=ns.statistic,
            max_new_tokens=ns.max_new_tokens,
            out=Path(ns.out),
        )


def _chunks_file(path: str) -> list[str]:
    """A JSON list of strings, or a text file whose blank-line-separated paragraphs are chunks."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise SystemExit(f"error: cannot read --chunks-file {path}: {err}") from err
    if path.endswith(".json"):
        chunks = json.loads(text)
        if not isinstance(chunks, list) or not all(isinstance(c, str) for c in chunks):
            raise ValueError(f"{path}: expected a JSON list of strings")
        return chunks
    return [c.strip() for c in text.split("\n\n") if c.strip()]


def run_attribute(args: AttributeArgs) -> int:
    """Attribute the answer's sentences; print a table, write attribution.{csv,json,html}."""
    from rich.table import Table

    from rcstat.attribution import Attributor
    from rcstat.models import load_model

    with console.status("loading model…"):
        model, tokenizer = load_model(args.model)
    attributor = Attributor(
        model,
        tokenizer,
        top_k=args.top_k,
        head_ranking=args.ranking,  # type: ignore[arg-type]
        statistic=args.statistic,  # type: ignore[arg-type]
        max_new_tokens=args.max_new_tokens,
    )
    with console.status("attributing (one forward pass)…"):
        result = attributor.attribute(
            args.context,
            args.question,
            args.answer,
            granularity=args.granularity,  # type: ignore[arg-type]
        )
    with staged_output(args.out) as stage, console.status("writing results…"):
        result.to_frame().to_csv(stage / "attribution.csv", index=False)
        (stage / "attribution.json").write_text(result.to_json(), encoding="utf-8")
        result.to_html(stage / "attribution.html")
    console.print(f"answer: {escape(result.answer)}")
    table = Table(title=f"attribution ({escape(result.method)})")
    table.add_column("answer unit")
    table.add_column("attributed span")
    table.add_column("score", justify="right")
    table.add_column("mean attention picks")
    baseline = result.attention_scores()[1]
    for unit, picked, score_row, other in zip(
        result.units, result.attributed, result.scores, baseline, strict=True
    ):
        span = "—" if picked is None else _clip(result.spans[picked].text)
        alt = "—" if other is None else _clip(result.spans[other].text)
        score = "—" if picked is None else f"{score_row[picked]:.3f}"
        table.add_row(escape(_clip(unit.text)), escape(span), score, escape(alt))
    console.print(table)
    console.print(f"results written to {escape(str(args.out))}/ (open attribution.html)")
    return 0


def _clip(text: str, width: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


@dataclass
class BenchAttributionArgs:
    """Arguments of ``rcstat bench attribution``."""

    model: str | None
    dataset: str
    data: str | None
    ks: str
    n: int | None
    out: Path


def run_bench_attribution(args: BenchAttributionArgs) -> int:
    """Chunk-level accuracy of every method and k (Table 1, Fig. 7); CSV + PNG."""
    from rcstat.attribution import Attributor
    from rcstat.capture import attention_layout
    from rcstat.data import AttributionExample, load_dataset
    from rcstat.evaluation.attribution_bench import AttributionBench, parse_ks
    from rcstat.models import load_model

    loaded = load_dataset(args.dataset, args.data, limit=args.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        if not any(isinstance(e, AttributionExample) for e in loaded):
            raise ValueError(f"bench attribution needs quotesum or verigran, not {args.dataset}")
        console.print(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {args.dataset} ({args.data or 'slice'})")
    with console.status("loading model…"):
        model, tokenizer = load_model(args.model)
    layout = attention_layout(model)
    attributor = Attributor(  # k is set per accuracy row
        model, tokenizer, top_k=None, head_ranking="all", rank_post_softmax=True
    )
    heads = layout.num_layers * layout.num_heads
    bench = AttributionBench(
        args.out, args.dataset, args.model or "SmolLM2-135M-Instruct", parse_ks(args.ks, heads)
    )
    accuracy = bench.run(attributor, examples)
    console.print(accuracy.to_string(index=False))
    console.print(f"results written to {escape(str(args.out))}/")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rcstat", description="Relative Contextualization statistics of attention heads."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="contrast a supporting and an unrelated context")
    demo.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    demo.add_argument("--out", default="runs/demo", help="output folder")
    demo.add_argument("--tau", type=float, default=1.5, help="threshold on the upper bound")

    bench = sub.add_parser("bench", help="benchmarks over a dataset")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    kv = bench_sub.add_parser("kv", help="KV-cache compression: VER, ROUGE, realized ratio")
    kv.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    kv.add_argument("--dataset", default="squad_v2", help="squad_v2, qmsum or 2wiki")
    kv.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    kv.add_argument(
        "--presses",
        type=_names,
        default=["rcstat", "knorm", "snapkv", "streaming_llm", "tova", "adakv_snapkv"],
    )
    kv.add_argument("--ratios", type=_floats, default=[0.3, 0.5, 0.7])
    kv.add_argument("--thresholds", type=_floats, default=[0.2, 0.7, 0.8, 1.0, 1.2, 1.3, 1.8])
    kv.add_argument("--window", type=lambda t: [int(v) for v in t.split(",")], default=[8, 16])
    kv.add_argument("--n", type=int, default=None, help="first N examples")
    kv.add_argument("--max-new-tokens", type=int, default=32)
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

    ab = bench_sub.add_parser("attribution", help="chunk-level attribution accuracy vs k")
    ab.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    ab.add_argument("--dataset", default="quotesum", help="quotesum or verigran")
    ab.add_argument("--data", default=None, help="upstream file (default: the shared slice)")
    ab.add_argument("--k", default="1,2,5,10,20,50,100,all", help="numbers of heads")
    ab.add_argument("--n", type=int, default=None, help="first N examples")
    ab.add_argument("--out", default="runs/bench_attribution", help="output folder (resumable)")

    at = sub.add_parser("attribute", help="attribute an answer to context chunks/sentences/tokens")
    at.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    for name, what in [
        ("context", "context text"),
        ("question", "question text"),
        ("answer", "answer to attribute (generated when absent)"),
    ]:
        at.add_argument(f"--{name}", default=None, help=what)
        at.add_argument(f"--{name}-file", default=None, help=f"read the {name} from a file")
    at.add_argument(
        "--chunks-file",
        default=None,
        help="context as chunks: a JSON list of strings, or paragraphs separated by blank lines",
    )
    at.add_argument("--granularity", choices=["chunk", "sentence", "token"], default=None)
    at.add_argument("--top-k", type=int, default=20, help="number of heads (default 20)")
    at.add_argument(
        "--ranking",
        choices=["top", "bottom", "all", "top_post_softmax", "bottom_post_softmax"],
        default="top",
    )
    at.add_argument("--statistic", choices=["expected", "upper"], default="expected")
    at.add_argument("--max-new-tokens", type=int, default=64)
    at.add_argument("--out", default="runs/attribute", help="output folder")

    co = sub.add_parser("compress", help="answer with RCStatPress on a really compressed cache")
    co.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    for name in ("context", "question"):
        co.add_argument(f"--{name}", default=None, help=f"{name} text")
        co.add_argument(f"--{name}-file", default=None, help=f"read the {name} from a file")
    co.add_argument("--threshold", type=float, default=1.0, help="c of eq. 9 (threshold mode)")
    co.add_argument("--ratio", type=float, default=None, help="target ratio (overrides c)")
    co.add_argument("--window", type=int, default=8, help="window size w")
    co.add_argument("--max-new-tokens", type=int, default=64)

    an = sub.add_parser("analyze", help="per-head RC scores of one example")
    for name, what in [
        ("context", "context text (chat mode)"),
        ("question", "question text (chat mode)"),
        ("answer", "answer to teacher-force (chat mode; generated when absent)"),
        ("prompt", "raw prompt, no chat template"),
        ("generation", "raw continuation to analyse (generated when absent)"),
    ]:
        an.add_argument(f"--{name}", default=None, help=what)
        an.add_argument(f"--{name}-file", default=None, help=f"read the {name} from a file")
    an.add_argument("--model", default=None, help="hub id or local path (default: embedded)")
    an.add_argument("--out", default="runs/analyze", help="output folder")
    an.add_argument("--tau", type=float, default=1.5, help="threshold for the head counts")
    an.add_argument("--top", type=int, default=10, help="rows of the top-heads table")
    an.add_argument(
        "--head",
        type=_head,
        action="append",
        help="LAYER.HEAD: also plot that head's cross vs self scores (repeatable)",
    )
    an.add_argument("--question-placement", choices=["prompt", "generation"], default="prompt")
    an.add_argument("--max-new-tokens", type=int, default=64)
    an.add_argument("--scaled", action="store_true", help="use <q,k>/sqrt(d) instead of raw")
    add_heads_parser(sub)
    return parser


def _quiet_transformers() -> None:
    """The CLI shows its own progress: silence transformers' per-tensor loading bars."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    _quiet_transformers()
    try:
        if ns.command == "analyze":
            return run_analyze(AnalyzeArgs.from_namespace(ns))
        if ns.command == "compress":
            context = _text(ns.context, ns.context_file, "context")
            question = _text(ns.question, ns.question_file, "question")
            if context is None or question is None:
                raise ValueError("compress needs --context (or --context-file) and --question")
            return run_compress(
                CompressArgs(
                    ns.model,
                    context,
                    question,
                    ns.threshold,
                    ns.ratio,
                    ns.window,
                    ns.max_new_tokens,
                )
            )
        if ns.command == "attribute":
            return run_attribute(AttributeArgs.from_namespace(ns))
        if ns.command == "bench" and ns.bench == "attribution":
            return run_bench_attribution(
                BenchAttributionArgs(
                    model=ns.model,
                    dataset=ns.dataset,
                    data=ns.data,
                    ks=ns.k,
                    n=ns.n,
                    out=Path(ns.out),
                )
            )
        if ns.command == "bench":
            return run_bench_kv(
                BenchKVArgs(
                    model=ns.model,
                    dataset=ns.dataset,
                    data=ns.data,
                    presses=ns.presses,
                    ratios=ns.ratios,
                    thresholds=ns.thresholds,
                    windows=ns.window,
                    n=ns.n,
                    max_new_tokens=ns.max_new_tokens,
                    out=Path(ns.out),
                    context=ns.context,
                    max_tokens=ns.max_tokens,
                )
            )
        if ns.command == "heads":
            return run_heads(ns, console)
        return run_demo(DemoArgs(model=ns.model, out=Path(ns.out), tau=ns.tau))
    # OSError: a --model path that does not exist or is a file, an unreadable checkpoint.
    except (ValueError, FloatingPointError, RuntimeError, OSError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
