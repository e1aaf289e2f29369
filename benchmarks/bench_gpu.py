"""Every GPU path of rcstat against the pass it rides on, in one run on one card.

For each prompt length |p| and generation length |g| on a random-weight model with
Llama-3.1-8B shapes (bfloat16, sdpa), interleaved medians of ``--rounds`` (each ratio is the
ratio of the medians, with the smallest and largest per-round ratio beside it):

- analyze / forward: ``analyze_segmented`` (E, A and normalized RC of every head; the lower
  bound only with ``--lower-bound``) vs ``model(ids, use_cache=False)`` (and vs the same with
  ``logits_to_keep=1``, what analyze runs);
- attribution / forward: ``Attributor.attribute`` of a |g|-token answer over a |p|-token
  context in 64-token chunks vs a plain forward pass of the same ids;
- grounding / forward: ``Grounder.ground`` of a |g|-token response vs a plain forward pass;
- press prefill / SnapKV (per |p|): the prefill with ``RCStatPress`` (ratio 0.5 and c = 1)
  vs kvpress's ``SnapKVPress`` at the same ratio (skipped when kvpress is missing).

A profile summary of one analyze call per configuration (``torch.profiler``): CUDA kernels per
layer beyond the forward pass, GPU busy time and the time the GPU idles.

Texts are synthetic sentences (the device machine has no data), tokenised with the default
model's tokenizer (``--tokenizer DIR``, a ``save_pretrained`` folder).

    python -m benchmarks.bench_gpu --tokenizer runs/tok --prompt 2048,8192,16384 \\
        --gen 16,64,256 --rounds 3 --out docs/bench
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import (
    TOUCH_GIB,
    device_label,
    forward_fns,
    interleaved,
    interleaved_runs,
    ints,
    llama_8b,
    machine,
    ratio_spread,
    touch_host_memory,
    write,
)
from rcstat.analysis import analyze_segmented
from rcstat.segments import Segmented

WORDS = (
    "the model reads a long report about rivers bridges markets harvests weather councils "
    "budgets schools trains ports engines museums forests islands festivals courts letters "
    "and writes that each region grew while prices fell during the cold winter of that year"
).split()


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))).capitalize() + "."
        for _ in range(count)
    ]


def text_of(tokenizer: Any, tokens: int, seed: int) -> list[str]:
    """Sentences whose concatenation has about ``tokens`` tokens."""
    found: list[str] = []
    length = 0
    for sentence in sentences(tokens, seed):
        if length >= tokens:
            break
        found.append(sentence)
        length += len(tokenizer(" " + sentence, add_special_tokens=False)["input_ids"])
    return found


def chunks_of(parts: list[str], tokenizer: Any, size: int = 64) -> list[str]:
    """Group sentences into chunks of about ``size`` tokens."""
    chunks, current, length = [], [], 0
    for sentence in parts:
        current.append(sentence)
        length += len(tokenizer(" " + sentence, add_special_tokens=False)["input_ids"])
        if length >= size:
            chunks.append(" ".join(current))
            current, length = [], 0
    if current:
        chunks.append(" ".join(current))
    return chunks


@dataclass(frozen=True)
class CallTimeline:
    """Where one profiled call spent its time (ms): ``kernels`` launched, the GPU ``busy``
    (union of the kernels' intervals) and ``idle`` between its first and last kernel, and the
    host time ``before`` the first kernel and ``after`` the last."""

    kernels: int
    busy: float
    idle: float
    before: float
    after: float

    @classmethod
    def of(cls, events: list) -> CallTimeline:
        """From a ``torch.profiler`` run's events (all zeros without kernels)."""
        spans = sorted(
            (e.time_range.start, e.time_range.end)
            for e in events
            if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0
        )
        if not spans:
            return cls(0, 0.0, 0.0, 0.0, 0.0)
        busy, reach = 0.0, -np.inf
        for start, end in spans:  # union of kernel intervals
            if end > reach:
                busy += end - max(start, reach)
                reach = end
        host = [e.time_range for e in events if e.device_type == torch.autograd.DeviceType.CPU]
        first, last = spans[0][0], max(end for _, end in spans)
        return cls(
            kernels=len(spans),
            busy=busy / 1e3,
            idle=(last - first - busy) / 1e3,
            before=(first - min(t.start for t in host)) / 1e3,
            after=(max(t.end for t in host) - last) / 1e3,
        )


def profile_summary(run: Callable[[], Any], baseline: Callable[[], Any], layers: int) -> dict:
    """Kernels per layer beyond the baseline, GPU busy and idle ms of one call of ``run``
    (idle: between its first and last kernel), and its host time before the first kernel and
    after the last."""
    from torch.profiler import ProfilerActivity, profile

    def measure(fn: Callable[[], Any]) -> CallTimeline:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return CallTimeline.of(prof.events())

    ran, base = measure(run), measure(baseline)
    return {
        "kernels_per_layer": (ran.kernels - base.kernels) / layers,
        "gpu_busy_ms": ran.busy,
        "gpu_busy_forward_ms": base.busy,
        "gpu_idle_ms": ran.idle,
        "gpu_idle_forward_ms": base.idle,
        "host_before_ms": ran.before,
        "host_after_ms": ran.after,
    }


def analyze_call(
    model: Any, prompt: int, gen: int, lower_bound: bool | None = None
) -> tuple[Callable[[], Any], torch.Tensor]:
    """One ``analyze_segmented`` call of |p| + |g| random token ids (seeded) and the ids."""
    ids = torch.randint(0, 32000, (1, prompt + gen), generator=torch.Generator().manual_seed(0))
    example = Segmented(ids, prompt, "", ((0, 0),) * (prompt + gen), {})
    return lambda: analyze_segmented(model, example, lower_bound=lower_bound), ids.to(model.device)


def bench_analyze(model: Any, prompt: int, gen: int, args: argparse.Namespace) -> dict:
    run, ids = analyze_call(model, prompt, gen, True if args.lower_bound else None)
    fns = forward_fns(model, ids)
    runs = interleaved_runs({"analyze": run, **fns}, "cuda", args.rounds)
    row = {
        "part": "analyze",
        "prompt": prompt,
        "gen": gen,
        **{f"{k}_s": statistics.median(v) for k, v in runs.items()},
        **ratio_spread(runs, "analyze", "forward"),
        "ratio_vs_forward_last": ratio_spread(runs, "analyze", "forward_last")["ratio"],
    }
    if args.profile:
        row |= profile_summary(run, fns["forward_last"], model.config.num_hidden_layers)
    return row


def attribution_call(
    model: Any, tokenizer: Any, prompt: int, gen: int
) -> tuple[Callable[[], Any], torch.Tensor]:
    """One ``Attributor.attribute`` call of a |g|-token answer over a |p|-token context and
    the token ids it runs on."""
    from rcstat.attribution import Attributor
    from rcstat.segments import segment_chat

    chunks = chunks_of(text_of(tokenizer, prompt, seed=1), tokenizer)
    answer = " ".join(text_of(tokenizer, gen, seed=2))
    question = "What does the report say about the rivers?"
    attributor = Attributor(model, tokenizer)
    ids = segment_chat(tokenizer, "\n\n".join(chunks), question, answer).input_ids.to(model.device)
    return lambda: attributor.attribute(chunks, question, answer), ids


def random_grounder(model: Any, tokenizer: Any) -> Any:
    """A ``Grounder`` of ``model`` with a random head profile (seeded) of its layers and heads."""
    from rcstat.grounding import Grounder, HeadProfile

    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    rng = np.random.default_rng(0)
    values, copy = rng.random((layers, heads)), rng.random((layers, heads))
    profile = HeadProfile("llama-8b-random", values, 0.5, 0.2, copy_values=copy)
    return Grounder(model, tokenizer, profile=profile)


def grounding_call(
    model: Any, tokenizer: Any, prompt: int, gen: int
) -> tuple[Callable[[], Any], torch.Tensor]:
    """One ``Grounder.ground`` call of a |g|-token response (random head profile)."""
    from rcstat.segments import segment_chat

    grounder = random_grounder(model, tokenizer)
    context = " ".join(text_of(tokenizer, prompt, seed=3))
    response = " ".join(text_of(tokenizer, gen, seed=4))
    question = "Summarize the report."
    ids = segment_chat(tokenizer, context, question, response).input_ids.to(model.device)
    return lambda: grounder.ground(context, response, question), ids


def bench_call(
    part: str,
    make: Callable[[Any, Any, int, int], tuple[Callable[[], Any], torch.Tensor]],
    model: Any,
    tokenizer: Any,
    prompt: int,
    gen: int,
    args: argparse.Namespace,
) -> dict:
    """One row: the call ``make`` builds vs plain forward passes of the same ids."""
    run, ids = make(model, tokenizer, prompt, gen)
    fns = forward_fns(model, ids)
    runs = interleaved_runs({part: run, **fns}, "cuda", args.rounds)
    row = {
        "part": part,
        "prompt": prompt,
        "gen": gen,
        "tokens": int(ids.shape[1]),
        **{f"{k}_s": statistics.median(v) for k, v in runs.items()},
        **ratio_spread(runs, part, "forward"),
        "ratio_vs_forward_last": ratio_spread(runs, part, "forward_last")["ratio"],
    }
    if args.profile:
        row |= profile_summary(run, fns["forward"], model.config.num_hidden_layers)
    return row


def bench_press(model: Any, prompt: int, args: argparse.Namespace) -> dict | None:
    try:
        from kvpress import SnapKVPress
    except ImportError:
        print("kvpress is not installed: press prefill skipped")
        return None
    from transformers import DynamicCache

    from rcstat.press.rcstat_press import RCStatPress

    ids = torch.randint(0, 32000, (1, prompt), generator=torch.Generator().manual_seed(5)).cuda()

    def prefill(press: Any) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad(), press(model):
                model(ids, past_key_values=DynamicCache())

        return run

    times = interleaved(
        {
            "snapkv": prefill(SnapKVPress(compression_ratio=0.5)),
            "rcstat_ratio": prefill(RCStatPress(compression_ratio=0.5)),
            "rcstat_threshold": prefill(RCStatPress(threshold=1.0)),
        },
        "cuda",
        args.rounds,
    )
    return {
        "part": "press",
        "prompt": prompt,
        **{f"{k}_s": v for k, v in times.items()},
        "ratio": times["rcstat_ratio"] / times["snapkv"],
        "ratio_threshold": times["rcstat_threshold"] / times["snapkv"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=ints, default=[2048, 8192, 16384])
    parser.add_argument("--gen", type=ints, default=[16, 64, 256])
    parser.add_argument("--parts", default="analyze,attribution,grounding,press")
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lower-bound", action="store_true", help="analyze with the bound a")
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument(
        "--touch-gib", type=float, default=TOUCH_GIB, help="host memory written once before timing"
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    unknown = parts - {"analyze", "attribution", "grounding", "press"}
    if unknown or not torch.cuda.is_available():
        raise SystemExit(f"unknown --parts {sorted(unknown)}" if unknown else "needs CUDA")
    tokenizer = None
    if parts & {"attribution", "grounding"}:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    model = llama_8b("cuda")
    touch_host_memory(args.touch_gib)
    rows: list[dict] = []
    meta = machine("cuda") | {
        "rounds": args.rounds,
        "lower_bound": args.lower_bound,
        "touch_gib": args.touch_gib,
    }
    name = f"gpu_paths_{device_label('cuda')}"

    def report(row: dict | None) -> None:
        if row is None:
            return
        rows.append(row)
        extra = (
            f" | {row['kernels_per_layer']:.0f} kernels/layer, GPU busy {row['gpu_busy_ms']:.1f} "
            f"ms (forward {row['gpu_busy_forward_ms']:.1f}), idle {row['gpu_idle_ms']:.1f} ms "
            f"(forward {row['gpu_idle_forward_ms']:.1f}), host before / after "
            f"{row['host_before_ms']:.1f} / {row['host_after_ms']:.1f} ms"
            if "kernels_per_layer" in row
            else ""
        )
        spread = f" ({row['ratio_min']:.3f}-{row['ratio_max']:.3f})" if "ratio_min" in row else ""
        print(
            f"{row['part']:<12} |p|={row['prompt']:<6} |g|={row.get('gen', '-')!s:<4} "
            f"ratio {row['ratio']:.3f}{spread}{extra}",
            flush=True,
        )
        write(args.out, name, rows, meta)  # after every row: a cut run keeps what it measured

    for prompt in args.prompt:
        for gen in args.gen:
            if "analyze" in parts:
                report(bench_analyze(model, prompt, gen, args))
            if "attribution" in parts:
                report(
                    bench_call("attribution", attribution_call, model, tokenizer, prompt, gen, args)
                )
            if "grounding" in parts:
                report(bench_call("grounding", grounding_call, model, tokenizer, prompt, gen, args))
        if "press" in parts:
            report(bench_press(model, prompt, args))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
