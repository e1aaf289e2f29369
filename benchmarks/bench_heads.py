"""Throughput and peak memory of ``rcstat.heads.collect`` (one forward pass per example).

Each example is analysed as in ``rcstat heads``: context = prompt, question + answer =
generation (teacher-forced: the first reference answer; examples without one are left out
so that no generation is timed). Reported: examples per second, tokens per second, and the
peak extra memory of one example (GPU: ``max_memory_allocated`` above the resident model;
CPU: growth of the process's peak RSS after a warm-up example, an upper bound).

Models: ``default`` (the embedded SmolLM2-135M-Instruct), ``random`` (the same config and
tokenizer read from ``--model-dir``, random weights: identical compute, for machines without
the weights; statistics are meaningless, the time is not) or ``llama-8b`` (random weights of
Llama-3.1-8B shapes, bfloat16 on CUDA, with the tokenizer of ``--model-dir``).

    python -m benchmarks.bench_heads --dataset squad_v2                 # CPU, default model
    python -m benchmarks.bench_heads --model random --model-dir DIR --dataset jsonl \\
        --data examples.jsonl --device cuda
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, llama_8b, machine, sync, write
from rcstat.heads import collect, load_jsonl


def build(name: str, model_dir: str | None, device: str) -> tuple[Any, Any]:
    if name == "default":
        from rcstat.models import load_model

        return load_model(device=device if device != "cpu" else None)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if model_dir is None:
        raise SystemExit(f"--model {name} needs --model-dir (a folder with config + tokenizer)")
    if name == "llama-8b":
        return llama_8b(device), AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.to(device).eval(), AutoTokenizer.from_pretrained(model_dir)


def examples_of(dataset: str, data: str | None, n: int | None, context: str | None) -> list:
    if dataset == "jsonl":
        if data is None:
            raise SystemExit("--dataset jsonl needs --data")
        found: list[Any] = load_jsonl(data)
        return [e for e in found if e.answer][:n]
    from rcstat.data import QAExample, load_dataset

    options = {} if context is None else {"context": context}
    loaded = load_dataset(dataset, data, **options)
    return [e for e in loaded if not isinstance(e, QAExample) or e.answers][:n]


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", choices=["default", "random", "llama-8b"])
    parser.add_argument("--model-dir", default=None)
    parser.add_argument("--dataset", default="squad_v2")
    parser.add_argument("--data", default=None)
    parser.add_argument("--context", default=None, help="qmsum: full or relevant")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    model, tokenizer = build(args.model, args.model_dir, args.device)
    examples = examples_of(args.dataset, args.data, args.n, args.context)
    cuda = args.device.startswith("cuda")
    collect(model, tokenizer, examples[:1], progress=False)  # warm-up
    resident = torch.cuda.memory_allocated() if cuda else peak_rss_bytes()
    rows = []
    for example in examples:
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync(args.device)
        start = time.perf_counter()
        frame = collect(model, tokenizer, [example], progress=False)
        sync(args.device)
        seconds = time.perf_counter() - start
        if frame.empty:  # recorded error (e.g. longer than the window)
            continue
        peak = torch.cuda.max_memory_allocated() if cuda else peak_rss_bytes()
        tokens = int(frame["prompt_len"].iloc[0] + frame["gen_len"].iloc[0])
        rows.append(
            {
                "example": str(frame["example"].iloc[0]),
                "tokens": tokens,
                "gen_len": int(frame["gen_len"].iloc[0]),
                "seconds": seconds,
                "peak_extra_mib": max(peak - resident, 0) / 2**20,
            }
        )
    total = sum(r["seconds"] for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    summary = {
        "examples": len(rows),
        "examples_per_s": len(rows) / total,
        "tokens_per_s": tokens / total,
        "mean_tokens": tokens / len(rows),
        "max_peak_extra_mib": max(r["peak_extra_mib"] for r in rows),
        "resident_mib": resident / 2**20,
    }
    print(
        " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items())
    )
    meta = machine(args.device) | {"model": args.model, "dataset": args.dataset} | summary
    source = Path(args.data).stem.split(".")[0] if args.dataset == "jsonl" else args.dataset
    name = f"heads_{source}_{args.model}_{device_label(args.device)}"
    write(args.out, name, rows, meta)


if __name__ == "__main__":
    main()
