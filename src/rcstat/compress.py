"""Answer a question over a context with RCStatPress and the ragged cache (``rcstat compress``).

The context (the chat prompt up to the question) is prefilled and compressed; the question is
processed and the answer generated on the compressed cache. The result reports the realized
compression ratio (global, per layer, per KV head) and the KV-cache memory: what a full cache
would hold, what is live after compression, and what is allocated (live + spare room for
appended tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rcstat.evaluation.kv import greedy, prefill, split_context_question
from rcstat.press.ragged import RaggedCache
from rcstat.press.rcstat_press import RCStatPress


@dataclass(frozen=True)
class CompressionReport:
    """What ``compress_and_answer`` did."""

    answer: str
    context_tokens: int
    ratio: float
    layer_ratios: dict[int, float]
    head_ratios: list[list[float]]  # [layers][kv_heads]
    dense_bytes: int  # the full cache of the context
    live_bytes: int  # after compression
    allocated_bytes: int  # live + spare room


def compress_and_answer(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    press: RCStatPress,
    *,
    max_new_tokens: int = 64,
    slack: int = 64,
) -> CompressionReport:
    """Compress the context with ``press`` into a :class:`RaggedCache` and answer."""
    device = next(model.parameters()).device
    context_ids, question_ids = (
        t.to(device) for t in split_context_question(tokenizer, context, question)
    )
    cache = RaggedCache(slack=slack)
    prefill(model, context_ids, press, cache)
    dense, live, allocated = cache.dense_bytes(), cache.physical_bytes(), cache.allocated_bytes()
    stops = {tokenizer.eos_token_id}
    answer_ids = greedy(
        model, cache, question_ids, max_new_tokens, stops, int(context_ids.shape[1])
    )
    heads = press.head_ratios()[:, 0]  # [layers, kv_heads]
    return CompressionReport(
        answer=tokenizer.decode(answer_ids, skip_special_tokens=True),
        context_tokens=int(context_ids.shape[1]),
        ratio=press.realized_ratio(),
        layer_ratios=press.layer_ratios(),
        head_ratios=heads.tolist(),
        dense_bytes=dense,
        live_bytes=live,
        allocated_bytes=allocated,
    )


def format_bytes(count: int) -> str:
    """``1536`` → ``'1.5 KiB'``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{int(value)} B"
        value /= 1024
    raise AssertionError("unreachable")


__all__ = ["CompressionReport", "compress_and_answer", "format_bytes"]
