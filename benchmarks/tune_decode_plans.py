"""Measure this card's decode split plans and write its table (``rcstat.press.decode_plans``).

For each ``--context`` × ``--ratio`` (share evicted) × ``--batch``: one decode step's attention
of one layer of Llama-3.1-8B shapes over a ragged cache (``tune_decode_kernel.make_case``:
``--layers`` distinct layer caches cycled in a CUDA graph of 32 layer calls), with each
candidate plan — a work list at 1 or 2 programs per SM, a grid per segment at 2, 4 or 8 — at
the default tile knobs. Each candidate is timed in ``--rounds`` interleaved rounds (median,
min, max), and its output checked against a float64 softmax with the bf16 tolerance of the
tests. The fastest checked candidate of each step shape becomes a point of the card's table;
the plan of the built-in rule (what a card without a table runs) is one of the candidates, so
the table's gain over it is measured in the same run.

Writes ``decode_plans_<card>.json`` (a table of this card: name it in ``RCSTAT_DECODE_PLANS``,
or add its card to ``src/rcstat/press/decode_plans.json``) and the rows in
``tune_plans_<card>.csv``/``.json`` under ``--out``.

    python -m benchmarks.tune_decode_plans --out runs/bench
    python -m benchmarks.tune_decode_kernel --plans --out runs/bench   # the same
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import device_label, ints, machine, write
from benchmarks.tune_decode_kernel import DIM, check, make_case, plan_of, sdpa_ms, split_ms

#: (work list, programs per SM) of every candidate plan.
CANDIDATES = ((True, 1), (True, 2), (False, 2), (False, 4), (False, 8))


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def label(key: tuple[bool, int]) -> str:
    return f"{'list' if key[0] else 'seg'} x{key[1]}"


def measure_point(
    case: Any, sms: int, rounds: int, replays: int
) -> tuple[list[dict[str, Any]], tuple[bool, int] | None]:
    """Rows of every candidate at one step shape, and the fastest checked candidate."""
    from rcstat.press.decode_kernel import kernel_config

    default = kernel_config(DIM)
    configs = {
        key: dataclasses.replace(default, work_list=key[0], waves=key[1]) for key in CANDIDATES
    }
    plans = {key: plan_of(case, config, sms) for key, config in configs.items()}
    rule = plan_of(case, default, sms)  # the built-in rule's plan (no table)
    builtin = next(key for key in configs if plans[key] == rule)
    checks = {key: check(case, plans[key], config) for key, config in configs.items()}
    times: dict[tuple[bool, int], list[float]] = {key: [] for key in configs}
    for _ in range(rounds):  # interleaved: drift spreads over every candidate alike
        for key, config in configs.items():
            times[key].append(split_ms(case, plans[key], config, replays))
    median = {key: statistics.median(found) for key, found in times.items()}
    checked = [key for key in configs if checks[key]["ok"]]
    best = min(checked, key=median.__getitem__) if checked else None
    rows = [
        {
            "work_list": key[0],
            "waves": key[1],
            "splits": plans[key].splits,
            "chunk": plans[key].chunk,
            "ms_median": median[key],
            "ms_min": min(times[key]),
            "ms_max": max(times[key]),
            "ratio_to_sdpa": median[key] / case.sdpa_ms,
            "builtin": key == builtin,
            "best": key == best,
            **checks[key],
        }
        for key in configs
    ]
    return rows, best


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every step shape's candidates; the card's table."""
    from rcstat.press.decode_plans import FORMAT, CardPlans, PlanPoint

    began = time.perf_counter()
    device = torch.device("cuda")
    card, name = device_label("cuda"), torch.cuda.get_device_name(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    generator = torch.Generator().manual_seed(0)
    rows: list[dict[str, Any]] = []
    points: list[PlanPoint] = []
    for context in args.context:
        for ratio in args.ratio:
            for batch in args.batch:
                case = make_case(batch, context, ratio, args.layers, generator, device)
                case.sdpa_ms = sdpa_ms(case, args.replays)
                found, best = measure_point(case, sms, args.rounds, args.replays)
                shape = {"context": context, "evicted": ratio, "batch": batch}
                shape |= {"segments": case.segments, "rows": case.rows, "sdpa_ms": case.sdpa_ms}
                rows += [shape | row for row in found]
                if best is not None:
                    points.append(PlanPoint(case.segments, case.rows, *best))
                    fastest = next(r for r in found if r["best"])
                    builtin = next(r for r in found if r["builtin"])
                    print(
                        f"T={context} evicted {ratio:.0%} B={batch}: best {label(best)} "
                        f"{fastest['ms_median'] * 1e3:.1f} µs ({fastest['ratio_to_sdpa']:.2f}× "
                        f"sdpa); built-in {label((builtin['work_list'], builtin['waves']))} "
                        f"{builtin['ms_median'] * 1e3:.1f} µs "
                        f"({builtin['ms_median'] / fastest['ms_median']:.2f}× the best)",
                        flush=True,
                    )
                else:
                    print(f"T={context} B={batch}: no candidate passed the check", flush=True)
                del case
                torch.cuda.empty_cache()
    meta = machine("cuda") | {"name": name, "sms": sms, "rounds": args.rounds}
    meta |= {"layers_distinct": args.layers, "seconds": time.perf_counter() - began}
    write(args.out, f"tune_plans_{card}", rows, meta)
    source = f"benchmarks/tune_decode_plans.py, {meta['date']}, torch {meta['torch']}"
    table = {"format": FORMAT, "cards": [CardPlans(name, sms, tuple(points), source).to_dict()]}
    path = args.out / f"decode_plans_{card}.json"
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(points)} points of {name} ({sms} SMs) in {path}", flush=True)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=ints, default=[4096, 16384, 65536, 131072])
    parser.add_argument("--ratio", type=floats, default=[0.5, 0.8], help="share evicted")
    parser.add_argument("--batch", type=ints, default=[1, 8])
    parser.add_argument("--layers", type=int, default=4, help="distinct layer caches, cycled")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timings (median)")
    parser.add_argument("--replays", type=int, default=20, help="most replays of one graph")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be >= 3 (a median of at least three timings)")
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    args.out.mkdir(parents=True, exist_ok=True)
    run(args)


if __name__ == "__main__":
    main()
