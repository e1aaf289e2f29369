"""``model.generate`` end to end: tokens/s and peak memory with the full cache and the ragged one.

A random-weight model of Llama-3.1-8B's shapes (32 layers, 32 query / 8 KV heads, head dim
128, vocabulary 128,256, bfloat16) on one GPU. For each ``--context`` and ``--batch``, a random
prompt is prefilled (chunked, through the base model: no prompt logits) into

- ``full``: a ``DynamicCache`` holding every entry, or
- ``ragged``: a :class:`~rcstat.press.cache.RaggedCache` that then keeps ``1 − ratio`` of
  each layer's entries, a different share per (sequence, KV head)
  (``bench_decode_floor.kept_masks``; the press's own choice of entries does not change the
  bytes or the kernel's work), decoded inside :func:`~rcstat.press.ragged_attention` with the
  default backend (``"auto"``: the split-KV kernel for decode steps);

then ``model.generate`` (greedy, exactly ``--new-tokens`` tokens, eager transformers) continues
it. Per row: the generate time, tokens/s (``batch · new tokens / time``), the KV bytes after
the prefill, and the peak memory torch allocated during ``generate`` (weights included), the
ratios ragged / full on the ``ratio`` rows. Eager ``generate`` spends milliseconds of Python a
step, so at batch 1 the step is not bound by the cache (``bench_decode_floor`` times the step at
its floor).

    python -m benchmarks.bench_generate --context 32768 --batch 1,8 --ratio 0.5 --out docs/bench
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, LlamaForCausalLM

from benchmarks._common import device_label, ints, llama_8b, machine, write
from benchmarks.bench_decode_floor import floats, kept_masks
from rcstat.press import RaggedCache, ragged_attention

CHUNK = 4096  # prefill chunk (keeps the prefill's activations small at long contexts)


def prefill(model: LlamaForCausalLM, ids: torch.Tensor, cache: Any) -> None:
    """Run ``ids`` ``[B, T]`` into ``cache`` in chunks of :data:`CHUNK`, without logits."""
    with torch.no_grad():
        for start in range(0, ids.shape[1], CHUNK):
            model.model(ids[:, start : start + CHUNK], past_key_values=cache, use_cache=True)


def kv_bytes(cache: Any) -> int:
    if isinstance(cache, RaggedCache):
        return cache.allocated_bytes()
    return sum(layer.keys.numel() * 2 * layer.keys.element_size() for layer in cache.layers)


def generate_row(
    model: LlamaForCausalLM,
    ids: torch.Tensor,
    ratio: float | None,
    new_tokens: int,
    generator: torch.Generator,
) -> dict[str, Any]:
    """Prefill all but the last prompt token, compress (``ratio`` not None), then time
    ``generate`` of ``new_tokens``; the cache is freed before returning."""
    batch, context = ids.shape
    cache: Any = DynamicCache() if ratio is None else RaggedCache()
    prefill(model, ids[:, :-1], cache)
    if ratio is not None:
        for layer in range(model.config.num_hidden_layers):
            keep = kept_masks(batch, context - 1, ratio, generator).to(ids.device)
            cache.compress_layer(layer, keep)
    torch.cuda.empty_cache()
    held = kv_bytes(cache)
    options: dict[str, Any] = {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "do_sample": False,
        "pad_token_id": 0,
    }
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    with torch.no_grad():
        # an explicit mask: generate would take every pad_token_id in the prompt for padding
        mask = torch.ones_like(ids)
        if ratio is None:
            out = model.generate(ids, attention_mask=mask, past_key_values=cache, **options)
        else:
            with ragged_attention(model):
                out = model.generate(ids, attention_mask=mask, past_key_values=cache, **options)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    assert out.shape == (batch, context + new_tokens)
    peak = torch.cuda.max_memory_allocated()
    del cache, out
    torch.cuda.empty_cache()
    return {
        "context": context,
        "batch": batch,
        "cache": "full" if ratio is None else "ragged",
        "ratio": ratio,
        "new_tokens": new_tokens,
        "seconds": seconds,
        "tokens_per_s": batch * new_tokens / seconds,
        "ms_per_step": 1e3 * seconds / new_tokens,
        "kv_gib": held / 2**30,
        "peak_gib": peak / 2**30,
    }


def profile_steps(model: LlamaForCausalLM, ids: torch.Tensor, ratio: float | None) -> None:
    """Print where a few decode steps' time goes: the top CUDA kernels and the CPU total."""
    from torch.profiler import ProfilerActivity, profile

    batch, context = ids.shape
    cache: Any = DynamicCache() if ratio is None else RaggedCache()
    prefill(model, ids[:, :-1], cache)
    if ratio is not None:
        generator = torch.Generator().manual_seed(1)
        for layer in range(model.config.num_hidden_layers):
            keep = kept_masks(batch, context - 1, ratio, generator).to(ids.device)
            cache.compress_layer(layer, keep)
    session = ragged_attention(model) if ratio is not None else contextlib.nullcontext()
    token = ids[:, -1:]
    with torch.no_grad(), session:
        for step in range(5):  # 2 warm-up steps, 3 profiled
            if step == 2:
                torch.cuda.synchronize()
                profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                profiler.__enter__()
            logits = model(token, past_key_values=cache).logits
            token = logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        profiler.__exit__(None, None, None)
    name = "full" if ratio is None else f"ragged {ratio}"
    print(f"== T={context} B={batch} {name}: 3 steps ==", flush=True)
    print(profiler.key_averages().table(sort_by="cuda_time_total", row_limit=8), flush=True)
    del cache
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=ints, default=[32768])
    parser.add_argument("--batch", type=ints, default=[1, 8])
    parser.add_argument("--ratio", type=floats, default=[0.5], help="share evicted")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--profile", action="store_true", help="profile 3 steps of each cache")
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    device = torch.device("cuda")
    model = llama_8b("cuda")
    generator = torch.Generator().manual_seed(0)
    if args.profile:
        for context in args.context:
            for batch in args.batch:
                ids = torch.randint(
                    1, model.config.vocab_size, (batch, context), generator=generator
                )
                for ratio in (None, *args.ratio):
                    profile_steps(model, ids.to(device), ratio)
        return
    rows = []
    for context in args.context:
        for batch in args.batch:
            ids = torch.randint(1, model.config.vocab_size, (batch, context), generator=generator)
            ids = ids.to(device)
            generate_row(model, ids[:, :1024], None, 4, generator)  # warm-up (kernels, graphs)
            full = generate_row(model, ids, None, args.new_tokens, generator)
            rows.append(full)
            for ratio in args.ratio:
                generate_row(model, ids[:, :1024], ratio, 4, generator)
                row = generate_row(model, ids, ratio, args.new_tokens, generator)
                row["speed_ratio"] = row["tokens_per_s"] / full["tokens_per_s"]
                row["kv_ratio"] = row["kv_gib"] / full["kv_gib"]
                row["peak_ratio"] = row["peak_gib"] / full["peak_gib"]
                rows.append(row)
            for row in rows[-1 - len(args.ratio) :]:
                print(
                    f"T={context} B={batch} {row['cache']:>6} {row['ratio'] or 0:.1f}: "
                    f"{row['tokens_per_s']:.1f} tok/s ({row['ms_per_step']:.2f} ms/step), "
                    f"KV {row['kv_gib']:.2f} GiB, peak {row['peak_gib']:.2f} GiB",
                    flush=True,
                )
            # written after every (context, batch): a long run cut short keeps what it measured
            write(args.out, f"generate_{device_label('cuda')}", rows, machine("cuda"))


if __name__ == "__main__":
    main()
