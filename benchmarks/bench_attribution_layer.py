"""One layer of attribution on a GPU: the fused kernel against the tensor path, in one run.

A random ``[heads, |g|, m + |g|]`` block of raw scores, answer units of ``--unit-rows`` rows
(0: the whole answer as one unit, whose key values also rank the heads) and 64-key candidate
spans; ``attribution_reducer`` with the default statistic (expected RC)
as it runs on CUDA (``rcstat.attribution.fused``), and the same reducer with the kernel
switched off (the tensor path: the ranking kernels, the softmax over the block, running sums).
Per size: the GPU time of one layer (torch.profiler, the sum of the kernels' own times, a
steadier figure than the wall time on a shared host), the wall time of one layer (median of
``--rounds`` interleaved rounds) and their ratios.

    python -m benchmarks.bench_attribution_layer --prompt 2048,8192 --gen 16,64,256 --out docs/bench
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks._common import device_label, interleaved_runs, ints, machine, write
from rcstat.attribution import reduce as reduce_module
from rcstat.attribution.reduce import attribution_reducer
from rcstat.capture import SoftmaxParams


def gpu_ms(fn: Callable[[], Any], calls: int = 5) -> float:
    """GPU time of one call: the kernels' own times summed, averaged over ``calls``."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages()) / calls / 1e3


def tensor_path(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with the fused kernel switched off (the reducer takes the tensor path)."""

    def run() -> Any:
        with mock.patch.object(reduce_module, "fused_serves", lambda _: False):
            return fn()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=ints, default=[2048, 8192])
    parser.add_argument("--gen", type=ints, default=[16, 64, 256])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument(
        "--unit-rows",
        type=int,
        default=13,
        help="rows of an answer unit (0: one unit of every row, the whole answer)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if min(args.prompt + args.gen) < 1 or args.unit_rows < 0 or args.rounds < 1:
        parser.error("--prompt, --gen and --rounds must be positive, --unit-rows at least 0")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device (the fused kernel's path)")
    rows = []
    for prompt in args.prompt:
        for gen_len in args.gen:
            seed = torch.Generator(device="cuda").manual_seed(0)
            shape = (1, args.heads, gen_len, prompt + gen_len)
            block = torch.randn(*shape, device="cuda", generator=seed) * 3
            step = args.unit_rows or gen_len
            units = [(a, min(a + step, gen_len)) for a in range(0, gen_len, step)]
            spans = [(a, min(a + 64, prompt)) for a in range(0, prompt, 64)]
            reducer = attribution_reducer(
                prompt, units, spans, (0, prompt), {0: SoftmaxParams(0.088)},
                upper=False, post_softmax=False,
            )  # fmt: skip

            def fused(reducer: Any = reducer, block: torch.Tensor = block) -> Any:
                return reducer(0, block)

            fns = {"fused": fused, "tensor": tensor_path(fused)}
            walls = interleaved_runs(fns, "cuda", args.rounds)
            row = {"prompt": prompt, "gen": gen_len, "heads": args.heads, "units": len(units)}
            for name, fn in fns.items():
                row[f"{name}_gpu_ms"] = gpu_ms(fn)
                row[f"{name}_wall_ms"] = statistics.median(walls[name]) * 1e3
            row["gpu_ratio"] = row["fused_gpu_ms"] / row["tensor_gpu_ms"]
            row["wall_ratio"] = row["fused_wall_ms"] / row["tensor_wall_ms"]
            rows.append(row)
            print(
                f"|p|={prompt:<6} |g|={gen_len:<4} GPU ms a layer: fused {row['fused_gpu_ms']:.3f}"
                f" tensor {row['tensor_gpu_ms']:.3f} (ratio {row['gpu_ratio']:.2f}); wall ratio"
                f" {row['wall_ratio']:.2f}",
                flush=True,
            )
    if args.out is not None:
        meta = machine("cuda") | {"rounds": args.rounds, "unit_rows": args.unit_rows}
        write(args.out, f"attribution_layer_{device_label('cuda')}", rows, meta)


if __name__ == "__main__":
    main()
