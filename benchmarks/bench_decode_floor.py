"""The decode step at its floor: full vs ragged KV cache in graph-captured, static-shape loops.

A decode step of an 8B model in eager transformers spends most of its time in Python, so a
step-time ratio there says little about attention (docs/benchmarks.md §3.5.3). Here the work of
one decode step of Llama-3.1-8B shapes (32 layers, 32 query / 8 KV heads, head_dim 128,
bfloat16) is recorded as one CUDA graph and replayed:

- ``attention``: the 32 layers' decode attention of one new token per sequence — sdpa over the
  full cache ``[batch, 8, T, 128]`` per layer, or
  :func:`~rcstat.press.attention.packed_attention` over a ragged cache that kept ``1 − ratio``
  of the entries with a different share per (sequence, KV head), with each ``--backend``
  (``varlen``: torch's varlen flash attention, one program per segment; ``split``: the
  split-KV Triton kernel of ``rcstat.press.decode_kernel``);
- ``step``: the same plus the layer's weight products for the batch's tokens (q/k/v/o
  projections and the gated MLP, 218 M parameters a layer, read from memory every layer as in
  a real step) — the floor of a decode step, which the KV cache shares with the weights.

Every row has the ratios ragged / full and the achieved bandwidth of each attention (K/V bytes
read per step / time; for the ragged cache the kept bytes) against the card's peak
(``--peak-tbps``; H100 3.35, H200 4.8 TB/s by default). Where the 32 layers' caches do not fit
in memory, fewer distinct layer caches are allocated and the 32 layer calls cycle through them
(each is far larger than the L2 cache, so the bytes still come from memory); the row says how
many (``layers_distinct``).

    python -m benchmarks.bench_decode_floor --context 4096,16384,65536,131072 --batch 1,8 \\
        --ratio 0.5,0.8 --backend varlen,split --out docs/bench

``--ratio`` is the share evicted (kvpress' compression ratio): 0.5 keeps 50 %, 0.8 keeps 20 %.
``--check`` instead compares the split kernel and the padded reference with a float64 oracle
on a few shapes and prints the errors.

``--budget-gib G`` measures throughput at a memory budget instead: for each context (default
32k) and ratio, as many sequences as fit ``G`` GiB of KV cache with the full cache
(``⌊G / full bytes per sequence⌋``) and with the ragged cache (``⌊G / kept bytes per
sequence⌋``, the packed layout's bytes: kept K/V rows plus the room of ``SLACK`` rows per
segment, their int64 positions and the segment table), one whole decode step (``step``) timed at
each of the two batch sizes, and the aggregate tokens/s ``batch / step time`` of each. Both
caches are really allocated (one after the other, cycling fewer distinct layer caches where 32
do not fit); ``--dry-run`` prints the batch sizes and bytes without CUDA::

    python -m benchmarks.bench_decode_floor --budget-gib 40 --context 32768 --ratio 0.5 \\
        --backend split --out docs/bench
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks._common import device_label, ints, machine, write
from rcstat.press.attention import packed_attention
from rcstat.press.cache import RaggedCache
from rcstat.press.layout import PackedKV

LAYERS, HEADS, KV_HEADS, DIM, HIDDEN, MLP = 32, 32, 8, 128, 4096, 14336
PEAK_TBPS = {"h100": 3.35, "h200": 4.8}  # HBM3 / HBM3e, SXM
BACKENDS = ("varlen", "split")
TIMED_S = 0.5  # replays of one graph last about this long (at most --replays)
SLACK = 64  # free rows per segment of the ragged cache after compression (RaggedCache's default)
GIB = 2**30
ENTRY_BYTES = 2 * DIM * 2  # one key + value row, bf16
POSITION_BYTES = 8  # the int64 logical position of every allocated row of a packed layout
SEGMENT_BYTES = 16  # seg_start + seg_len (int64) of one (sequence, KV head) segment
WEIGHT_BYTES = 2 * HIDDEN * (HEADS * DIM + 2 * KV_HEADS * DIM + 2 * MLP + HEADS * DIM + MLP)
CARD_GIB = {"h100": 78.0, "h200": 139.0}  # memory torch can use, for --dry-run's estimates
BUILD_DENSE = 2.5  # a ragged layer's build: its dense copy (x2 in DynamicLayer's cat) + indices


def graphed(step: Callable[[], object], replays: int) -> float:
    """Mean milliseconds of one replay of ``step`` recorded as a CUDA graph (as many replays as
    fit in :data:`TIMED_S`, between 3 and ``replays``)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up: kernels chosen and compiled, workspaces allocated
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    torch.cuda.synchronize()
    first = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    once = time.perf_counter() - first
    count = max(3, min(replays, int(TIMED_S / max(once, 1e-6))))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    del graph
    return start.elapsed_time(end) / count


def kept_masks(batch: int, context: int, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """``[batch, KV_HEADS, T]`` keep masks: a different share per (sequence, KV head),
    ``1 − ratio`` overall (before clamping a share to 1); ``ratio`` 0 keeps every entry."""
    if ratio == 0:
        return torch.ones(batch, KV_HEADS, context, dtype=torch.bool)
    shares = torch.rand(batch, KV_HEADS, generator=generator) + 0.5
    shares = (1 - ratio) * shares / shares.mean()
    scores = torch.rand(batch, KV_HEADS, context, generator=generator)
    keep = scores < shares.clamp(0.02, 1.0)[..., None]
    keep[..., -8:] = True  # the window
    return keep


@dataclasses.dataclass
class StepWeights:
    """One layer's weights (436 MB: far beyond the L2 cache), read once per layer call."""

    projections: list[torch.Tensor]
    out_proj: torch.Tensor
    down: torch.Tensor
    sink: torch.Tensor

    @classmethod
    def make(cls, device: torch.device, dtype: torch.dtype) -> StepWeights:
        rows = (HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM, MLP, MLP)
        return cls(
            projections=[torch.randn(r, HIDDEN, device=device, dtype=dtype) * 0.01 for r in rows],
            out_proj=torch.randn(HIDDEN, HEADS * DIM, device=device, dtype=dtype) * 0.01,
            down=torch.randn(HIDDEN, MLP, device=device, dtype=dtype) * 0.01,
            sink=torch.zeros(1, HIDDEN, device=device, dtype=dtype),
        )

    def products(self, hidden: torch.Tensor) -> None:
        """The q/k/v/o projections and the gated MLP of ``hidden`` ``[batch, HIDDEN]``."""
        q, _, _, gate, up = (hidden @ w.T for w in self.projections)
        out = (q @ self.out_proj.T) + (F.silu(gate) * up) @ self.down.T  # [batch, HIDDEN]
        self.sink.add_(out.sum(0, keepdim=True))


def fitting_layers(free: float, layer_bytes: float, build_bytes: float, fraction: float) -> int:
    """How many distinct layer caches of ``layer_bytes`` fit in ``fraction`` of ``free`` bytes
    with ``build_bytes`` on top (between 1 and :data:`LAYERS`)."""
    return max(1, min(LAYERS, int((fraction * free - build_bytes) // layer_bytes)))


def distinct_layers(batch: int, context: int, ratios: list[float], fraction: float) -> int:
    """How many layer caches fit: the full one plus the largest ragged one per layer, in
    ``fraction`` of the free memory, with one layer's build (a copy and its kept rows) on top."""
    full = batch * KV_HEADS * context * ENTRY_BYTES  # bytes of one layer's K + V, bf16
    kept = full * min(1.0, 1.25 * (1 - min(ratios)))  # the clamped shares keep a bit more
    free, _ = torch.cuda.mem_get_info()
    return fitting_layers(free, full + kept, full + kept, fraction)


def bandwidth(nbytes: float, ms: float) -> float:
    """TB/s of ``nbytes`` read in ``ms`` milliseconds."""
    return nbytes / (ms * 1e-3) / 1e12


def full_step_times(
    full: list[torch.Tensor],
    calls: list[int],
    query: torch.Tensor,
    hidden: torch.Tensor,
    weights: StepWeights,
    replays: int,
) -> dict[str, float]:
    """Graph-replayed milliseconds of the full cache's attention (sdpa) and step."""

    def attention() -> None:
        for layer in calls:
            kv = full[layer]
            F.scaled_dot_product_attention(query, kv[0], kv[1], scale=DIM**-0.5, enable_gqa=True)

    def step() -> None:  # the order of the products does not change the time
        for _ in range(LAYERS):
            weights.products(hidden)
        attention()

    return {
        "attention_full_ms": graphed(attention, replays),
        "step_full_ms": graphed(step, replays),
    }


def appended(cache: RaggedCache, layers: int, batch: int, device: torch.device) -> list[PackedKV]:
    """Append one new token to each of the first ``layers`` layers of ``cache`` (as in a decode
    step) and return their layouts."""
    packed: list[PackedKV] = []
    for layer in range(layers):
        token = torch.randn(2, batch, KV_HEADS, 1, DIM, device=device, dtype=torch.bfloat16)
        cache.layer(layer).update(token[0], token[1])
        layout = cache.layer(layer).packed
        assert layout is not None
        packed.append(layout)
    return packed


def ragged_times(
    packed: list[PackedKV],
    calls: list[int],
    query: torch.Tensor,
    hidden: torch.Tensor,
    weights: StepWeights,
    backend: Any,
    replays: int,
) -> dict[str, float]:
    """Graph-replayed milliseconds of the ragged attention and step with ``backend``."""

    def attention() -> None:
        for layer in calls:
            packed_attention(query, packed[layer], scaling=DIM**-0.5, backend=backend)

    def step() -> None:
        for _ in range(LAYERS):
            weights.products(hidden)
        attention()

    return {
        "attention_ragged_ms": graphed(attention, replays),
        "step_ragged_ms": graphed(step, replays),
    }


def ragged_rows(
    full: list[torch.Tensor],
    calls: list[int],
    ratio: float,
    backends: list[str],
    inputs: tuple[torch.Tensor, torch.Tensor, StepWeights],
    full_times: dict[str, float],
    replays: int,
    generator: torch.Generator,
    peak: float | None,
) -> list[dict[str, Any]]:
    """Compress every distinct layer of ``full`` at ``ratio``, append one token, time each
    backend; one row per backend."""
    query, hidden, weights = inputs
    batch, context = full[0].shape[1], full[0].shape[3]
    device = full[0].device
    cache = RaggedCache(slack=SLACK)
    for layer, kv in enumerate(full):
        cache.update(kv[0], kv[1], layer)
        cache.compress_layer(layer, kept_masks(batch, context, ratio, generator).to(device))
    packed = appended(cache, len(full), batch, device)
    full_bytes = sum(full[layer].numel() * full[layer].element_size() for layer in calls)
    ragged_bytes = sum(cache.layer(layer).physical_bytes() for layer in calls)
    rows = []
    for backend in backends:
        times = full_times | ragged_times(packed, calls, query, hidden, weights, backend, replays)
        full_tbps = bandwidth(full_bytes, times["attention_full_ms"])
        ragged_tbps = bandwidth(ragged_bytes, times["attention_ragged_ms"])
        row = {
            "context": context,
            "batch": batch,
            "ratio": ratio,
            "kept": ragged_bytes / full_bytes,
            "backend": backend,
            "layers_distinct": len(full),
            "kv_full_mib": full_bytes / 2**20,
            "kv_ragged_mib": ragged_bytes / 2**20,
            **times,
            "attention_ratio": times["attention_ragged_ms"] / times["attention_full_ms"],
            "step_ratio": times["step_ragged_ms"] / times["step_full_ms"],
            "full_tbps": full_tbps,
            "ragged_tbps": ragged_tbps,
            "peak_tbps": peak,
            "full_of_peak": full_tbps / peak if peak else None,
            "ragged_of_peak": ragged_tbps / peak if peak else None,
        }
        rows.append(row)
        of_peak = f" = {ragged_tbps / peak:.0%} of peak" if peak else ""
        print(
            f"T={context} B={batch} kept {row['kept']:.2f} {backend:>6}: attention "
            f"{row['attention_full_ms']:.3f} → {row['attention_ragged_ms']:.3f} ms "
            f"({row['attention_ratio']:.2f}×), step {row['step_full_ms']:.3f} → "
            f"{row['step_ragged_ms']:.3f} ms ({row['step_ratio']:.2f}×); ragged "
            f"{ragged_tbps:.2f} TB/s{of_peak} (full {full_tbps:.2f})",
            flush=True,
        )
    return rows


def measure(
    context: int,
    batch: int,
    ratios: list[float],
    backends: list[str],
    replays: int,
    generator: torch.Generator,
    weights: StepWeights,
    fraction: float,
    peak: float | None,
    device: torch.device,
) -> list[dict[str, Any]]:
    """Rows of one (context, batch): the full cache timed once, then each ratio × backend."""
    dtype = torch.bfloat16
    distinct = distinct_layers(batch, context, ratios, fraction)
    hidden = torch.randn(batch, HIDDEN, device=device, dtype=dtype)
    query = torch.randn(batch, HEADS, 1, DIM, device=device, dtype=dtype)
    full = [
        torch.randn(2, batch, KV_HEADS, context, DIM, device=device, dtype=dtype)
        for _ in range(distinct)
    ]  # [k/v, batch, kv_head, T, D] per distinct layer
    calls = [layer % distinct for layer in range(LAYERS)]  # the cache each layer call reads
    full_times = full_step_times(full, calls, query, hidden, weights, replays)
    rows = []
    for ratio in ratios:
        inputs = (query, hidden, weights)
        rows += ragged_rows(
            full, calls, ratio, backends, inputs, full_times, replays, generator, peak
        )
        torch.cuda.empty_cache()  # the ragged cache of this ratio is gone
    return rows


# -- --budget-gib: aggregate tokens/s of the sequences that fit a KV budget ---------------------


def full_sequence_bytes(context: int) -> int:
    """Bytes of one sequence's full bf16 K/V cache over the 32 layers (128 KiB a token)."""
    return LAYERS * KV_HEADS * context * ENTRY_BYTES


def ragged_sequence_bytes(context: int, ratio: float, slack: int = SLACK) -> int:
    """Bytes of one sequence's packed cache over the 32 layers at ``ratio`` evicted.

    Each of its ``KV_HEADS`` segments a layer holds ``⌈(1 − ratio)·T⌉`` kept rows and ``slack``
    rows of room (the first decoded token goes there), each a K/V row and an int64 position,
    plus the segment's offset and length (see :class:`~rcstat.press.layout.PackedKV`).
    """
    kept = math.ceil(round((1 - ratio) * context, 6))  # 0.19999999999999996·T is 0.2·T
    rows = kept + slack
    return LAYERS * KV_HEADS * (rows * (ENTRY_BYTES + POSITION_BYTES) + SEGMENT_BYTES)


def budget_plan(budget_gib: float, context: int, ratio: float) -> dict[str, Any]:
    """The batch sizes that fit ``budget_gib`` GiB of KV cache, full and ragged, and their bytes.

    Raises
    ------
    ValueError
        If the budget does not hold one full sequence of ``context`` tokens.
    """
    budget = budget_gib * GIB
    seq_full, seq_ragged = full_sequence_bytes(context), ragged_sequence_bytes(context, ratio)
    batch_full, batch_ragged = int(budget // seq_full), int(budget // seq_ragged)
    if batch_full < 1:
        raise ValueError(
            f"budget_gib={budget_gib} holds no full sequence of {context} tokens "
            f"({seq_full / GIB:.2f} GiB each)"
        )
    return {
        "context": context,
        "ratio": ratio,
        "budget_gib": budget_gib,
        "batch_full": batch_full,
        "batch_ragged": batch_ragged,
        "seq_full_gib": seq_full / GIB,
        "seq_ragged_gib": seq_ragged / GIB,
        "kv_full_gib": batch_full * seq_full / GIB,
        "kv_ragged_plan_gib": batch_ragged * seq_ragged / GIB,
    }


def budget_layers(plan: dict[str, Any], free_bytes: float, fraction: float) -> tuple[int, int]:
    """Distinct layer caches that fit ``fraction`` of ``free_bytes``: full, then ragged (one
    after the other; a ragged layer's build, :data:`BUILD_DENSE` dense layers, on top)."""
    context, full_batch, ragged_batch = plan["context"], plan["batch_full"], plan["batch_ragged"]
    full_layer = full_batch * KV_HEADS * context * ENTRY_BYTES
    ragged_layer = plan["kv_ragged_plan_gib"] * GIB / LAYERS
    build = BUILD_DENSE * ragged_batch * KV_HEADS * context * ENTRY_BYTES
    return (
        fitting_layers(free_bytes, full_layer, 0, fraction),
        fitting_layers(free_bytes, ragged_layer, build, fraction),
    )


def layout_bytes(packed: PackedKV) -> int:
    """Bytes a packed layout holds: K/V rows with their room, positions and segment table."""
    tables = (packed.positions, packed.seg_start, packed.seg_len)
    return packed.capacity * packed.entry_bytes + sum(t.numel() * t.element_size() for t in tables)


def budget_rows(
    plans: list[dict[str, Any]],
    backends: list[str],
    replays: int,
    generator: torch.Generator,
    weights: StepWeights,
    fraction: float,
    peak: float | None,
    device: torch.device,
) -> list[dict[str, Any]]:
    """Rows of one context: the full cache at its budget batch timed once, then for each plan
    (ratio) the ragged cache at its budget batch with each backend."""
    dtype = torch.bfloat16
    context, batch = plans[0]["context"], plans[0]["batch_full"]
    distinct, _ = budget_layers(plans[0], torch.cuda.mem_get_info()[0], fraction)
    full = [
        torch.randn(2, batch, KV_HEADS, context, DIM, device=device, dtype=dtype)
        for _ in range(distinct)
    ]  # [k/v, batch, kv_head, T, D] per distinct layer
    calls = [layer % distinct for layer in range(LAYERS)]
    hidden = torch.randn(batch, HIDDEN, device=device, dtype=dtype)
    query = torch.randn(batch, HEADS, 1, DIM, device=device, dtype=dtype)
    full_times = full_step_times(full, calls, query, hidden, weights, replays)
    del full
    torch.cuda.empty_cache()  # the ragged caches take the budget next
    rows = []
    for plan in plans:
        ragged_batch = plan["batch_ragged"]
        _, distinct_ragged = budget_layers(plan, torch.cuda.mem_get_info()[0], fraction)
        cache = RaggedCache(slack=SLACK)
        for layer in range(distinct_ragged):
            kv = torch.randn(2, ragged_batch, KV_HEADS, context, DIM, device=device, dtype=dtype)
            cache.update(kv[0], kv[1], layer)  # a copy: the cache's first update concatenates
            del kv
            keep = kept_masks(ragged_batch, context, plan["ratio"], generator)
            cache.compress_layer(layer, keep.to(device))
        packed = appended(cache, distinct_ragged, ragged_batch, device)
        ragged_calls = [layer % distinct_ragged for layer in range(LAYERS)]
        hidden = torch.randn(ragged_batch, HIDDEN, device=device, dtype=dtype)
        query = torch.randn(ragged_batch, HEADS, 1, DIM, device=device, dtype=dtype)
        held = LAYERS * sum(layout_bytes(p) for p in packed) / len(packed)  # all 32 layers
        live = sum(p.live for p in packed) / len(packed)  # [rows] per layer, new token included
        for backend in backends:
            times = full_times | ragged_times(
                packed, ragged_calls, query, hidden, weights, backend, replays
            )
            full_tps = batch / (times["step_full_ms"] * 1e-3)
            ragged_tps = ragged_batch / (times["step_ragged_ms"] * 1e-3)
            full_read = batch * full_sequence_bytes(context)  # K/V bytes read per step
            ragged_read = LAYERS * live * ENTRY_BYTES
            ragged_tbps = bandwidth(ragged_read, times["attention_ragged_ms"])
            row = {
                **plan,
                "kept": live / (ragged_batch * KV_HEADS * (context + 1)),
                "backend": backend,
                "layers_distinct_full": distinct,
                "layers_distinct_ragged": distinct_ragged,
                "kv_ragged_gib": held / GIB,
                "within_budget": held <= plan["budget_gib"] * GIB,
                **times,
                "tokens_s_full": full_tps,
                "tokens_s_ragged": ragged_tps,
                "throughput_ratio": ragged_tps / full_tps,
                "step_ratio": times["step_ragged_ms"] / times["step_full_ms"],
                "full_tbps": bandwidth(full_read, times["attention_full_ms"]),
                "ragged_tbps": ragged_tbps,
                "peak_tbps": peak,
                "ragged_of_peak": ragged_tbps / peak if peak else None,
            }
            rows.append(row)
            print(
                f"T={context} budget {plan['budget_gib']:g} GiB kept {row['kept']:.2f} "
                f"{backend:>6}: full B={batch} ({row['kv_full_gib']:.1f} GiB) step "
                f"{row['step_full_ms']:.2f} ms = {full_tps:.0f} tok/s; ragged B={ragged_batch} "
                f"({row['kv_ragged_gib']:.1f} GiB) step {row['step_ragged_ms']:.2f} ms = "
                f"{ragged_tps:.0f} tok/s; ragged / full {row['throughput_ratio']:.2f}× "
                f"(layers distinct {distinct}/{distinct_ragged})",
                flush=True,
            )
        del cache, packed
        torch.cuda.empty_cache()  # the ragged cache of this ratio is gone
    return rows


def dry_run(budget_gib: float, contexts: list[int], ratios: list[float], fraction: float) -> None:
    """Print the budget plans and the distinct layers each card would hold, without CUDA."""
    for context in contexts:
        for ratio in ratios:
            plan = budget_plan(budget_gib, context, ratio)
            cards = ", ".join(
                "{} {}/{}".format(
                    card, *budget_layers(plan, (gib - 1) * GIB - WEIGHT_BYTES, fraction)
                )
                for card, gib in CARD_GIB.items()
            )
            print(
                f"T={context} budget {budget_gib:g} GiB ratio {ratio}: full "
                f"{plan['seq_full_gib']:.3f} GiB/seq × {plan['batch_full']} = "
                f"{plan['kv_full_gib']:.2f} GiB; ragged {plan['seq_ragged_gib']:.3f} GiB/seq × "
                f"{plan['batch_ragged']} = {plan['kv_ragged_plan_gib']:.2f} GiB; sequences "
                f"ragged / full {plan['batch_ragged'] / plan['batch_full']:.2f}×; layers "
                f"distinct full/ragged: {cards} (weights {WEIGHT_BYTES / GIB:.2f} GiB)",
                flush=True,
            )


# -- --check: the split kernel and the reference against float64 ---------------------------------

CHECKS = [  # batch, context, ratio, group, dim, dtype
    (1, 4096, 0.5, 4, 128, torch.bfloat16),
    (8, 16384, 0.8, 4, 128, torch.bfloat16),
    (2, 3000, 0.5, 8, 64, torch.float16),
    (1, 50000, 0.5, 1, 256, torch.bfloat16),
    (4, 2048, 0.0, 4, 128, torch.float16),
]


def check(generator: torch.Generator, device: torch.device) -> list[dict[str, Any]]:
    """Errors of ``backend="split"`` and ``"reference"`` (same dtype) against the reference
    computed in float64, on a few shapes of one layer after one appended token."""
    rows = []
    for batch, context, ratio, group, dim, dtype in CHECKS:
        keys, values = (
            torch.randn(batch, KV_HEADS, context, dim, generator=generator).to(device, dtype)
            for _ in "kv"
        )
        cache = RaggedCache(slack=16)
        cache.update(keys, values, 0)
        cache.compress_layer(0, kept_masks(batch, context, ratio, generator).to(device))
        token = torch.randn(2, batch, KV_HEADS, 1, dim, generator=generator).to(device, dtype)
        cache.layer(0).update(token[0], token[1])
        packed = cache.layer(0).packed
        assert packed is not None
        query = torch.randn(batch, KV_HEADS * group, 1, dim, generator=generator).to(device, dtype)
        exact = dataclasses.replace(
            packed, keys=packed.keys.double(), values=packed.values.double()
        )
        scaling = dim**-0.5
        want = packed_attention(query.double(), exact, scaling=scaling, backend="reference")
        row: dict[str, Any] = dict(
            batch=batch, context=context, ratio=ratio, group=group, dim=dim, dtype=str(dtype)
        )
        for backend in ("split", "reference"):
            got = packed_attention(query, packed, scaling=scaling, backend=backend).double()
            row[f"{backend}_max_abs"] = float((got - want).abs().max())
            row[f"{backend}_rel"] = float((got - want).norm() / want.norm())
            row[f"{backend}_rel_rounded"] = float((got - want.to(dtype)).norm() / want.norm())
        rows.append(row)
        print(
            f"B={batch} T={context} ratio {ratio} G={group} D={dim} {dtype}: split max "
            f"{row['split_max_abs']:.2e}, rel {row['split_rel']:.2e} (beyond rounding "
            f"{row['split_rel_rounded']:.2e}); reference max {row['reference_max_abs']:.2e}, "
            f"rel {row['reference_rel']:.2e}",
            flush=True,
        )
    return rows


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v]


def names(text: str) -> list[str]:
    chosen = [v for v in text.split(",") if v]
    unknown = set(chosen) - set(BACKENDS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {sorted(unknown)}: use {BACKENDS}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=ints, default=None, help="default: 4k–128k; 32k")
    parser.add_argument("--batch", type=ints, default=[1, 8])
    parser.add_argument("--ratio", type=floats, default=[0.5, 0.8], help="share evicted")
    parser.add_argument("--backend", type=names, default=list(BACKENDS))
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--peak-tbps", type=float, default=None, help="default: by card name")
    parser.add_argument("--memory-fraction", type=float, default=0.8)
    parser.add_argument("--check", action="store_true", help="errors of split vs float64")
    parser.add_argument(
        "--budget-gib", type=float, default=None, help="tokens/s at this KV budget (GiB)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print --budget-gib's plan only")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    budget = args.budget_gib is not None
    if args.context is None:
        args.context = [32768] if budget else [4096, 16384, 65536, 131072]
    if args.dry_run and not budget:
        parser.error("--dry-run needs --budget-gib")
    if budget:
        try:
            plans = [[budget_plan(args.budget_gib, t, r) for r in args.ratio] for t in args.context]
        except ValueError as error:
            parser.error(str(error))
    if args.dry_run:
        dry_run(args.budget_gib, args.context, args.ratio, args.memory_fraction)
        return
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    card = device_label("cuda")
    generator = torch.Generator().manual_seed(0)
    if args.check:
        rows = check(generator, torch.device("cuda"))
        write(args.out, f"decode_check_{card}", rows, machine("cuda"))
        return
    peak = args.peak_tbps if args.peak_tbps is not None else PEAK_TBPS.get(card)
    weights = StepWeights.make(torch.device("cuda"), torch.bfloat16)
    if budget:
        rows = []
        for context_plans in plans:
            rows += budget_rows(
                context_plans,
                args.backend,
                args.replays,
                generator,
                weights,
                args.memory_fraction,
                peak,
                torch.device("cuda"),
            )
        meta = machine("cuda") | {"peak_tbps": peak, "budget_gib": args.budget_gib}
        write(args.out, f"decode_budget_{card}", rows, meta)
        return
    rows = []
    for context in args.context:
        for batch in args.batch:
            rows += measure(
                context,
                batch,
                args.ratio,
                args.backend,
                args.replays,
                generator,
                weights,
                args.memory_fraction,
                peak,
                torch.device("cuda"),
            )
            torch.cuda.empty_cache()  # the full cache of this (context, batch) is gone
    write(args.out, f"decode_floor_{card}", rows, machine("cuda") | {"peak_tbps": peak})


if __name__ == "__main__":
    main()
