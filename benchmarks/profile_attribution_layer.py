"""Where one attribution layer's GPU time goes: torch.profiler's kernel table over
``attribution_reducer`` on a random generation block ``[H, |g|, |p| + |g|]`` of ``--dtype``
(units of 13 rows, 64-key spans, the default statistic), with the wall time of an eager loop.

    python -m benchmarks.profile_attribution_layer --prompt 2048 --gen 256 --rows 45
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from rcstat.attribution.reduce import attribution_reducer
from rcstat.capture import SoftmaxParams

UNIT_ROWS = 13
SPAN = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=2048)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--rows", type=int, default=45, help="rows of the kernel table")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    heads, gen, prompt = args.heads, args.gen, args.prompt
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)  # the scores' type: the model's (bfloat16 for 8B runs)
    block = (torch.randn(1, heads, gen, prompt + gen, device="cuda") * 3).to(dtype)
    units = [(a, min(a + UNIT_ROWS, gen)) for a in range(0, gen, UNIT_ROWS)]
    first, last = 40, prompt - 30
    spans = [(s, min(s + SPAN, last)) for s in range(first, last, SPAN)]
    reduce = attribution_reducer(
        prompt, units, spans, (first, last), {0: SoftmaxParams(0.088)},
        upper=False, post_softmax=False,
    )  # fmt: skip
    for _ in range(3):
        reduce(0, block)
    torch.cuda.synchronize()
    calls = 20
    start = time.perf_counter()
    for _ in range(calls):
        reduce(0, block)
    torch.cuda.synchronize()
    wall = 1000 * (time.perf_counter() - start) / calls
    print(f"{len(units)} units, {len(spans)} spans, |g| {gen}, |p| {prompt}: {wall:.3f} ms a layer")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            reduce(0, block)
        torch.cuda.synchronize()
    print("GPU time of 5 calls:")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
