"""Responses grounded per second on one device, by 1 to N worker processes sharing it.

Every worker loads the analysis model once (not timed), waits at a barrier, then grounds its
share of the responses (``Grounder.ground`` at its defaults, one response after another, the
shards of ``rcstat ground --pairs --shard i/N``: response ``k`` goes to worker ``k mod N``);
the time from the barrier to the last worker's end gives responses per second. A small model
leaves a GPU mostly idle between its kernels, so several processes on one card fill it; each
setting's verdicts and scores are checked equal, response for response, to one worker's.

    python -m benchmarks.bench_ground_throughput --workers 1,4,8 --device cuda
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from benchmarks._common import device_label, machine, write


def _worker(rank: int, size: int, device: str, barrier: Any, queue: Any, limit: int) -> None:
    import torch

    from rcstat import Grounder, load_model
    from rcstat.data import load_dataset

    torch.set_num_threads(1)
    examples = load_dataset("ragtruth", limit=limit)
    model, tokenizer = load_model(device=device)
    grounder = Grounder(model, tokenizer)
    e = examples[0]  # one warm-up (kernels, allocator)
    grounder.ground(e.context, e.response, str(e.meta["question"]))
    barrier.wait()
    start = time.perf_counter()
    out = {}
    for k in range(rank, len(examples), size):
        e = examples[k]
        g = grounder.ground(e.context, e.response, str(e.meta["question"]))
        out[k] = (g.verdict, round(g.score, 6))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    queue.put((rank, start, time.perf_counter(), out))


def run(workers: int, device: str, limit: int) -> tuple[float, dict[int, tuple[str, float]]]:
    """Seconds from the barrier to the last worker's end, and every response's result."""
    context = mp.get_context("spawn")
    barrier, queue = context.Barrier(workers), context.Queue()
    procs = [
        context.Process(target=_worker, args=(r, workers, device, barrier, queue, limit))
        for r in range(workers)
    ]
    for p in procs:
        p.start()
    parts = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    start = min(p[1] for p in parts)
    end = max(p[2] for p in parts)
    results: dict[int, tuple[str, float]] = {}
    for part in parts:
        results.update(part[3])
    return end - start, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,4,8", help="comma-separated process counts")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=None, help="first N responses of the slice")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    rows, reference = [], None
    for workers in (int(w) for w in args.workers.split(",")):
        seconds, results = run(workers, args.device, args.n)
        if reference is None:
            reference = results
        same = results == reference
        rows.append(
            {
                "workers": workers,
                "responses": len(results),
                "seconds": seconds,
                "responses_per_s": len(results) / seconds,
                "equal_to_first": same,
            }
        )
        print(
            f"{workers} worker(s): {len(results)} responses in {seconds:.1f} s → "
            f"{len(results) / seconds:.1f}/s; results equal to the first setting: {same}"
        )
    write(args.out, f"ground_throughput_{device_label(args.device)}", rows, machine(args.device))


if __name__ == "__main__":
    main()
