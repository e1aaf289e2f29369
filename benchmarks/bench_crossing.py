"""The GPU statistics' pieces, one layer at a time, as ratios measured in one run (CUDA only).

For each (|p|, |g|) a block of raw scores ``[heads, g, p + g]`` (random, with the spread of
real heads and a few sink-like keys, as in ``tests/test_gpu.py``) is reduced piece by piece,
each piece recorded as a CUDA graph and replayed (no launch cost in the numbers):

- ``prepared_self``: the sort of the self samples, their running sums and the bucket table;
- ``rank_sums``: every cross sample ranked among them (E, the mean gap, the excess over t);
- ``radix``: the crossing point by four radix passes over every cross sample;
- ``crossing``: the crossing point as ``block_statistics`` finds it (from a sample's bracket
  for sets of at least ``_SAMPLED_FROM`` cross samples a row, the radix passes otherwise);

with ``settled``, the share of rows the bracket settles, and ``crossing / radix``.

    python -m benchmarks.bench_crossing --prompt 2048,8192 --gen 64,256
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, ints, machine, write
from benchmarks.bench_decode_floor import graphed
from rcstat.stats import _gpu
from rcstat.stats.blocks import self_samples


def scores(heads: int, gen: int, prompt: int, seed: int) -> torch.Tensor:
    """A block ``[heads, gen, prompt + gen]`` of float32 scores on the GPU."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.rand(heads, 1, 1, generator=generator) * 60 + 1
    block = torch.randn(heads, gen, prompt + gen, generator=generator) * scale
    block[:, :, :7] += 200.0  # attention-sink-like keys
    return block.cuda()


def measure(prompt: int, gen: int, args: argparse.Namespace) -> dict[str, Any]:
    """Milliseconds of each piece for one block, and the bracket's settled share."""
    block = scores(args.heads, gen, prompt, seed=prompt + gen)
    x, y = block[..., :prompt], self_samples(block, prompt)
    samples = _gpu.prepared_self(y, None)
    split = torch.empty(args.heads, dtype=torch.float32, device=block.device)
    t = _gpu.crossing(x, samples.ys, samples.count)
    row: dict[str, Any] = {"prompt": prompt, "gen": gen, "cross_per_row": prompt * gen}
    row["prepared_self_ms"] = graphed(lambda: _gpu.prepared_self(y, None), args.replays)
    row["rank_sums_ms"] = graphed(lambda: _gpu.rank_sums(x[:, None], samples, t), args.replays)
    row["radix_ms"] = graphed(
        lambda: _gpu._radix_crossing(x, samples.ys, samples.count, split, None), args.replays
    )
    row["crossing_ms"] = graphed(lambda: _gpu.crossing(x, samples.ys, samples.count), args.replays)
    row["crossing_vs_radix"] = row["crossing_ms"] / row["radix_ms"]
    bracketed = prompt * gen >= _gpu._SAMPLED_FROM
    if bracketed:
        _, done = _gpu._bracketed(x, samples.ys, samples.count)
        row["settled"] = float(done.float().mean())
    radix = _gpu._radix_crossing(x, samples.ys, samples.count, split.clone(), None)
    row["same_point"] = bool(torch.equal(radix, t))  # both exact: the bracket changes no value
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=ints, default=[2048, 8192])
    parser.add_argument("--gen", type=ints, default=[64, 256])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if not (torch.cuda.is_available() and _gpu.triton_available("cuda")):
        parser.error("needs a CUDA device with Triton (the statistics' GPU path)")
    rows = []
    for prompt in args.prompt:
        for gen in args.gen:
            row = measure(prompt, gen, args)
            rows.append(row)
            settled = f" settled {row['settled']:.2f}" if "settled" in row else ""
            print(
                f"|p|={prompt:<6} |g|={gen:<4} prepared_self {row['prepared_self_ms']:.3f} ms  "
                f"rank_sums {row['rank_sums_ms']:.3f} ms  radix {row['radix_ms']:.3f} ms  "
                f"crossing {row['crossing_ms']:.3f} ms ({row['crossing_vs_radix']:.2f}×)"
                f"{settled}",
                flush=True,
            )
            write(args.out, f"crossing_{device_label('cuda')}", rows, machine("cuda"))


if __name__ == "__main__":
    main()
