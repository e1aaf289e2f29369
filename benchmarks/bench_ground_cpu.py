"""Where a CPU's grounding throughput can come from: pairs per forward pass, or model copies.

The default model grounds ``--pairs`` RAGTruth-slice pairs on the CPU, in one run:

1. **batching** — for each ``--threads`` count, :meth:`Grounder.ground_many` with one pair a
   forward pass (the CPU default) and with ``--batch-tokens`` tokens a pass; pairs per second
   (best of ``--rounds``) and the ratio to one pair a pass at the same thread count;
2. **copies** — for each ``--procs`` count ``K``, ``K`` processes of ``cores / K`` torch
   threads each ground every pair once, one at a time, started together; pairs per second of
   all of them, and the ratio to one process of all the cores.

3. **shared prompts** — with ``--contexts K``, every response of ``K`` contexts (RAGTruth holds
   six per context) grounded one pair a pass, each pair alone (``share_prompts=False``) and
   with the answers of one context sharing its prompt's pass, at the first thread count.

This is the evidence behind the service's CPU default (one pair a pass) and behind its guide's
advice for a many-core CPU (one service per few cores behind a load balancer).

    python -m benchmarks.bench_ground_cpu --threads 2 --procs 1,2 --out runs/bench
    python -m benchmarks.bench_ground_cpu --threads 16,8 --procs 1,2,4 --out runs/bench
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from benchmarks._common import ints, machine, ragtruth_pairs, write


def shared_prompts(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pairs per second of one pair a pass, each alone vs sharing their prompts' passes."""
    import torch

    torch.set_num_threads(args.threads[0])
    grounder, pairs = _grounder(), ragtruth_pairs(6 * args.contexts, "contexts")
    grounder.ground_many(pairs[:2], share_prompts=False)  # warm-up
    rows: list[dict[str, Any]] = []
    for share in (False, True):
        best = min(
            _seconds(lambda s=share: grounder.ground_many(pairs, share_prompts=s))
            for _ in range(args.rounds)
        )
        rate = len(pairs) / best
        base = rows[0]["pairs_per_s"] if rows else rate
        rows.append(
            {
                "mode": "shared prompts" if share else "each pair alone",
                "threads": args.threads[0],
                "batch_tokens": None,
                "procs": 1,
                "pairs_per_s": round(rate, 3),
                "ratio": round(rate / base, 3),
            }
        )
        print(rows[-1], flush=True)
    return rows


def _grounder() -> Any:
    from rcstat import load_model
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.options import GroundingOptions

    model, tokenizer = load_model()
    return Grounder(model, tokenizer, GroundingOptions())


def batching(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pairs per second of ``ground_many`` at each thread count and tokens a pass."""
    import torch

    grounder, pairs = _grounder(), ragtruth_pairs(args.pairs)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        grounder.ground_many(pairs[:2])  # warm-up
        alone = None
        for batch_tokens in [None, *args.batch_tokens]:
            best = min(
                _seconds(lambda bt=batch_tokens: grounder.ground_many(pairs, batch_tokens=bt))
                for _ in range(args.rounds)
            )
            rate = len(pairs) / best
            alone = rate if batch_tokens is None else alone
            rows.append(
                {
                    "mode": "batching",
                    "threads": threads,
                    "batch_tokens": batch_tokens,
                    "procs": 1,
                    "pairs_per_s": round(rate, 3),
                    "ratio": round(rate / alone, 3),  # type: ignore[operator]
                }
            )
            print(rows[-1], flush=True)
    return rows


def _seconds(call: Any) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _copy(threads: int, n: int, barrier: Any, done: Any) -> None:
    """One model copy: ground every pair once, one at a time, after the others are loaded."""
    import torch

    torch.set_num_threads(threads)
    grounder, pairs = _grounder(), ragtruth_pairs(n)
    grounder.ground(*pairs[0])  # warm-up
    barrier.wait()
    done.put(_seconds(lambda: [grounder.ground(*pair) for pair in pairs]))


def copies(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Pairs per second of ``K`` processes of ``cores / K`` threads each."""
    cores = os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    for procs in args.procs:
        barrier, done = context.Barrier(procs), context.Queue()
        workers = [
            context.Process(target=_copy, args=(max(1, cores // procs), args.pairs, barrier, done))
            for _ in range(procs)
        ]
        for worker in workers:
            worker.start()
        try:
            slowest = max(done.get(timeout=args.timeout_s) for _ in workers)
        finally:
            for worker in workers:
                worker.join(timeout=5)
                if worker.is_alive():
                    worker.kill()
        rate = procs * args.pairs / slowest
        base = rows[0]["pairs_per_s"] if rows else rate  # one process of all the cores
        rows.append(
            {
                "mode": "copies",
                "threads": max(1, cores // procs),
                "batch_tokens": None,
                "procs": procs,
                "pairs_per_s": round(rate, 3),
                "ratio": round(rate / base, 3),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=16, help="distinct RAGTruth-slice pairs")
    parser.add_argument("--threads", type=ints, default=[os.cpu_count() or 1])
    parser.add_argument("--batch-tokens", type=ints, default=[2048, 4096, 8192], help="'' to skip")
    parser.add_argument("--procs", type=ints, default=[1, 2], help="'' to skip")
    parser.add_argument("--contexts", type=int, default=0, help="shared prompts: contexts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per model copy")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if args.procs and args.procs[0] != 1:
        parser.error("--procs must start with 1 (the baseline of the copies' ratio)")
    rows = (
        (batching(args) if args.batch_tokens else [])
        + (copies(args) if args.procs else [])
        + (shared_prompts(args) if args.contexts else [])
    )
    meta = {**machine("cpu"), "cores": os.cpu_count(), "pairs": args.pairs}
    meta["contexts"] = args.contexts
    write(args.out, "ground_cpu", rows, meta)


if __name__ == "__main__":
    main()
