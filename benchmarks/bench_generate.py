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

``--graphs`` times :func:`~rcstat.press.graphed_generate` instead, every decode step replayed
as a CUDA graph. The full cache runs twice: ``static`` is transformers' ``StaticCache``
(``context + rounds · new tokens`` positions, read through sdpa with its mask, as transformers'
own graph-captured decoding does) and ``ragged 0.0`` a RaggedCache keeping every entry, read
by the same split-KV kernel as the compressed rows; each compressed row's ratios are over the
faster of the two (its ``baseline``); ``--no-static`` leaves the ``StaticCache`` out (its
steps read the whole padded cache: minutes a row at 64k and batch 8). Each row is ``--rounds``
calls of ``--new-tokens`` steps on the same cache, one after the other (the sequence grows by
the tokens of the rounds before); tokens/s is the median round, with its min and max, each
round's time including its graph recordings. ``--budget-gib G`` runs, for each context and
ratio, as many sequences as fit ``G`` GiB of KV cache with each cache
(``bench_decode_floor.budget_plan``) and compares aggregate tokens/s::

    python -m benchmarks.bench_generate --graphs --context 4096,16384,65536,131072 --batch 1 \
        --ratio 0.5 --out docs/bench
    python -m benchmarks.bench_generate --graphs --budget-gib 40 --context 32768 --ratio 0.5 \
        --out docs/bench
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, LlamaForCausalLM, StaticCache

from benchmarks._common import device_label, ints, llama_8b, machine, write
from benchmarks.bench_decode_floor import budget_plan, floats, kept_masks
from rcstat.models.cache_argument import with_cache
from rcstat.press import RaggedCache, graphed_generate
from rcstat.press.answer import attention_for

CHUNK = 4096  # prefill chunk (keeps the prefill's activations small at long contexts)
# the full cache with --graphs, as ratios: a StaticCache (None), a RaggedCache keeping everything
FULL_GRAPHED = (None, 0.0)


def prefill(model: LlamaForCausalLM, ids: torch.Tensor, cache: Any) -> None:
    """Run ``ids`` ``[B, T]`` into ``cache`` in chunks of :data:`CHUNK`, without logits."""
    body = model.model
    with torch.no_grad():
        for start in range(0, ids.shape[1], CHUNK):
            body(ids[:, start : start + CHUNK], **with_cache(body, cache), use_cache=True)


def static_cache(model: LlamaForCausalLM, ids: torch.Tensor, positions: int) -> StaticCache:
    """``ids`` ``[B, T]`` in a ``StaticCache`` of ``positions`` positions: prefilled into a
    ``DynamicCache`` in chunks (a static cache prefilled directly would attend over all its
    positions in every chunk), then each layer copied in and freed."""
    dynamic = DynamicCache()
    prefill(model, ids, dynamic)
    static = StaticCache(config=model.config, max_cache_len=positions)
    where = torch.arange(ids.shape[1], device=ids.device)
    try:
        for index, layer in enumerate(dynamic.layers):
            static.update(layer.keys, layer.values, index, {"cache_position": where})
            layer.keys = layer.values = None
    except TypeError as err:  # a transformers whose update takes no cache_position
        print(f"static cache: copy refused ({err}); prefilling it directly", file=sys.stderr)
        del dynamic, static
        static = StaticCache(config=model.config, max_cache_len=positions)
        prefill(model, ids, static)
    if int(static.get_seq_length()) != ids.shape[1]:
        raise RuntimeError(f"the static cache holds {int(static.get_seq_length())} positions")
    return static


def compressed(
    model: LlamaForCausalLM, ids: torch.Tensor, ratio: float, generator: torch.Generator
) -> RaggedCache:
    """``ids`` ``[B, T]`` in a RaggedCache keeping ``1 − ratio`` of each layer's entries, a
    different share per (sequence, KV head)."""
    cache = RaggedCache()
    prefill(model, ids, cache)
    batch, context = ids.shape
    for layer in range(model.config.num_hidden_layers):
        keep = kept_masks(batch, context, ratio, generator).to(ids.device)
        cache.compress_layer(layer, keep)
    return cache


def kv_bytes(cache: Any) -> int:
    if isinstance(cache, RaggedCache):
        return cache.allocated_bytes()
    return sum(layer.keys.numel() * 2 * layer.keys.element_size() for layer in cache.layers)


def cache_kind(cache: Any) -> str:
    """A row's name for ``cache``: ``ragged``, ``static`` (transformers' ``StaticCache``) or
    ``full`` (a ``DynamicCache``)."""
    if isinstance(cache, RaggedCache):
        return "ragged"
    return "static" if isinstance(cache, StaticCache) else "full"


def row_on(
    build: Callable[[], Any],
    run: Callable[[Any], dict[str, Any]],
    ids: torch.Tensor,
    ratio: float | None,
    new_tokens: int,
) -> dict[str, Any]:
    """One row: the cache ``build`` returns, ``run``'s fields on it, its KV bytes and the peak
    memory torch allocated during ``run`` (weights included); the cache is freed before
    returning."""
    batch, context = ids.shape
    cache = build()
    torch.cuda.empty_cache()
    row = {
        "context": context,
        "batch": batch,
        "cache": cache_kind(cache),
        "ratio": ratio,
        "new_tokens": new_tokens,
    }
    held = kv_bytes(cache)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    row |= run(cache)
    peak = torch.cuda.max_memory_allocated()
    del cache
    torch.cuda.empty_cache()
    return row | {"kv_gib": held / 2**30, "peak_gib": peak / 2**30}


def generate_row(
    model: LlamaForCausalLM,
    ids: torch.Tensor,
    ratio: float | None,
    new_tokens: int,
    generator: torch.Generator,
) -> dict[str, Any]:
    """Prefill all but the last prompt token into a ``DynamicCache`` (``ratio`` None) or a
    compressed RaggedCache, then time ``generate`` of ``new_tokens``."""
    batch, context = ids.shape

    def build() -> Any:
        if ratio is not None:
            return compressed(model, ids[:, :-1], ratio, generator)
        cache = DynamicCache()
        prefill(model, ids[:, :-1], cache)
        return cache

    def run(cache: Any) -> dict[str, Any]:
        options: dict[str, Any] = {
            "max_new_tokens": new_tokens,
            "min_new_tokens": new_tokens,
            "do_sample": False,
            "pad_token_id": 0,
        }
        start = time.perf_counter()
        with torch.no_grad(), attention_for(model, cache):
            # an explicit mask: generate would take every pad_token_id in the prompt for padding
            mask = torch.ones_like(ids)
            out = model.generate(ids, attention_mask=mask, past_key_values=cache, **options)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        assert out.shape == (batch, context + new_tokens)
        return {
            "seconds": seconds,
            "tokens_per_s": batch * new_tokens / seconds,
            "ms_per_step": 1e3 * seconds / new_tokens,
        }

    return row_on(build, run, ids, ratio, new_tokens)


def graphed_row(
    model: LlamaForCausalLM,
    ids: torch.Tensor,
    ratio: float | None,
    new_tokens: int,
    rounds: int,
    generator: torch.Generator,
) -> dict[str, Any]:
    """Prefill all but the last prompt token into a ``StaticCache`` (``ratio`` None) or a
    compressed RaggedCache, then time ``rounds`` calls of :func:`graphed_generate` of
    ``new_tokens`` steps each."""
    batch, context = ids.shape

    def build() -> Any:
        if ratio is None:
            return static_cache(model, ids[:, :-1], context + rounds * new_tokens)
        return compressed(model, ids[:, :-1], ratio, generator)

    def run(cache: Any) -> dict[str, Any]:
        tokens, seconds, recorded = ids[:, -1:], [], 0
        for _ in range(rounds):
            start = time.perf_counter()
            result = graphed_generate(model, cache, tokens, max_new_tokens=new_tokens, graphs=True)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            assert result.steps == new_tokens and result.tokens.shape == (batch, new_tokens)
            tokens, recorded = result.tokens[:, -1:], recorded + result.recorded
        rates = sorted(batch * new_tokens / s for s in seconds)
        return {
            "rounds": rounds,
            "tokens_per_s": statistics.median(rates),
            "tokens_per_s_min": rates[0],
            "tokens_per_s_max": rates[-1],
            "ms_per_step": 1e3 * statistics.median(seconds) / new_tokens,
            "graphs_recorded": recorded,
        }

    return row_on(build, run, ids, ratio, new_tokens)


def measured_row(
    model: LlamaForCausalLM,
    ids: torch.Tensor,
    ratio: float | None,
    args: argparse.Namespace,
    generator: torch.Generator,
) -> dict[str, Any]:
    """One row of the grid: :func:`graphed_row` with ``--graphs``, else :func:`generate_row`
    after a warm-up of the same cache (kernels compiled)."""
    if args.graphs:
        return graphed_row(model, ids, ratio, args.new_tokens, args.rounds, generator)
    generate_row(model, ids[:, :1024], ratio, 4, generator)
    return generate_row(model, ids, ratio, args.new_tokens, generator)


def full_graphed(args: argparse.Namespace) -> tuple[float | None, ...]:
    """The full caches timed with ``--graphs``, as ratios: :data:`FULL_GRAPHED`, or with
    ``--no-static`` only the RaggedCache keeping every entry."""
    return FULL_GRAPHED if args.static else (0.0,)


def full_rows(
    model: LlamaForCausalLM, ids: torch.Tensor, args: argparse.Namespace, generator: torch.Generator
) -> list[dict[str, Any]]:
    """The full cache's rows: eager, a ``DynamicCache``; with ``--graphs``, transformers'
    ``StaticCache`` (sdpa; not with ``--no-static``) and a RaggedCache keeping every entry
    (ratio 0, read by the same kernel as the compressed rows)."""
    if not args.graphs:
        return [measured_row(model, ids, None, args, generator)]
    return [
        graphed_row(model, ids, ratio, args.new_tokens, args.rounds, generator)
        for ratio in full_graphed(args)
    ]


def fastest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The full-cache row the compressed rows are compared with: the most tokens/s."""
    return max(rows, key=lambda row: row["tokens_per_s"])


def with_ratios(row: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """``row`` with its tokens/s, KV bytes and peak memory over the full cache's (``full``:
    which full row, ``cache`` and ``ratio``)."""
    return row | {
        "baseline": f"{full['cache']} {full['ratio'] or 0:.1f}",
        "speed_ratio": row["tokens_per_s"] / full["tokens_per_s"],
        "kv_ratio": row["kv_gib"] / full["kv_gib"],
        "peak_ratio": row["peak_gib"] / full["peak_gib"],
    }


def say(row: dict[str, Any]) -> None:
    spread = (
        f" [{row['tokens_per_s_min']:.1f}, {row['tokens_per_s_max']:.1f}]"
        if "tokens_per_s_min" in row
        else ""
    )
    print(
        f"T={row['context']} B={row['batch']} {row['cache']:>6} {row['ratio'] or 0:.1f}: "
        f"{row['tokens_per_s']:.1f}{spread} tok/s ({row['ms_per_step']:.2f} ms/step), "
        f"KV {row['kv_gib']:.2f} GiB, peak {row['peak_gib']:.2f} GiB"
        + (f", {row['speed_ratio']:.2f}x {row['baseline']}" if "speed_ratio" in row else ""),
        flush=True,
    )


def budget_rows(
    model: LlamaForCausalLM, args: argparse.Namespace, generator: torch.Generator
) -> list[dict[str, Any]]:
    """For each context and ratio, the batch of each cache that fits ``--budget-gib``, graphed."""
    rows: list[dict[str, Any]] = []
    vocab = model.config.vocab_size
    timing = (args.new_tokens, args.rounds, generator)
    for context in args.context:
        for ratio in args.ratio:
            plan = budget_plan(args.budget_gib, context, ratio)
            largest = max(plan["batch_full"], plan["batch_ragged"])
            ids = torch.randint(1, vocab, (largest, context), generator=generator).to("cuda")
            fulls = [
                plan | graphed_row(model, ids[: plan["batch_full"]], kept, *timing)
                for kept in full_graphed(args)
            ]
            ragged = graphed_row(model, ids[: plan["batch_ragged"]], ratio, *timing)
            rows += [*fulls, plan | with_ratios(ragged, fastest(fulls))]
            for row in rows[-len(fulls) - 1 :]:
                say(row)
    return rows


def profile_steps(model: LlamaForCausalLM, ids: torch.Tensor, ratio: float | None) -> None:
    """Print where a few decode steps' time goes: the top CUDA kernels and the CPU total."""
    from torch.profiler import ProfilerActivity, profile

    batch, context = ids.shape
    if ratio is None:
        cache: Any = DynamicCache()
        prefill(model, ids[:, :-1], cache)
    else:
        cache = compressed(model, ids[:, :-1], ratio, torch.Generator().manual_seed(1))
    token = ids[:, -1:]
    with torch.no_grad(), attention_for(model, cache):
        for step in range(5):  # 2 warm-up steps, 3 profiled
            if step == 2:
                torch.cuda.synchronize()
                profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                profiler.__enter__()
            logits = model(token, **with_cache(model, cache)).logits
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
    parser.add_argument("--graphs", action="store_true", help="time graphed_generate instead")
    parser.add_argument("--rounds", type=int, default=3, help="graphed calls per row")
    parser.add_argument("--budget-gib", type=float, help="with --graphs: batches that fit G GiB")
    parser.add_argument(
        "--no-static",
        dest="static",
        action="store_false",
        help="with --graphs: leave out transformers' StaticCache (minutes a row at long contexts)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/bench"))
    args = parser.parse_args()
    if args.budget_gib is not None and not args.graphs:
        parser.error("--budget-gib needs --graphs")
    if not args.static and not args.graphs:
        parser.error("--no-static needs --graphs")
    if args.rounds < 1 or args.new_tokens < 1:
        parser.error("--rounds and --new-tokens must be at least 1")
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
    name = f"generate{'_graphed' if args.graphs else ''}_{device_label('cuda')}"
    if args.graphs:  # warm-up: kernels compiled, CUDA graphs' first recording
        warm = torch.randint(1, model.config.vocab_size, (1, 1024), generator=generator)
        for ratio in (*full_graphed(args), *args.ratio):
            graphed_row(model, warm.to(device), ratio, 4, 1, generator)
    if args.budget_gib is not None:
        rows = budget_rows(model, args, generator)
        write(args.out, f"{name}_budget", rows, machine("cuda"))
        return
    rows = []
    for context in args.context:
        for batch in args.batch:
            ids = torch.randint(1, model.config.vocab_size, (batch, context), generator=generator)
            ids = ids.to(device)
            fulls = full_rows(model, ids, args, generator)
            for row in fulls:
                rows.append(row)
                say(row)
            for ratio in args.ratio:
                row = measured_row(model, ids, ratio, args, generator)
                rows.append(with_ratios(row, fastest(fulls)))
                say(rows[-1])
            # written after every (context, batch): a long run cut short keeps what it measured
            write(args.out, name, rows, machine("cuda"))


if __name__ == "__main__":
    main()
