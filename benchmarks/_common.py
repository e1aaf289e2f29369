"""Shared helpers of the benchmark scripts: timing, machine description, result files."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import torch


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> float:
    """Wall time of one call, synchronised on CUDA."""
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def interleaved_runs(
    fns: dict[str, Callable[[], Any]], device: str, rounds: int
) -> dict[str, list[float]]:
    """Every time of each function over ``rounds`` interleaved rounds (after one warm-up):
    round ``r`` runs each function once, in order, so the ``r``-th times share the card's
    state."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(timed(fn, device))
    return times


def interleaved(fns: dict[str, Callable[[], Any]], device: str, rounds: int) -> dict[str, float]:
    """Median time of each function over ``rounds`` interleaved rounds (after one warm-up)."""
    runs = interleaved_runs(fns, device, rounds)
    return {name: statistics.median(values) for name, values in runs.items()}


def ratio_spread(runs: dict[str, list[float]], part: str, base: str) -> dict[str, float]:
    """``part / base`` as the ratio of the medians, with the min and max of the per-round
    ratios (the run-to-run spread) and ``spread`` = max / min − 1."""
    per_round = [a / b for a, b in zip(runs[part], runs[base], strict=True)]
    return {
        "ratio": statistics.median(runs[part]) / statistics.median(runs[base]),
        "ratio_min": min(per_round),
        "ratio_max": max(per_round),
        "spread": max(per_round) / min(per_round) - 1,
    }


def forward_fns(model: Any, ids: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """The two baselines: a plain forward pass and one with only the last logits."""

    def forward() -> None:
        with torch.no_grad():
            model(ids, use_cache=False)

    def forward_last() -> None:
        with torch.no_grad():
            model(ids, use_cache=False, logits_to_keep=1)

    return {"forward": forward, "forward_last": forward_last}


#: Host memory the GPU benchmarks write once before timing (see :func:`touch_host_memory`).
TOUCH_GIB = 16.0


def touch_host_memory(gib: float) -> None:
    """Write ``gib`` GiB of host memory once and free it. A lent virtual machine backs its
    memory on first touch, so until a process has touched enough of it, every new host
    allocation of a freshly started machine pays that (tens of milliseconds for a few MB in
    a grounding call on the lent H200 hosts); this is the machine warming up, not the code
    measured."""
    if gib > 0:
        block = np.ones(int(gib * 2**30) // 8)  # float64 ones: every page written
        del block


def machine(device: str) -> dict[str, Any]:
    """Where the numbers come from."""
    info: dict[str, Any] = {
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "processor": platform.processor() or platform.machine(),
    }
    if device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def device_label(device: str) -> str:
    """``cpu``, or the GPU's model for file names (``h100``, ``h200``, ...)."""
    if not device.startswith("cuda"):
        return "cpu"
    words = torch.cuda.get_device_name(0).lower().split()
    return next((w for w in words if any(ch.isdigit() for ch in w)), "cuda")


def write(out: Path, name: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write ``name.json`` (rows + metadata) and ``name.csv`` into ``out``."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    pd.DataFrame(rows).to_csv(out / f"{name}.csv", index=False)


def press_parser(description: str) -> argparse.ArgumentParser:
    """The arguments shared by the press benchmarks (model, device, contexts, ratio, out)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="default", choices=["default", "llama-8b"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--context", type=ints, default=[1024, 4096])
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    return parser


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def llama_8b(device: str, *, hidden_size: int = 4096, intermediate_size: int = 14336) -> Any:
    """A random-weight model with Llama-3.1-8B shapes (32 layers × 32 query heads, 8 KV heads,
    head_dim 128), bfloat16 on CUDA, float32 on CPU, built directly on ``device``; smaller
    widths keep its grid of layers and heads (for the host's work, whose sizes follow it)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        max_position_embeddings=131072,
        rope_theta=500000.0,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(previous)


def ragtruth_pairs(n: int, pick: str = "spread") -> list[tuple[str, str, str | None]]:
    """``n`` RAGTruth-slice (context, response, question) triples spread over the slice (tasks
    and lengths): one response of each of ``n`` contexts (``spread``), or every response of
    ``n / 6`` contexts, in the slice's order (``contexts``: RAGTruth holds six responses, from
    six models, per context)."""
    from rcstat.data import load_dataset

    examples = load_dataset("ragtruth", None)
    if pick == "contexts":
        groups: dict[str, list[Any]] = {}
        for e in examples:
            groups.setdefault(e.context, []).append(e)
        ordered = list(groups.values())
        every = max(1, len(ordered) * 6 // n)
        chosen = [e for group in ordered[::every] for e in group][:n]
    else:
        chosen = examples[:: max(1, len(examples) // n)][:n]
    return [(e.context, e.response, e.meta.get("question")) for e in chosen]
