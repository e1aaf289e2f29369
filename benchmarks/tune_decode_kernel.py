"""Tune the split-KV decode kernel's launch knobs on one layer of Llama-3.1-8B shapes.

One decode step's attention of one layer (8 KV heads, GQA group 4, head dim 128, bfloat16) over
a ragged cache that kept ``1 − ratio`` of a ``--context`` prompt, with a different share per
(sequence, KV head) (``bench_decode_floor.kept_masks``), for batch 1 and 8. Each
:class:`~rcstat.press.decode_kernel.KernelConfig` is timed as a CUDA graph of
:data:`CALLS` layer calls cycling over ``--layers`` distinct layer caches (each far larger
than the L2 cache, so every replay reads its bytes from memory); the time of one call is the
replay's over :data:`CALLS`. The full-cache sdpa of the same layers is timed the same way in the
same run as the baseline.

The search is pruned, in two rounds:

1. coarse: ``pv`` × ``block_n`` (32–256) × ``num_warps`` (2/4/8) at 3 stages and 3 programs
   per SM (``fma`` only with tiles of <= 64 rows: its ``[group, rows, dim]`` products live in
   registers);
2. refine: for the ``--top`` fastest coarse configs (geometric mean over the batches of the
   time ratio to sdpa, checked configs only), ``num_stages`` 1–4 × ``waves`` 1/2/4/8.

Every config's output (layer 0) is checked against a float64 softmax per (segment, head) with
the bf16 tolerance of ``tests/test_press_decode_kernel.py``: ``‖out − r(exact)‖ <= 2e-3‖exact‖``
(``r`` the rounding to bf16) and every element within ``2^-7 |exact| + 1e-4``. A config that
does not compile or launch (shared memory, registers) is skipped with the reason. Each round's
kernels are compiled first by ``--jobs`` worker processes (into Triton's cache), so the timing
loop does not wait for the compiler. The run stops starting new configs after ``--budget-s``.

Printed per batch, fastest first: time per layer, achieved TB/s of the kept K/V bytes (the bytes
the step must read) and its share of ``--peak-tbps`` (H100 3.35, H200 4.8 by default), the
ratio to sdpa; rows in ``tune_decode_<card>.csv``/``.json`` under ``--out``.

    python -m benchmarks.tune_decode_kernel --out runs/bench

With ``--plans``, it measures the split plans (work list or per segment, programs per SM) at
4k–128k instead and writes the card's table (``benchmarks/tune_decode_plans.py``):

    python -m benchmarks.tune_decode_kernel --plans --out runs/bench
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from benchmarks._common import device_label, ints, machine, write
from benchmarks.bench_decode_floor import PEAK_TBPS, bandwidth, graphed, kept_masks
from rcstat.press.cache import RaggedCache
from rcstat.press.layout import PackedKV

if TYPE_CHECKING:
    from rcstat.press.decode_kernel import PV, KernelConfig, SplitPlan

HEADS, KV_HEADS, DIM = 32, 8, 128
DTYPE = torch.bfloat16
CALLS = 32  # layer calls per graph (the layers of an 8B model)
PVS: tuple[PV, ...] = ("tf32x3", "tf32", "half", "fma")
BLOCKS = (32, 64, 128, 256)
WARPS = (2, 4, 8)
STAGES = (1, 2, 3, 4)
WAVES = (1, 2, 4, 8)
FMA_MAX_BLOCK = 64
REL_TOL, ULP, ATOL = 2e-3, 2.0**-7, 1e-4  # tests/test_press_decode_kernel.py, bf16


def coarse_grid(
    pvs: tuple[PV, ...] = PVS, waves: tuple[int, ...] | None = None
) -> list[KernelConfig]:
    """Round 1: ``pv`` × ``block_n`` × ``num_warps`` (× ``waves`` when given) at the default
    stages (and waves)."""
    from rcstat.press.decode_kernel import KernelConfig

    return [
        KernelConfig(
            block_n=block, num_warps=warps, pv=pv, **({} if wave is None else {"waves": wave})
        )
        for pv, block, warps, wave in itertools.product(pvs, BLOCKS, WARPS, waves or (None,))
        if pv != "fma" or block <= FMA_MAX_BLOCK
    ]


def refine_grid(best: list[KernelConfig], done: set[KernelConfig]) -> list[KernelConfig]:
    """Round 2: ``num_stages`` × ``waves`` around each of ``best`` (configs not yet timed)."""
    grid = [
        dataclasses.replace(config, num_stages=stages, waves=waves)
        for config in best
        for stages, waves in itertools.product(STAGES, WAVES)
    ]
    return [config for config in dict.fromkeys(grid) if config not in done]


def label(config: KernelConfig) -> str:
    layout = {None: "", True: " list", False: " seg"}[config.work_list]
    return (
        f"{config.pv:>6} n{config.block_n:<3} w{config.num_warps} s{config.num_stages} "
        f"x{config.waves or '-'}{layout}"
    )


@dataclasses.dataclass
class Case:
    """One batch size: ``layers`` distinct full and ragged layer caches, a query, the exact
    output of layer 0 and the sdpa baseline."""

    batch: int
    full: list[torch.Tensor]  # [k/v, batch, kv_head, T, D] per distinct layer
    packed: list[PackedKV]
    query: torch.Tensor  # [batch, HEADS, 1, DIM]
    exact: torch.Tensor  # [batch, 1, HEADS, DIM] float64, layer 0
    full_bytes: int  # K/V bytes of one full layer
    kept_bytes: float  # mean K/V bytes of one ragged layer (live rows)
    sdpa_ms: float = math.nan

    @property
    def calls(self) -> list[int]:
        return [call % len(self.packed) for call in range(CALLS)]

    @property
    def segments(self) -> int:
        return self.batch * KV_HEADS

    @property
    def rows(self) -> int:
        """The plan's row bound: the longest segment plus the room, over the layers."""
        return max(p.max_len + p.room for p in self.packed)

    @property
    def capacity(self) -> int:
        """The plan's bound on all rows of a layer, over the layers."""
        return max(p.capacity for p in self.packed)


def exact_output(query: torch.Tensor, packed: PackedKV) -> torch.Tensor:
    """Softmax of each (segment, head) over the segment's live rows in float64 on the device;
    ``[batch, 1, heads, dim]``."""
    batch, heads, _, dim = query.shape
    group = heads // packed.kv_heads
    out = torch.zeros(batch, 1, heads, dim, dtype=torch.float64, device=query.device)
    starts, lengths = packed.seg_start.tolist(), packed.seg_len.tolist()
    for s in range(batch * packed.kv_heads):
        b, kv_head = divmod(s, packed.kv_heads)
        rows = slice(starts[s], starts[s] + lengths[s])
        keys, values = packed.keys[rows].double(), packed.values[rows].double()
        q = query[b, kv_head * group : (kv_head + 1) * group, 0].double()  # [G, D]
        probs = torch.softmax(q @ keys.T * dim**-0.5, -1)  # [G, n]
        out[b, 0, kv_head * group : (kv_head + 1) * group] = probs @ values
    return out


def make_case(
    batch: int,
    context: int,
    ratio: float,
    layers: int,
    generator: torch.Generator,
    device: torch.device,
) -> Case:
    """Random full caches, each compressed at ``ratio`` with one token appended in place."""
    full = [
        torch.randn(2, batch, KV_HEADS, context, DIM, device=device, dtype=DTYPE)
        for _ in range(layers)
    ]
    cache = RaggedCache(slack=64)
    packed = []
    for layer, kv in enumerate(full):
        cache.update(kv[0], kv[1], layer)
        cache.compress_layer(layer, kept_masks(batch, context, ratio, generator).to(device))
        token = torch.randn(2, batch, KV_HEADS, 1, DIM, device=device, dtype=DTYPE)
        cache.layer(layer).update(token[0], token[1])
        layout = cache.layer(layer).packed
        assert layout is not None
        packed.append(layout)
    query = torch.randn(batch, HEADS, 1, DIM, device=device, dtype=DTYPE)
    kept = [cache.layer(layer).physical_bytes() for layer in range(layers)]
    return Case(
        batch=batch,
        full=full,
        packed=packed,
        query=query,
        exact=exact_output(query, packed[0]),
        full_bytes=full[0].numel() * full[0].element_size(),
        kept_bytes=sum(kept) / layers,
    )


def sdpa_ms(case: Case, replays: int) -> float:
    """Milliseconds of one layer's full-cache sdpa (GQA), graph-replayed."""

    def step() -> None:
        for layer in case.calls:
            kv = case.full[layer]
            F.scaled_dot_product_attention(
                case.query, kv[0], kv[1], scale=DIM**-0.5, enable_gqa=True
            )

    return graphed(step, replays) / CALLS


def plan_of(case: Case, config: KernelConfig, sms: int) -> SplitPlan:
    from rcstat.press.decode_kernel import split_plan

    return split_plan(case.segments, case.rows, case.capacity, DIM, sms, config=config)


def check(case: Case, plan: SplitPlan, config: KernelConfig) -> dict[str, Any]:
    """Errors of layer 0's output against the float64 softmax, with the bf16 tolerance."""
    from rcstat.press.decode_kernel import split_decode_attention

    got = split_decode_attention(
        case.query, case.packed[0], DIM**-0.5, plan, config=config
    ).double()
    exact = case.exact
    rel = float((got - exact.to(DTYPE).double()).norm() / exact.norm())
    excess = float(((got - exact).abs() - (ULP * exact.abs() + ATOL)).max())
    return {"rel_error": rel, "elementwise_excess": excess, "ok": rel <= REL_TOL and excess <= 0}


def split_ms(case: Case, plan: SplitPlan, config: KernelConfig, replays: int) -> float:
    """Milliseconds of one layer's split attention with ``config``, graph-replayed."""
    from rcstat.press.decode_kernel import split_decode_attention

    def step() -> None:
        for layer in case.calls:
            split_decode_attention(case.query, case.packed[layer], DIM**-0.5, plan, config=config)

    return graphed(step, replays) / CALLS


def _compile(task: tuple[KernelConfig, SplitPlan, int]) -> str:
    """Worker: launch ``config`` with ``plan`` on a tiny layout of the same launch signature
    (dtypes, strides, ``chunk``, ``splits``), which compiles both kernels into Triton's cache;
    the error, if any."""
    from rcstat.press.decode_kernel import split_decode_attention

    config, plan, batch = task
    try:
        keys = torch.randn(batch, KV_HEADS, 40, DIM, device="cuda", dtype=DTYPE)
        cache = RaggedCache(slack=4)
        cache.update(keys, keys.clone(), 0)
        cache.compress_layer(0, torch.ones(batch, KV_HEADS, 40, dtype=torch.bool, device="cuda"))
        packed = cache.layer(0).packed
        assert packed is not None
        query = torch.randn(batch, HEADS, 1, DIM, device="cuda", dtype=DTYPE)
        split_decode_attention(query, packed, DIM**-0.5, plan, config=config)
        torch.cuda.synchronize()
    except Exception as error:  # reported again by the timing loop, which skips the config
        return f"{type(error).__name__}: {error}"
    return ""


def precompile(
    cases: list[Case], configs: list[KernelConfig], sms: int, jobs: int
) -> dict[KernelConfig, str]:
    """Compile every (config, batch) launch in ``jobs`` processes; errors by config."""
    if jobs <= 1 or not configs:
        return {}
    tasks = [(c, plan_of(case, c, sms), case.batch) for c in configs for case in cases]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context) as pool:
        errors = list(pool.map(_compile, tasks, chunksize=2))
    return {task[0]: error for task, error in zip(tasks, errors, strict=True) if error}


def measure(
    cases: list[Case], config: KernelConfig, sms: int, replays: int, peak: float | None
) -> list[dict[str, Any]]:
    """One row per case: time, bandwidth of the kept bytes, ratio to sdpa, errors."""
    rows = []
    for case in cases:
        plan = plan_of(case, config, sms)
        row: dict[str, Any] = {
            "batch": case.batch,
            **dataclasses.asdict(config),
            "splits": plan.splits,
            "chunk": plan.chunk,
            "plan_work_list": plan.work_list,
            "programs": plan.splits if plan.work_list else case.segments * plan.splits,
        }
        try:
            row |= check(case, plan, config)
            ms = split_ms(case, plan, config, replays)
        except Exception as error:  # compilation or launch (resources): skipped, with why
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            print(f"B={case.batch} {label(config)}: skipped ({reason[:200]})", flush=True)
            rows.append(row | {"error": reason})
            continue
        tbps = bandwidth(case.kept_bytes, ms)
        row |= {
            "ms": ms,
            "sdpa_ms": case.sdpa_ms,
            "ratio": ms / case.sdpa_ms,
            "tbps": tbps,
            "of_peak": tbps / peak if peak else None,
        }
        rows.append(row)
        of_peak = f" {tbps / peak:4.0%} of peak" if peak else ""
        flag = "" if row["ok"] else f"  FAILS the check (rel {row['rel_error']:.1e})"
        print(
            f"B={case.batch} {label(config)}: {ms * 1e3:7.1f} µs {tbps:5.2f} TB/s{of_peak} "
            f"{row['ratio']:.2f}× sdpa, {row['programs']} programs{flag}",
            flush=True,
        )
    return rows


def score(rows: list[dict[str, Any]]) -> float:
    """Geometric mean over the batches of the ratio to sdpa; inf where a batch failed."""
    if any("error" in row or not row["ok"] for row in rows):
        return math.inf
    return math.exp(sum(math.log(row["ratio"]) for row in rows) / len(rows))


def summary(rows: list[dict[str, Any]], batches: list[int], peak: float | None) -> None:
    """Per batch, the checked configs fastest first, then the failed and skipped ones."""
    for batch in batches:
        timed = [r for r in rows if r["batch"] == batch and "error" not in r]
        timed.sort(key=lambda r: (not r["ok"], r["ms"]))
        skipped = sum(1 for r in rows if r["batch"] == batch and "error" in r)
        sdpa = timed[0]["sdpa_ms"] if timed else math.nan
        print(f"\n== batch {batch}: sdpa (full cache) {sdpa * 1e3:.1f} µs per layer ==")
        print(
            "    pv block warps stages waves  list programs      µs   TB/s  of peak  ×sdpa  "
            "rel err  ok"
        )
        for r in timed:
            of_peak = f"{r['of_peak']:7.0%}" if peak else "      -"
            print(
                f"{r['pv']:>6} {r['block_n']:5} {r['num_warps']:5} {r['num_stages']:6} "
                f"{r['waves'] or '-':>5} {'yes' if r['plan_work_list'] else 'no':>5} "
                f"{r['programs']:8} {r['ms'] * 1e3:7.1f} {r['tbps']:6.2f} "
                f"{of_peak}  {r['ratio']:5.2f}  {r['rel_error']:.1e}  {'yes' if r['ok'] else 'NO'}"
            )
        if skipped:
            print(f"({skipped} configs skipped: see the error column of the CSV)")


def pv_names(text: str) -> list[str]:
    chosen = [v for v in text.split(",") if v]
    known = ("half2", *PVS)
    if not chosen or set(chosen) - set(known):
        raise argparse.ArgumentTypeError(f"--pv takes some of {known}, got {text!r}")
    return chosen


def main() -> None:
    if "--plans" in sys.argv[1:]:  # the plans' own options follow
        from benchmarks.tune_decode_plans import main as tune_plans

        tune_plans([arg for arg in sys.argv[1:] if arg != "--plans"])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=65536)
    parser.add_argument("--batch", type=ints, default=[1, 8])
    parser.add_argument("--ratio", type=float, default=0.5, help="share evicted (0.5: 50 %% kept)")
    parser.add_argument("--layers", type=int, default=8, help="distinct layer caches, cycled")
    parser.add_argument("--top", type=int, default=4, help="coarse configs refined")
    parser.add_argument("--replays", type=int, default=20, help="most replays of one graph")
    parser.add_argument("--budget-s", type=float, default=200.0, help="no new config after")
    parser.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1))
    parser.add_argument("--peak-tbps", type=float, default=None, help="default: by card name")
    parser.add_argument("--pv", type=pv_names, default=list(PVS), help="p·v variants of round 1")
    parser.add_argument("--waves", type=ints, default=None, help="also sweep waves in round 1")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    from rcstat.press.decode_kernel import kernel_config
    from rcstat.stats._gpu import sm_count

    began = time.perf_counter()
    card = device_label("cuda")
    peak = args.peak_tbps if args.peak_tbps is not None else PEAK_TBPS.get(card)
    sms = sm_count(torch.device("cuda"))
    generator = torch.Generator().manual_seed(0)
    cases = [
        make_case(b, args.context, args.ratio, args.layers, generator, torch.device("cuda"))
        for b in args.batch
    ]
    for case in cases:
        case.sdpa_ms = sdpa_ms(case, args.replays)
        print(
            f"{card}, {sms} SMs: T={args.context} B={case.batch} kept "
            f"{case.kept_bytes / case.full_bytes:.2f}, sdpa {case.sdpa_ms * 1e3:.1f} µs per layer "
            f"({bandwidth(case.full_bytes, case.sdpa_ms):.2f} TB/s); setup "
            f"{time.perf_counter() - began:.0f} s",
            flush=True,
        )
    rows: list[dict[str, Any]] = []
    results: dict[KernelConfig, list[dict[str, Any]]] = {}
    skipped = 0
    default = kernel_config(DIM)
    grid_waves = None if args.waves is None else tuple(args.waves)
    coarse = [default] + [c for c in coarse_grid(tuple(args.pv), grid_waves) if c != default]
    for round_name, grid in (("coarse", coarse), ("refine", None)):
        if grid is None:
            ranked = sorted(results, key=lambda c: score(results[c]))
            best = [c for c in ranked if math.isfinite(score(results[c]))][: args.top]
            print(f"refining around {[label(c) for c in best]}", flush=True)
            grid = refine_grid(best, set(results))
        start = time.perf_counter()
        try:
            errors = precompile(cases, grid, sms, args.jobs)
        except Exception as error:  # the pool itself: the timing loop compiles one by one
            print(f"{round_name}: no precompilation ({type(error).__name__}: {error})")
        else:
            print(
                f"{round_name}: {len(grid)} configs compiled in "
                f"{time.perf_counter() - start:.0f} s ({len(errors)} failed)",
                flush=True,
            )
        for config in grid:
            if time.perf_counter() - began > args.budget_s:
                skipped += 1
                continue
            results[config] = measure(cases, config, sms, args.replays, peak)
            rows += [row | {"round": round_name} for row in results[config]]
    if skipped:
        print(f"budget of {args.budget_s:.0f} s reached: {skipped} configs not timed")
    summary(rows, args.batch, peak)
    meta = machine("cuda") | {
        "peak_tbps": peak,
        "sms": sms,
        "context": args.context,
        "ratio": args.ratio,
        "layers_distinct": args.layers,
        "calls_per_graph": CALLS,
        "seconds": time.perf_counter() - began,
    }
    write(args.out, f"tune_decode_{card}", rows, meta)
    print(f"{len(results)} configs in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
