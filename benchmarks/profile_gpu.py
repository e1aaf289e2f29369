"""Where one GPU call of rcstat spends its time: torch.profiler tables (CUDA kernels by total
time, CPU operators by self time) and the top Python functions (cProfile), for one part of
``bench_gpu`` at one configuration (``press``: one prefill with ``RCStatPress`` at ratio 0.5
into a ``DynamicCache``, the masking mode SnapKV is measured in; needs kvpress).

    python -m benchmarks.profile_gpu --part attribution --prompt 8192 --gen 256
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks._common import llama_8b
from benchmarks.bench_gpu import attribution_call, grounding_call
from rcstat.analysis import analyze_segmented
from rcstat.segments import Segmented


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--part", default="analyze", choices=["analyze", "attribution", "grounding", "press"]
    )
    parser.add_argument("--prompt", type=int, default=8192)
    parser.add_argument("--gen", type=int, default=256)
    parser.add_argument("--tokenizer", type=Path, default=Path("runs/tok"))
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--cpu-table", action="store_true", help="also CPU operators")
    parser.add_argument("--python-only", action="store_true", help="only the cProfile table")
    parser.add_argument("--sort", default="tottime", help="cProfile sort key")
    args = parser.parse_args()
    model = llama_8b("cuda")
    if args.part == "analyze":
        total = args.prompt + args.gen
        ids = torch.randint(0, 32000, (1, total), generator=torch.Generator().manual_seed(0))
        example = Segmented(ids, args.prompt, "", ((0, 0),) * total, {})

        def run() -> None:
            analyze_segmented(model, example)

    elif args.part == "press":
        from transformers import DynamicCache

        from rcstat.press.rcstat_press import RCStatPress

        press = RCStatPress(compression_ratio=0.5)
        ids = torch.randint(0, 32000, (1, args.prompt), generator=torch.Generator().manual_seed(5))
        ids = ids.cuda()

        def run() -> None:
            with torch.no_grad(), press(model):
                model(ids, past_key_values=DynamicCache())

    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        make = attribution_call if args.part == "attribution" else grounding_call
        run, _ = make(model, tokenizer, args.prompt, args.gen)
    for _ in range(2):  # compile kernels, fill caches
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    print(
        averages.table(
            sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=45
        )
    )
    print(
        averages.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60)
    )
    python = cProfile.Profile()
    python.runcall(lambda: (run(), torch.cuda.synchronize()))
    pstats.Stats(python).sort_stats(args.sort).print_stats(args.rows)


if __name__ == "__main__":
    main()
