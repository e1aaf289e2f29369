"""RAGTruth responses grounded per second on one device: batched passes, worker processes.

Each setting ``WxB`` runs ``W`` worker processes on the device, each grounding its share of
the responses (response ``k`` to worker ``k mod W``, the shards of ``rcstat ground --pairs
--shard i/W``) with :meth:`rcstat.grounding.Grounder.ground_many` at ``batch_tokens=B`` (``B``
= 1: one response a pass, the unbatched baseline). Every worker loads the model and warms up
(not timed), waits at a barrier, then grounds; the time from the barrier to the last worker's
end gives responses per second. The workers then time, the same way, plain forward passes over
the same batches (``model(ids, use_cache=False)``, as in ``bench_ground``: the cost grounding
is measured against). Every setting's verdicts are checked equal to the first setting's,
response for response, and its largest score difference is printed (batches round
differently).

    python -m benchmarks.bench_ground_throughput --settings 1x1,1x16384,2x16384 --device cuda
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue as queues
import time
from pathlib import Path
from typing import Any

from benchmarks._common import device_label, machine, write

#: Seconds a worker waits for the others at the barrier, and the parent for a worker.
_WAIT_S = 900


def _worker(
    rank: int,
    size: int,
    device: str,
    batch_tokens: int,
    barrier: Any,
    out: Any,
    n: int | None,
) -> None:
    try:
        import torch

        from rcstat import Grounder, load_model
        from rcstat.data import load_dataset
        from rcstat.grounding.passes import token_batches

        examples = load_dataset("ragtruth", limit=n)
        mine = list(range(rank, len(examples), size))
        pairs = [
            (examples[k].context, examples[k].response, str(examples[k].meta["question"]))
            for k in mine
        ]
        model, tokenizer = load_model(device=device)
        grounder = Grounder(model, tokenizer)
        ids = [grounder.measurer.tokenize(*pair).input_ids[0] for pair in pairs]

        def forward() -> None:  # the plain pass over the same batches, right-padded
            for batch in token_batches([len(t) for t in ids], batch_tokens):
                longest = max(len(ids[k]) for k in batch)
                padded = torch.zeros(len(batch), longest, dtype=torch.long)
                for row, k in enumerate(batch):
                    padded[row, : len(ids[k])] = ids[k]
                with torch.no_grad():
                    model(padded.to(device), use_cache=False)

        def timed(work: Any) -> tuple[float, float, Any]:
            barrier.wait(timeout=_WAIT_S)  # every worker starts together
            start = time.perf_counter()
            found = work()
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            return start, time.perf_counter(), found

        grounder.ground_many(pairs[:4], batch_tokens=batch_tokens)  # warm-up (kernels, allocator)
        forward()
        start, end, found = timed(lambda: grounder.ground_many(pairs, batch_tokens=batch_tokens))
        plain = timed(forward)
        results = {
            k: ("error", 0.0) if isinstance(g, ValueError) else (g.verdict, g.score)
            for k, g in zip(mine, found, strict=True)
        }
        out.put((rank, (start, end), plain[:2], results, None))
    except Exception as err:  # reported by the parent, never a hang at the barrier
        barrier.abort()
        out.put((rank, (0.0, 0.0), (0.0, 0.0), {}, f"{type(err).__name__}: {err}"))


def run(
    workers: int, batch_tokens: int, device: str, n: int | None
) -> tuple[float, float, dict[int, tuple[str, float]]]:
    """Seconds from the barrier to the last worker's end, grounding and plain forward passes,
    and every response's result."""
    context = mp.get_context("spawn")
    barrier, out = context.Barrier(workers), context.Queue()
    procs = [
        context.Process(target=_worker, args=(r, workers, device, batch_tokens, barrier, out, n))
        for r in range(workers)
    ]
    for p in procs:
        p.start()
    try:
        parts = [out.get(timeout=_WAIT_S) for _ in procs]
    except queues.Empty:
        raise SystemExit(f"a worker gave nothing in {_WAIT_S} s") from None
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    failed = [part[4] for part in parts if part[4]]
    if failed:
        raise SystemExit(f"a worker failed: {failed[0]}")
    results: dict[int, tuple[str, float]] = {}
    for part in parts:
        results.update(part[3])

    def span(which: int) -> float:
        return max(p[which][1] for p in parts) - min(p[which][0] for p in parts)

    return span(1), span(2), results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--settings",
        default="1x1,1x16384,2x16384",
        help="comma-separated WORKERSxBATCH_TOKENS (1: one response a pass); the first is the "
        "reference of the comparison",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=None, help="first N responses of the slice")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    settings = [tuple(int(v) for v in s.split("x")) for s in args.settings.split(",")]
    rows, reference = [], None
    for workers, batch_tokens in settings:
        seconds, forward_s, results = run(workers, batch_tokens, args.device, args.n)
        reference = results if reference is None else reference
        same = {k: v[0] for k, v in results.items()} == {k: v[0] for k, v in reference.items()}
        drift = max(abs(results[k][1] - reference[k][1]) for k in results)
        count = len(results)
        rows.append(
            {
                "workers": workers,
                "batch_tokens": batch_tokens,
                "responses": count,
                "seconds": seconds,
                "responses_per_s": count / seconds,
                "forward_s": forward_s,
                "ground_over_forward": seconds / forward_s,
                "verdicts_equal_to_first": same,
                "largest_score_difference": drift,
            }
        )
        print(
            f"{workers} worker(s), batch_tokens {batch_tokens}: {count} responses in "
            f"{seconds:.1f} s → {count / seconds:.1f}/s (forward passes alone {forward_s:.1f} s: "
            f"{seconds / forward_s:.2f}×); verdicts equal to the first setting: {same}, "
            f"largest score difference {drift:.1e}",
            flush=True,
        )
    write(args.out, f"ground_throughput_{device_label(args.device)}", rows, machine(args.device))


if __name__ == "__main__":
    main()
