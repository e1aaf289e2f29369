"""Decode step time and KV-cache bytes: RCStatPress at a target ratio on the ragged cache vs
the full cache, measured in one run.

    python benchmarks/bench_decode.py --model llama-8b --device cuda --context 4096,16384
    python benchmarks/bench_decode.py --context 1024,4096                # CPU, default model
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from transformers import DynamicCache

from benchmarks._common import device_label, machine, press_parser, sync, write
from benchmarks.bench_analyze import build_model
from rcstat.press import RaggedCache, RCStatPress, ragged_attention


def decode_steps(model: Any, cache: Any, token: torch.Tensor, steps: int, device: str) -> float:
    """Mean seconds per greedy decode step on ``cache``."""
    import time

    with torch.no_grad():
        model(token, past_key_values=cache)  # warm-up step
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            logits = model(token, past_key_values=cache).logits
            token = logits[:, -1:].argmax(-1)
        sync(device)
    return (time.perf_counter() - start) / steps


def kv_bytes(cache: Any) -> int:
    if isinstance(cache, RaggedCache):
        return cache.physical_bytes()
    return sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers)


def measure(model: Any, pool: list[int], length: int, args: argparse.Namespace) -> dict:
    ids = torch.tensor([(pool * (length // len(pool) + 1))[:length]], device=args.device)
    token = ids[:, -1:]
    full = DynamicCache()
    with torch.no_grad():
        model(ids, past_key_values=full)
    full_bytes = kv_bytes(full)
    full_step = decode_steps(model, full, token, args.steps, args.device)
    del full
    press = RCStatPress(compression_ratio=args.ratio)
    ragged = RaggedCache(slack=args.steps + 8)
    with torch.no_grad(), press(model), ragged_attention(model):
        model(ids, past_key_values=ragged)
    ragged_bytes = ragged.physical_bytes()
    with ragged_attention(model):
        ragged_step = decode_steps(model, ragged, token, args.steps, args.device)
    return {
        "context": length,
        "realized_ratio": press.realized_ratio(),
        "full_bytes": full_bytes,
        "compressed_bytes": ragged_bytes,
        "bytes_ratio": ragged_bytes / full_bytes,
        "full_step_s": full_step,
        "compressed_step_s": ragged_step,
        "step_ratio": ragged_step / full_step,
    }


def main() -> None:
    parser = press_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    model, pool = build_model(args.model, args.device)
    rows = []
    print(
        f"{'context':>8} {'ratio':>6} {'full MiB':>9} {'kept MiB':>9} {'bytes':>6} "
        f"{'full ms':>8} {'kept ms':>8} {'step':>6}"
    )
    for length in args.context:
        row = measure(model, pool, length, args)
        rows.append(row)
        print(
            f"{length:>8} {row['realized_ratio']:>6.3f} {row['full_bytes'] / 2**20:>9.1f} "
            f"{row['compressed_bytes'] / 2**20:>9.1f} {row['bytes_ratio']:>6.3f} "
            f"{row['full_step_s'] * 1e3:>8.2f} {row['compressed_step_s'] * 1e3:>8.2f} "
            f"{row['step_ratio']:>6.2f}",
            flush=True,
        )
    meta = {**machine(args.device), "model": args.model, "ratio": args.ratio}
    write(args.out, f"decode_{args.model}_{device_label(args.device)}", rows, meta)


if __name__ == "__main__":
    main()
