"""The decode step at its floor: full vs ragged KV cache in graph-captured, static-shape loops.

A decode step of an 8B model in eager transformers spends most of its time in Python, so a
step-time ratio there says little about attention (docs/benchmarks.md §3.5.3). Here the work of
one decode step of Llama-3.1-8B shapes (32 layers, 32 query / 8 KV heads, head_dim 128,
bfloat16) is recorded as one CUDA graph and replayed:

- ``attention``: the 32 layers' decode attention of one new token — sdpa over the full cache
  ``[1, 8, T, 128]`` per layer, or :func:`~rcstat.press.attention.packed_attention` (torch's
  varlen flash attention) over a ragged cache that kept ``1 − ratio`` of the entries with a
  different length per KV head;
- ``step``: the same plus the layer's weight products for one token (q/k/v/o projections and
  the gated MLP, 218 M parameters a layer, read from memory every layer as in a real step) —
  the floor of a decode step, which the KV cache shares with the weights.

The ratios compressed / full show what the ragged cache saves where Python is not the limit.

    python -m benchmarks.bench_decode_floor --context 4096,16384 --ratio 0.5 --out docs/bench
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks._common import device_label, ints, machine, write
from rcstat.press.attention import packed_attention
from rcstat.press.cache import RaggedCache

LAYERS, HEADS, KV_HEADS, DIM, HIDDEN, MLP = 32, 32, 8, 128, 4096, 14336


def graphed(step: Callable[[], None], replays: int) -> float:
    """Mean milliseconds of one replay of ``step`` recorded as a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm-up: kernels chosen, workspaces allocated
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


def kept_masks(context: int, ratio: float, generator: torch.Generator) -> torch.Tensor:
    """``[1, KV_HEADS, T]`` keep masks: a different share per KV head, ``1 − ratio`` overall."""
    shares = torch.rand(KV_HEADS, generator=generator) + 0.5
    shares = (1 - ratio) * shares / shares.mean()
    scores = torch.rand(KV_HEADS, context, generator=generator)
    keep = scores < shares.clamp(0.02, 1.0)[:, None]
    keep[:, -8:] = True  # the window
    return keep[None]


def measure(context: int, ratio: float, replays: int, generator: torch.Generator) -> dict:
    """Graph-replayed milliseconds of the four loops at one context length."""
    device, dtype = torch.device("cuda"), torch.bfloat16
    scaling = DIM**-0.5
    # one layer's weights, read once per layer (436 MB: far beyond the L2 cache)
    weights = [
        torch.randn(rows, HIDDEN, device=device, dtype=dtype) * 0.01
        for rows in (HEADS * DIM, KV_HEADS * DIM, KV_HEADS * DIM, MLP, MLP)
    ]
    out_proj = torch.randn(HIDDEN, HEADS * DIM, device=device, dtype=dtype) * 0.01
    down = torch.randn(HIDDEN, MLP, device=device, dtype=dtype) * 0.01
    hidden = torch.randn(1, HIDDEN, device=device, dtype=dtype)
    query = torch.randn(1, HEADS, 1, DIM, device=device, dtype=dtype)
    sink = torch.zeros(1, HIDDEN, device=device, dtype=dtype)
    full = [
        torch.randn(2, 1, KV_HEADS, context, DIM, device=device, dtype=dtype) for _ in range(LAYERS)
    ]
    cache = RaggedCache(slack=64)
    for layer, kv in enumerate(full):
        cache.update(kv[0].clone(), kv[1].clone(), layer)
        cache.compress_layer(layer, kept_masks(context, ratio, generator).to(device))
    for layer in range(LAYERS):  # the new token, appended as in a decode step
        token = torch.randn(2, 1, KV_HEADS, 1, DIM, device=device, dtype=dtype)
        cache.layer(layer).update(token[0], token[1])
    packed = [cache.layer(layer).packed for layer in range(LAYERS)]

    def weight_products() -> None:
        q, _, _, gate, up = (hidden @ w.T for w in weights)
        sink.add_(q @ out_proj.T).add_((F.silu(gate) * up) @ down.T)

    def full_attention() -> None:
        for kv in full:
            F.scaled_dot_product_attention(query, kv[0], kv[1], scale=scaling, enable_gqa=True)

    def ragged_attention() -> None:
        for layout in packed:
            packed_attention(query, layout, scaling=scaling, backend="varlen")

    def full_step() -> None:  # the order of the products does not change the time
        for _ in range(LAYERS):
            weight_products()
        full_attention()

    def ragged_step() -> None:
        for _ in range(LAYERS):
            weight_products()
        ragged_attention()

    times = {
        "attention_full_ms": graphed(full_attention, replays),
        "attention_ragged_ms": graphed(ragged_attention, replays),
        "step_full_ms": graphed(full_step, replays),
        "step_ragged_ms": graphed(ragged_step, replays),
    }
    full_bytes = sum(kv.numel() * kv.element_size() for kv in full)
    return {
        "context": context,
        "ratio": ratio,
        "realized_ratio": 1 - cache.physical_bytes() / full_bytes,
        "kv_full_mib": full_bytes / 2**20,
        "kv_ragged_mib": cache.physical_bytes() / 2**20,
        **times,
        "attention_ratio": times["attention_ragged_ms"] / times["attention_full_ms"],
        "step_ratio": times["step_ragged_ms"] / times["step_full_ms"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=ints, default=[4096, 16384])
    parser.add_argument("--ratio", type=float, default=0.5)
    parser.add_argument("--replays", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    generator = torch.Generator().manual_seed(0)
    rows = []
    for context in args.context:
        row = measure(context, args.ratio, args.replays, generator)
        rows.append(row)
        print(
            f"T={context}: KV {row['kv_full_mib']:.0f} → {row['kv_ragged_mib']:.0f} MiB "
            f"(ratio {row['realized_ratio']:.3f}); attention {row['attention_full_ms']:.3f} → "
            f"{row['attention_ragged_ms']:.3f} ms ({row['attention_ratio']:.2f}×); step "
            f"{row['step_full_ms']:.3f} → {row['step_ragged_ms']:.3f} ms "
            f"({row['step_ratio']:.2f}×)",
            flush=True,
        )
        torch.cuda.empty_cache()
    write(args.out, f"decode_floor_{device_label('cuda')}", rows, machine("cuda"))


if __name__ == "__main__":
    main()
