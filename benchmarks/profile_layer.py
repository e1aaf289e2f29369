"""Where the time of one layer's reduction goes: torch.profiler over ``block_statistics``
on a random generation block, plus the cost of the sort alone.

    python benchmarks/profile_layer.py --device cuda --heads 32 --prompt 8192 --gen 256
"""

from __future__ import annotations

import argparse

import torch

from benchmarks._common import interleaved
from rcstat.stats import block_statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=8192)
    parser.add_argument("--gen", type=int, default=256)
    args = parser.parse_args()
    gen = torch.Generator(device=args.device).manual_seed(0)
    q = torch.randn(args.heads, args.gen, 128, device=args.device, generator=gen)
    k = torch.randn(args.heads, args.prompt + args.gen, 128, device=args.device, generator=gen)
    block = q @ k.transpose(-1, -2)  # [heads, g, p + g]
    x = block[..., : args.prompt].reshape(args.heads, -1)
    times = interleaved(
        {
            "block_statistics": lambda: block_statistics(block, args.prompt, check_finite=False),
            "torch.sort(x)": lambda: torch.sort(x, dim=-1),
            "x.double().cumsum": lambda: x.double().cumsum(-1),
        },
        args.device,
        5,
    )
    for name, seconds in times.items():
        print(f"{name:>20}: {seconds * 1e3:8.2f} ms")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        block_statistics(block, args.prompt, check_finite=False)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if args.device.startswith("cuda") else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=15, max_name_column_width=40))


if __name__ == "__main__":
    main()
