"""Compress a context, then answer a question on the compressed cache (``rcstat compress``).

Query placement follows kvpress's pipeline: the chat-rendered prompt is cut at the first token
of the question; the part before (the context) is prefilled and compressed by the press; the
question, the end of the user turn and the assistant header are then processed on top of the
compressed cache and the answer is generated greedily. Positions continue from the
uncompressed context length (a compressed cache holds fewer entries than it stands for).

:func:`compress_and_answer` reports the answer, whether it finished or was cut at the token
limit, the realized compression ratio (global, per layer, per KV head) and the KV-cache memory:
what a full cache would hold, what is live after compression, and what is allocated (live +
spare room for appended tokens). :func:`answer_full` gives the full-cache answer to compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS
from rcstat.generation import (
    Generated,
    greedy,
    greedy_batch,
    input_device,
    left_pad,
    padded_positions,
    stop_token_ids,
)
from rcstat.models.cache_argument import with_cache
from rcstat.press.attention import ragged_attention
from rcstat.press.cache import RaggedCache
from rcstat.segments import segment_chat

if TYPE_CHECKING:
    from rcstat.press.rcstat_press import RCStatPress

__all__ = [
    "PLACEMENTS",
    "CompressionReport",
    "PromptSplit",
    "answer_full",
    "answer_full_batch",
    "answer_on_cache",
    "attention_for",
    "compress_and_answer",
    "compress_and_answer_batch",
    "prefill",
    "split_context_question",
    "split_prompt",
]


@dataclass(frozen=True)
class CompressionReport:
    """What :func:`compress_and_answer` did."""

    answer: str
    finished: bool  # False: the answer was cut at max_new_tokens
    context_tokens: int
    ratio: float
    layer_ratios: dict[int, float]
    head_ratios: list[list[float]]  # [layers][kv_heads]
    dense_bytes: int  # the full cache of the context
    live_bytes: int  # after compression
    allocated_bytes: int  # live + spare room


#: Where the question goes relative to the compressed part (kvpress's pipeline conventions).
PLACEMENTS = ("context", "question")


@dataclass(frozen=True)
class PromptSplit:
    """The chat-rendered prompt cut in two: what the press compresses, and what follows."""

    compressed: torch.Tensor  # [1, m]
    rest: torch.Tensor  # [1, q]
    question_tokens: int  # the question's tokens at the end of `compressed` (0: not there)


def split_prompt(
    tokenizer: Any,
    context: str,
    question: str,
    *,
    placement: str = "context",
    allow_special_tokens: bool = False,
) -> PromptSplit:
    """Cut the chat-rendered prompt for compression.

    ``placement="context"`` (question-agnostic, kvpress's default pipeline): the cut is at the
    question's first token, so the question, the end of the user turn and the assistant header
    follow the compressed context. ``"question"`` (query-aware): the cut is after the
    question's last token, so the question is compressed with the context and can sit in the
    scoring window; only the end of the user turn and the assistant header follow.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    example = segment_chat(
        tokenizer,
        context,
        question,
        question_placement="prompt",
        allow_special_tokens=allow_special_tokens,
    )
    ids = example.input_ids  # [1, T]
    start, end = example.token_span("question")
    cut, inside = (start, 0) if placement == "context" else (end, end - start)
    return PromptSplit(ids[:, :cut], ids[:, cut:], inside)


def split_context_question(
    tokenizer: Any, context: str, question: str, *, allow_special_tokens: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(context_ids [1, m], question_ids [1, q])``: the chat-rendered prompt cut at the first
    token of the question (the question, the end of the user turn and the assistant header
    follow the compressed context); :func:`split_prompt` with the context placement."""
    split = split_prompt(tokenizer, context, question, allow_special_tokens=allow_special_tokens)
    return split.compressed, split.rest


def attention_for(model: Any, cache: Any) -> AbstractContextManager[Any]:
    """The attention that reads ``cache``: the ragged one for a :class:`RaggedCache`."""
    return ragged_attention(model) if isinstance(cache, RaggedCache) else nullcontext()


def prefill(model: Any, context: torch.Tensor, press: Any, cache: Any) -> None:
    """Run ``context`` ``[1, m]`` into ``cache``, compressed by ``press`` (None: no press)."""
    pressing = press(model) if press is not None else nullcontext()
    with torch.no_grad(), pressing, attention_for(model, cache):
        model(context, **with_cache(model, cache), use_cache=True)


def answer_on_cache(
    model: Any, cache: Any, question: torch.Tensor, steps: int, stops: frozenset[int], start: int
) -> Generated:
    """Greedy answer after ``question`` on a prefilled (possibly compressed) ``cache``."""
    with attention_for(model, cache):
        return greedy(model, cache, question, steps, stops, start)


def _split_on_device(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    allow_special_tokens: bool,
    placement: str = "context",
) -> PromptSplit:
    device = input_device(model)
    split = split_prompt(
        tokenizer,
        context,
        question,
        placement=placement,
        allow_special_tokens=allow_special_tokens,
    )
    return replace(split, compressed=split.compressed.to(device), rest=split.rest.to(device))


def answer_full(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    allow_special_tokens: bool = False,
    placement: str = "context",
) -> Generated:
    """The full-cache answer with the same prompt split and decoding as the compressed one."""
    split = _split_on_device(model, tokenizer, context, question, allow_special_tokens, placement)
    cache = DynamicCache()
    prefill(model, split.compressed, None, cache)
    stops = stop_token_ids(model, tokenizer)
    start = int(split.compressed.shape[1])
    return answer_on_cache(model, cache, split.rest, max_new_tokens, stops, start)


def compress_and_answer(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    press: RCStatPress,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    slack: int = 64,
    allow_special_tokens: bool = False,
    placement: str = "context",
    question_window: bool = False,
) -> CompressionReport:
    """Compress the context with ``press`` into a :class:`RaggedCache` and answer.

    ``placement="question"`` compresses the question with the context (query-aware, see
    :func:`split_prompt`); ``question_window`` then makes the press's window the question's
    tokens (the press's ``window_size`` is set to their number)."""
    split = _split_on_device(model, tokenizer, context, question, allow_special_tokens, placement)
    if question_window:
        if split.question_tokens == 0:
            raise ValueError("a question window needs placement='question'")
        press.window_size = split.question_tokens
    ctx = split.compressed
    cache = RaggedCache(slack=slack)
    prefill(model, ctx, press, cache)
    dense, live, allocated = cache.dense_bytes(), cache.physical_bytes(), cache.allocated_bytes()
    stops = stop_token_ids(model, tokenizer)
    generated = answer_on_cache(model, cache, split.rest, max_new_tokens, stops, int(ctx.shape[1]))
    heads = press.head_ratios()[:, 0]  # [layers, kv_heads]
    return CompressionReport(
        answer=tokenizer.decode(generated.ids, skip_special_tokens=True),
        finished=generated.finished,
        context_tokens=int(ctx.shape[1]),
        ratio=press.realized_ratio(),
        layer_ratios=press.layer_ratios(),
        head_ratios=heads.tolist(),
        dense_bytes=dense,
        live_bytes=live,
        allocated_bytes=allocated,
    )


def compress_and_answer_batch(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[str],
    questions: Sequence[str],
    press: RCStatPress,
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    slack: int = 64,
    allow_special_tokens: bool = False,
    placement: str = "context",
) -> list[CompressionReport]:
    """:func:`compress_and_answer` for several (context, question) pairs in one batch.

    The compressed parts are left-padded into one prefill; the press scores each row on its
    own tokens and evicts the padding, so every row keeps what it would keep alone. The
    questions follow, left-padded after the compressed contexts (the cache stores none of that
    padding), and the rows are decoded together; on CUDA the decode steps run the split-KV
    kernel. Each report is its row's own: answer, ratios and bytes.
    """
    splits = _batch_splits(model, tokenizer, contexts, questions, allow_special_tokens, placement)
    cache = RaggedCache(slack=slack)
    mask = _prefill_batch(model, splits, press, cache)
    lengths = [int(split.compressed.shape[1]) for split in splits]
    memory = [_row_bytes(cache, row, length) for row, length in enumerate(lengths)]
    heads = press.head_ratios()  # [layers, batch, kv_heads]
    answers = _answer_batch(model, tokenizer, splits, cache, mask, max_new_tokens)
    return [
        CompressionReport(
            answer=tokenizer.decode(generated.ids, skip_special_tokens=True),
            finished=generated.finished,
            context_tokens=lengths[row],
            ratio=press.realized_ratio(row),
            layer_ratios=press.layer_ratios(row),
            head_ratios=heads[:, row].tolist(),
            dense_bytes=memory[row][0],
            live_bytes=memory[row][1],
            allocated_bytes=memory[row][2],
        )
        for row, generated in enumerate(answers)
    ]


def answer_full_batch(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[str],
    questions: Sequence[str],
    *,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    allow_special_tokens: bool = False,
    placement: str = "context",
) -> list[Generated]:
    """The full-cache answers of several pairs in one batch: :func:`answer_full` of each."""
    splits = _batch_splits(model, tokenizer, contexts, questions, allow_special_tokens, placement)
    cache = DynamicCache()
    mask = _prefill_batch(model, splits, None, cache)
    return _answer_batch(model, tokenizer, splits, cache, mask, max_new_tokens)


def _batch_splits(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[str],
    questions: Sequence[str],
    allow_special_tokens: bool,
    placement: str,
) -> list[PromptSplit]:
    if len(contexts) != len(questions) or not contexts:
        raise ValueError(
            f"got {len(contexts)} contexts and {len(questions)} questions: give one question "
            "per context, at least one pair"
        )
    return [
        _split_on_device(model, tokenizer, c, q, allow_special_tokens, placement)
        for c, q in zip(contexts, questions, strict=True)
    ]


def _prefill_batch(
    model: Any, splits: Sequence[PromptSplit], press: Any, cache: Any
) -> torch.Tensor:
    """Prefill the left-padded compressed parts into ``cache`` (through ``press`` unless
    None); their padding mask ``[B, M]``."""
    ids, mask = left_pad([split.compressed[0] for split in splits])
    pressing = press(model) if press is not None else nullcontext()
    with torch.no_grad(), pressing, attention_for(model, cache):
        model(
            ids,
            attention_mask=mask,
            position_ids=padded_positions(mask),
            **with_cache(model, cache),
        )
    return mask


def _answer_batch(
    model: Any,
    tokenizer: Any,
    splits: Sequence[PromptSplit],
    cache: Any,
    mask: torch.Tensor,
    max_new_tokens: int,
) -> list[Generated]:
    """Every row's greedy answer after its rest of the prompt, on the prefilled ``cache``."""
    lengths = [int(split.compressed.shape[1]) for split in splits]
    stops = stop_token_ids(model, tokenizer)
    with attention_for(model, cache):
        return greedy_batch(
            model, cache, [split.rest[0] for split in splits], max_new_tokens, stops, lengths, mask
        )


def _row_bytes(cache: RaggedCache, row: int, length: int) -> tuple[int, int, int]:
    """Batch row ``row``'s key/value bytes over the cache's layers: its full cache of
    ``length`` positions, its live entries, and its allocated rows (live + room)."""
    dense = live = allocated = 0
    for index in range(len(cache.layers)):
        layer = cache.layer(index)
        packed = layer.packed
        if packed is None:
            keys, _ = layer._dense()
            per_row = keys[row].numel() * 2 * keys.element_size()
            dense, live, allocated = dense + per_row, live + per_row, allocated + per_row
            continue
        segments = slice(row * packed.kv_heads, (row + 1) * packed.kv_heads + 1)
        starts = packed.seg_start[segments]
        dense += packed.kv_heads * length * packed.entry_bytes
        live += int(packed.seg_len[row * packed.kv_heads : (row + 1) * packed.kv_heads].sum()) * (
            packed.entry_bytes
        )
        allocated += int(starts[-1] - starts[0]) * packed.entry_bytes
    return dense, live, allocated
