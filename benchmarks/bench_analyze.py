"""``analyze`` end to end vs a plain forward pass of the same input (ratios in one run),
and the peak extra memory of the capture as a function of the number of captured layers.

Models: ``default`` (the embedded SmolLM2-135M-Instruct, real weights, text input from the
shared QMSum slice when present) or ``llama-8b`` (random weights with Llama-3.1-8B shapes:
32 layers × 32 query heads, 8 KV heads, head_dim 128; random token ids).

Baselines: ``model(ids, use_cache=False)`` (what a user runs) and the same with
``logits_to_keep=1`` (what ``analyze`` runs: it needs no vocabulary logits).

    python benchmarks/bench_analyze.py                                  # CPU, default model
    python benchmarks/bench_analyze.py --model llama-8b --device cuda --prompt 8192
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, interleaved, ints, llama_8b, machine, write
from rcstat.analysis import analyze_segmented
from rcstat.capture import capture_scores
from rcstat.segments import Segmented
from rcstat.stats import block_statistics, triton_available

QMSUM = Path(__file__).resolve().parents[1].parent / "shared/data/qmsum/val.slice.jsonl"


def build_model(name: str, device: str) -> tuple[Any, list[int]]:
    """The model and a pool of token ids to cut inputs from."""
    if name == "default":
        from rcstat.models import load_model

        model, tokenizer = load_model(device=device if device != "cpu" else None)
        if QMSUM.exists():
            meetings = [json.loads(line) for line in QMSUM.read_text().splitlines()]
            text = " ".join(turn["content"] for m in meetings for turn in m["meeting_transcripts"])
            pool = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            pool = torch.randint(0, model.config.vocab_size, (20000,)).tolist()
        return model, pool
    if name == "llama-8b":
        model = llama_8b(device)
        return model, torch.randint(0, model.config.vocab_size, (40000,)).tolist()
    raise SystemExit(f"unknown --model {name!r}")


def example(pool: list[int], prompt: int, gen: int) -> Segmented:
    total = prompt + gen
    ids = (pool * (total // len(pool) + 1))[:total]
    return Segmented(torch.tensor([ids]), prompt, "", ((0, 0),) * total, {})


def peak_memory(model_name: str, device: str, ex: Segmented, model: Any, layers: int) -> int:
    """Peak memory (bytes) of one forward pass that reduces the first ``layers`` layers.

    CUDA: the allocator's peak above the loaded model, in process. CPU: the peak resident
    set size (``VmHWM``, reset after loading) of a fresh process that runs the pass, since the
    CPU allocator keeps freed memory and in-process RSS cannot show a per-call peak.
    """
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        capture_run(model, ex, list(range(layers)), device)
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated() - base)
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_analyze",
        "--model",
        model_name,
        "--memory-child",
        str(layers),
        "--memory-prompt",
        str(ex.prompt_len),
        "--memory-gen",
        str(ex.gen_len),
    ]
    # blocks above 64 KiB are mmapped and unmapped on free, so RSS follows live memory
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return int(done.stdout.strip().splitlines()[-1])


def capture_run(model: Any, ex: Segmented, layers: list[int], device: str) -> None:
    """A forward pass that reduces ``layers`` with the analysis reducer (none: plain)."""
    ids = ex.input_ids.to(device)
    with torch.no_grad():
        if not layers:
            model(ids, use_cache=False, logits_to_keep=1)
            return
        lower = not triton_available(device)  # what analyze computes by default

        def reducer(layer: int, scores: torch.Tensor) -> torch.Tensor:
            return block_statistics(scores[0], ex.prompt_len, lower=lower).expected

        with capture_scores(
            model,
            reducer,
            layers=layers,
            query_start=ex.prompt_len,
            finite=lambda expected: torch.isfinite(expected).all(),  # as analyze: no scan
            graph_key=lambda layer: "block",  # as analyze: CUDA graphs on the GPU
        ):
            model(ids, use_cache=False, logits_to_keep=1)


def measure(model: Any, ex: Segmented, args: argparse.Namespace) -> dict[str, Any]:
    """Interleaved timings of the two forward baselines and of ``analyze``."""
    ids = ex.input_ids.to(args.device)
    with torch.no_grad():
        times = interleaved(
            {
                "forward": lambda: model(ids, use_cache=False),
                "forward_last": lambda: model(ids, use_cache=False, logits_to_keep=1),
                "analyze": lambda: analyze_segmented(model, ex),
            },
            args.device,
            args.rounds,
        )
    return {
        "prompt": ex.prompt_len,
        "gen": ex.gen_len,
        **{f"{k}_s": v for k, v in times.items()},
        "ratio_forward": times["analyze"] / times["forward"],
        "ratio_forward_last": times["analyze"] / times["forward_last"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", choices=["default", "llama-8b"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompt", type=ints, default=[512, 2048, 8192])
    parser.add_argument("--gen", type=ints, default=[16, 64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-prompt", type=int, default=2048)
    parser.add_argument("--memory-gen", type=int, default=256)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()

    model, pool = build_model(args.model, args.device)
    if args.memory_child is not None:  # one CPU measurement in a fresh process
        ex = example(pool, args.memory_prompt, args.memory_gen)
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM) after loading
        capture_run(model, ex, list(range(args.memory_child)), "cpu")
        status = Path("/proc/self/status").read_text()
        print(int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024)  # type: ignore[union-attr]
        return
    window = int(model.config.max_position_embeddings)
    rows = []
    print(
        f"{'|p|':>6} {'|g|':>5} {'fwd s':>8} {'fwd[-1] s':>9} {'analyze s':>9} "
        f"{'x fwd':>6} {'x fwd[-1]':>9}"
    )
    for prompt in args.prompt:
        for gen in args.gen:
            row = measure(model, example(pool, min(prompt, window - gen), gen), args)
            rows.append(row)
            print(
                f"{row['prompt']:>6} {gen:>5} {row['forward_s']:>8.3f} "
                f"{row['forward_last_s']:>9.3f} {row['analyze_s']:>9.3f} "
                f"{row['ratio_forward']:>6.2f} {row['ratio_forward_last']:>9.2f}",
                flush=True,
            )
    meta = {**machine(args.device), "model": args.model, "dtype": str(model.dtype)}
    write(args.out, f"analyze_{args.model}_{device_label(args.device)}", rows, meta)

    n_layers = model.config.num_hidden_layers
    ex = example(pool, min(args.memory_prompt, window - args.memory_gen), args.memory_gen)
    base = peak_memory(args.model, args.device, ex, model, 0)
    print(
        f"peak memory of a forward pass (|p|={ex.prompt_len}, |g|={ex.gen_len}): "
        f"{base / 2**20:.1f} MiB"
    )
    memory = []
    for count in sorted({1, 2, n_layers // 4, n_layers // 2, n_layers}):
        peak = peak_memory(args.model, args.device, ex, model, count)
        memory.append(
            {
                "layers": count,
                "peak_bytes": peak,
                "extra_bytes": peak - base,
                "forward_peak_bytes": base,
            }
        )
        print(
            f"  capturing {count:>3} layers: peak {peak / 2**20:8.1f} MiB, "
            f"extra over the forward {(peak - base) / 2**20:8.1f} MiB",
            flush=True,
        )
    write(args.out, f"memory_{args.model}_{device_label(args.device)}", memory, meta)


if __name__ == "__main__":
    main()
