"""Where one GPU call of rcstat spends its time: torch.profiler tables (CUDA kernels by total
time, CPU operators by self time) and the top Python functions (cProfile), for one part of
``bench_gpu`` at one configuration (``press``: one prefill with ``RCStatPress`` at ratio 0.5
into a ``DynamicCache``, the masking mode SnapKV is measured in; needs kvpress).

    python -m benchmarks.profile_gpu --part attribution --prompt 8192 --gen 256
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import pstats
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks._common import TOUCH_GIB, llama_8b, touch_host_memory
from benchmarks.bench_gpu import CallTimeline, attribution_call, grounding_call
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
    parser.add_argument(
        "--callers", default=None, help="also who calls the functions matching this regex"
    )
    args = parser.parse_args()
    model = llama_8b("cuda")
    touch_host_memory(TOUCH_GIB)
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
    if not args.python_only:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with collections() as gc_line:
                run()
                torch.cuda.synchronize()
        print(timeline(prof.events()))
        print(gc_line[0])
        averages = prof.key_averages()
        print(
            averages.table(
                sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=45
            )
        )
        if args.cpu_table:
            print(
                averages.table(
                    sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=60
                )
            )
    python = cProfile.Profile()
    python.runcall(lambda: (run(), torch.cuda.synchronize()))
    stats = pstats.Stats(python).sort_stats(args.sort)
    stats.print_stats(args.rows)
    if args.callers:
        stats.print_callers(args.callers)


@contextlib.contextmanager
def collections() -> Iterator[list[str]]:
    """Time Python's garbage collections inside the block: a one-line summary is left in the
    list it yields (the pauses a collection causes show up as the time of whatever call was
    allocating when it ran)."""
    began: list[float] = []
    spent: dict[int, list[float]] = {}

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            began.append(time.perf_counter())
        elif began:
            spent.setdefault(info["generation"], []).append(time.perf_counter() - began.pop())

    line = ["gc: none"]
    gc.callbacks.append(watch)
    try:
        yield line
    finally:
        gc.callbacks.remove(watch)
        parts = [
            f"generation {g}: {len(t)} in {sum(t) * 1e3:.1f} ms" for g, t in sorted(spent.items())
        ]
        line[0] = "gc: " + ("; ".join(parts) if parts else "none")


def timeline(events: list) -> str:
    """One line: the call's host time before the first kernel and after the last one, and
    the GPU's busy and idle time between them (ms, from the profiler's events)."""
    call = CallTimeline.of(events)
    if not call.kernels:
        return "timeline: no kernels"
    return (
        f"timeline ms: host before the first kernel {call.before:.1f}, GPU busy {call.busy:.1f} "
        f"and idle {call.idle:.1f} until the last, host after it {call.after:.1f}"
    )


if __name__ == "__main__":
    main()
