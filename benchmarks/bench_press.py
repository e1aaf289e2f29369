"""KV-cache press benchmarks, as ratios measured in one run.

Prefill: a forward pass over the context with ``RCStatPress`` (threshold and target-ratio
modes) vs ``SnapKVPress`` at the same ratio vs no press, for each context length.

    python benchmarks/bench_press.py                                    # CPU, default model
    python benchmarks/bench_press.py --model llama-8b --device cuda --context 4096,16384
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from kvpress import SnapKVPress
from transformers import DynamicCache

from benchmarks._common import device_label, interleaved, machine, press_parser, write
from benchmarks.bench_analyze import build_model
from rcstat.press.rcstat_press import RCStatPress


def prefill(model: Any, ids: torch.Tensor, press: Any) -> None:
    with torch.no_grad():
        if press is None:
            model(ids, past_key_values=DynamicCache())
            return
        with press(model):
            model(ids, past_key_values=DynamicCache())


def measure(model: Any, pool: list[int], length: int, args: argparse.Namespace) -> dict:
    """Interleaved prefill times of no press, SnapKV and RCStat (both modes)."""
    ids = torch.tensor([(pool * (length // len(pool) + 1))[:length]], device=args.device)
    return interleaved(
        {
            "none": lambda: prefill(model, ids, None),
            "snapkv": lambda: prefill(model, ids, SnapKVPress(compression_ratio=args.ratio)),
            "rcstat_threshold": lambda: prefill(model, ids, RCStatPress(threshold=1.0)),
            "rcstat_ratio": lambda: prefill(model, ids, RCStatPress(compression_ratio=args.ratio)),
        },
        args.device,
        args.rounds,
    )


def main() -> None:
    parser = press_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model, pool = build_model(args.model, args.device)
    rows = []
    print(
        f"{'context':>8} {'none s':>8} {'snapkv s':>9} {'rcstat c s':>10} {'rcstat r s':>10} "
        f"{'c / snap':>8} {'r / snap':>8}"
    )
    for length in args.context:
        times = measure(model, pool, length, args)
        row = {
            "context": length,
            **{f"{k}_s": v for k, v in times.items()},
            "threshold_vs_snapkv": times["rcstat_threshold"] / times["snapkv"],
            "ratio_vs_snapkv": times["rcstat_ratio"] / times["snapkv"],
        }
        rows.append(row)
        print(
            f"{length:>8} {times['none']:>8.3f} {times['snapkv']:>9.3f} "
            f"{times['rcstat_threshold']:>10.3f} {times['rcstat_ratio']:>10.3f} "
            f"{row['threshold_vs_snapkv']:>8.2f} {row['ratio_vs_snapkv']:>8.2f}",
            flush=True,
        )
    meta = {**machine(args.device), "model": args.model, "ratio": args.ratio}
    write(args.out, f"press_prefill_{args.model}_{device_label(args.device)}", rows, meta)


if __name__ == "__main__":
    main()
