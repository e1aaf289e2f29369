"""Exact RC statistics vs the naive pairwise oracle, as ratios measured in one run.

For each (|p|, |g|) a random generation block of raw scores ``q·kᵀ`` (head_dim 64) is split
into ``X(p, g)`` and ``Y(g, g)`` for every head, and we time

- ``rc_statistics`` (exact E, A and a from one sort of X), and
- the naive oracle: ``Σ_a Σ_b max(x_a - y_b, 0)`` over all pairs, float64, chunked.

The naive oracle is timed on the first columns of X (a fixed budget of pairs) and scaled to
the full size: its cost is exactly linear in |X|. Where the full naive sum fits the budget the
two results are also compared (relative error).

    python benchmarks/bench_stats.py                     # CPU, 24 heads
    python benchmarks/bench_stats.py --device cuda --heads 32 --prompt 8192
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, interleaved, ints, machine, timed, write
from rcstat.stats import cross_self_samples, rc_statistics


def naive_sum(x: torch.Tensor, y: torch.Tensor, chunk: int) -> torch.Tensor:
    """``Σ_a Σ_b max(x_a - y_b, 0)`` per head, float64, ``chunk`` x-columns at a time."""
    x, y = x.double(), y.double()
    total = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for start in range(0, x.shape[1], chunk):
        part = x[:, start : start + chunk, None] - y[:, None, :]  # [heads, chunk, m]
        total += part.clamp_min_(0).sum((1, 2))
    return total


def measure(p: int, g: int, args: argparse.Namespace, gen: torch.Generator) -> dict[str, Any]:
    """Time rcstat and the (extrapolated) naive oracle on one random block of scores."""
    q = torch.randn(args.heads, g, 64, device=args.device, generator=gen) * 1.5
    k = torch.randn(args.heads, p + g, 64, device=args.device, generator=gen) * 1.5
    block = q @ k.transpose(-1, -2)  # [heads, g, p + g], |f| up to ~1e2
    x, _, y_flat, _ = cross_self_samples(block, p)  # [heads, g·p], [heads, g(g+1)/2]
    rc_time = interleaved({"rc": lambda: rc_statistics(x, y_flat)}, args.device, args.rounds)["rc"]
    columns = max(1, min(x.shape[1], int(args.naive_pairs / y_flat.numel())))
    chunk = max(1, int(args.naive_chunk // y_flat.numel()))
    naive_time = timed(lambda: naive_sum(x[:, :columns], y_flat, chunk), args.device)
    naive_time *= x.shape[1] / columns
    error = float("nan")
    if columns == x.shape[1]:
        want = naive_sum(x, y_flat, chunk) / (x.shape[1] * y_flat.shape[1])
        got = rc_statistics(x, y_flat).expected
        error = float(((got - want).abs() / want.abs().clamp_min(1e-300)).max())
    return {
        "prompt": p,
        "gen": g,
        "heads": args.heads,
        "pairs": x.shape[1] * y_flat.shape[1] * args.heads,
        "rcstat_s": rc_time,
        "naive_s": naive_time,
        "naive_extrapolated": columns < x.shape[1],
        "speedup": naive_time / rc_time,
        "max_rel_error": error,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--heads", type=int, default=24)
    parser.add_argument("--prompt", type=ints, default=[512, 2048, 8192])
    parser.add_argument("--gen", type=ints, default=[16, 64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--naive-pairs", type=float, default=2e9, help="pair budget per run")
    parser.add_argument(
        "--naive-chunk",
        type=float,
        default=None,
        help="elements of the naive oracle's float64 temporaries (default 2^22 CPU, 2^28 GPU)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if args.naive_chunk is None:
        args.naive_chunk = 2**28 if args.device.startswith("cuda") else 2**22

    rows = []
    gen = torch.Generator(device=args.device).manual_seed(0)
    print(f"{'|p|':>6} {'|g|':>5} {'pairs':>9} {'rcstat s':>9} {'naive s':>9} {'ratio':>8} rel.err")
    for p in args.prompt:
        for g in args.gen:
            row = measure(p, g, args, gen)
            rows.append(row)
            print(
                f"{p:>6} {g:>5} {row['pairs']:>9.2e} {row['rcstat_s']:>9.4f} "
                f"{row['naive_s']:>9.2f}{'*' if row['naive_extrapolated'] else ' '} "
                f"{row['speedup']:>7.0f}x {row['max_rel_error']:.1e}",
                flush=True,
            )
    print("* naive time extrapolated linearly from a timed prefix of X")
    write(args.out, f"stats_{device_label(args.device)}", rows, machine(args.device))


if __name__ == "__main__":
    main()
