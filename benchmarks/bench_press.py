"""KV-cache press benchmarks, as ratios measured in one run.

Prefill: a forward pass over the context with ``RCStatPress`` (threshold and target-ratio
modes at their defaults, then the target-ratio mode per layer with either GQA rule, pooled
with the any-head rule, with the upper-bound score and with 24 sinks: :data:`VARIANTS`) vs
``SnapKVPress`` at the same ratio vs no press, for each context length; the columns after
SnapKV's time are each RCStat variant's time / SnapKV's.

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


#: The RCStatPress settings timed against SnapKV: the two modes at their defaults (target
#: ratio: the GQA group's mean, the budget pooled over layers), then the other options.
VARIANTS: dict[str, dict[str, Any]] = {
    "rcstat_threshold": {"threshold": 1.0},
    "rcstat_ratio": {},
    "rcstat_layer_max": {"budget": "layer", "group": "max"},
    "rcstat_layer_mean": {"budget": "layer", "group": "mean"},
    "rcstat_pooled_max": {"budget": "pooled", "group": "max"},
    "rcstat_upper": {"score": "upper"},
    "rcstat_sinks": {"sinks": 24},
}


def measure(model: Any, pool: list[int], length: int, args: argparse.Namespace) -> dict:
    """Interleaved prefill times of no press, SnapKV and every RCStat variant."""
    ids = torch.tensor([(pool * (length // len(pool) + 1))[:length]], device=args.device)

    def rcstat(options: dict[str, Any]) -> RCStatPress:
        ratio = None if "threshold" in options else args.ratio
        return RCStatPress(compression_ratio=ratio, **options)

    runs = {
        "none": lambda: prefill(model, ids, None),
        "snapkv": lambda: prefill(model, ids, SnapKVPress(compression_ratio=args.ratio)),
    }
    for name, options in VARIANTS.items():
        runs[name] = lambda options=options: prefill(model, ids, rcstat(options))
    return interleaved(runs, args.device, args.rounds)


def main() -> None:
    parser = press_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    model, pool = build_model(args.model, args.device)
    rows = []
    short = [name.removeprefix("rcstat_") for name in VARIANTS]
    print(f"{'context':>8} {'none s':>8} {'snapkv s':>9} " + " ".join(f"{n:>9}" for n in short))
    for length in args.context:
        times = measure(model, pool, length, args)
        row: dict[str, Any] = {"context": length, **{f"{k}_s": v for k, v in times.items()}}
        for name in VARIANTS:  # the first two keep the column names of earlier results
            column = {"rcstat_threshold": "threshold", "rcstat_ratio": "ratio"}.get(name, name)
            row[f"{column}_vs_snapkv"] = times[name] / times["snapkv"]
        rows.append(row)
        ratios = [times[name] / times["snapkv"] for name in VARIANTS]
        print(
            f"{length:>8} {times['none']:>8.3f} {times['snapkv']:>9.3f} "
            + " ".join(f"{r:>8.2f}x" for r in ratios),
            flush=True,
        )
    meta = {**machine(args.device), "model": args.model, "ratio": args.ratio}
    write(args.out, f"press_prefill_{args.model}_{device_label(args.device)}", rows, meta)


if __name__ == "__main__":
    main()
