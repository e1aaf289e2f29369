"""One example of the KV-cache compression benchmark (paper §5.2).

Query placement follows kvpress's pipeline: the context (the chat-rendered prompt up to the
question) is prefilled — and compressed by the press — then the question and the answer are
processed on top of the compressed cache. With ``placement="question"`` (query-aware, reported
apart) the question is compressed with the context and only the end of the user turn follows
(:func:`rcstat.press.answer.split_prompt`). For every example and press:

1. with the full cache, the model answers greedily (the reference generation ``g``);
2. the reference ``g`` is teacher-forced after the question with the full and with the
   compressed cache, and the last layer's per-head attention outputs at the positions of ``g``
   give the VER;
3. with the compressed cache the model answers greedily again, scored by ROUGE against the
   dataset's answers and against the full-cache answer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import DynamicCache

from rcstat.defaults import DATASET_MAX_NEW_TOKENS
from rcstat.evaluation.metrics import head_outputs, rouge_f1, value_errors
from rcstat.generation import input_device, stop_token_ids
from rcstat.models.cache_argument import with_cache
from rcstat.press.answer import answer_on_cache, attention_for, prefill, split_prompt

CacheFactory = Callable[[], Any]


@dataclass(frozen=True)
class KVResult:
    """Per-example outcome of one press."""

    realized_ratio: float
    ver: float
    ver_count: int
    answer: str
    full_answer: str
    finished: bool  # the compressed-cache answer ended by itself (not cut at the limit)
    full_finished: bool
    rouge1: float
    rougeL: float
    rouge1_vs_full: float
    rougeL_vs_full: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _teacher_forced_outputs(
    model: Any, cache: Any, question: torch.Tensor, answer: list[int], start: int
) -> torch.Tensor:
    """Last-layer head outputs at the answer positions, ``[|g|, heads, dim]``."""
    tokens = torch.cat([question, torch.tensor([answer], device=question.device)], dim=1)
    positions = torch.arange(start, start + tokens.shape[1], device=tokens.device).unsqueeze(0)
    with torch.no_grad(), attention_for(model, cache), head_outputs(model) as recorded:
        model(tokens, **with_cache(model, cache), position_ids=positions)
    return recorded[-1][0, question.shape[1] :]


def realized_ratio(press: Any, cache: Any, context_len: int) -> float:
    """Evicted / all KV entries of the context after prefill: from RCStatPress itself, from
    AdaKV's head-wise budget (it masks rather than removes), else from the cache's length."""
    from kvpress import AdaKVPress

    measured = getattr(press, "realized_ratio", None)
    if callable(measured):
        return float(measured())
    if isinstance(press, AdaKVPress):
        return 1.0 - int(context_len * (1 - press.compression_ratio)) / context_len
    kept = sum(int(layer.keys.shape[2]) for layer in cache.layers)
    return 1.0 - kept / (len(cache.layers) * context_len)


@dataclass(frozen=True)
class FullReference:
    """What every press of one example is compared with: the tokens, the full-cache greedy
    answer ``g`` and the last layer's head outputs with ``g`` teacher-forced (full cache)."""

    context_ids: torch.Tensor  # [1, m]
    question_ids: torch.Tensor  # [1, q]
    answer_ids: list[int]
    answer: str
    finished: bool
    outputs: torch.Tensor  # [|g|, heads, dim]
    stops: frozenset[int]
    question_tokens: int = 0  # the question's tokens at the end of context_ids (query-aware)


def full_reference(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    *,
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS,
    placement: str = "context",
) -> FullReference:
    """Steps 1–2 of the module doc with the full cache (shared by every press of an example);
    ``placement`` says where the prompt is cut (:func:`rcstat.press.answer.split_prompt`)."""
    device = input_device(model)
    split = split_prompt(tokenizer, context, question, placement=placement)
    context_ids, question_ids = split.compressed.to(device), split.rest.to(device)
    stops = stop_token_ids(model, tokenizer)
    start = context_ids.shape[1]
    full = DynamicCache()
    prefill(model, context_ids, None, full)
    forced = copy.deepcopy(full)  # one prefill, two continuations
    generated = answer_on_cache(model, full, question_ids, max_new_tokens, stops, start)
    answer_ids = generated.ids
    if not answer_ids:
        raise ValueError("the model's full-cache answer is empty: VER needs generated tokens")
    outputs = _teacher_forced_outputs(model, forced, question_ids, answer_ids, start)
    answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
    return FullReference(
        context_ids,
        question_ids,
        answer_ids,
        answer,
        generated.finished,
        outputs,
        stops,
        split.question_tokens,
    )


def evaluate_example(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    references: Sequence[str],
    press: Any,
    *,
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS,
    cache_factory: CacheFactory = DynamicCache,
    full: FullReference | None = None,
) -> KVResult:
    """Run one example through the full cache and through ``press`` (see the module doc).

    ``full`` is :func:`full_reference` of the same example and ``max_new_tokens``, computed
    once and shared by every press (recomputed when absent)."""
    if full is None:
        full = full_reference(model, tokenizer, context, question, max_new_tokens=max_new_tokens)
    context_ids, question_ids = full.context_ids, full.question_ids
    start = context_ids.shape[1]

    compressed = cache_factory()
    prefill(model, context_ids, press, compressed)
    ratio = realized_ratio(press, compressed, context_ids.shape[1])
    # one prefill, two continuations (a masking press's module masks stay set for both)
    answering = copy.deepcopy(compressed)
    errors = value_errors(
        full.outputs,
        _teacher_forced_outputs(model, compressed, question_ids, full.answer_ids, start),
    )
    generated = answer_on_cache(model, answering, question_ids, max_new_tokens, full.stops, start)
    answer = tokenizer.decode(generated.ids, skip_special_tokens=True)
    vs_data = (
        rouge_f1(answer, references)
        if references
        else {"rouge1": float("nan"), "rougeL": float("nan")}
    )
    vs_full = rouge_f1(answer, [full.answer])
    return KVResult(
        realized_ratio=ratio,
        ver=float(errors.mean()),
        ver_count=int(errors.numel()),
        answer=answer,
        full_answer=full.answer,
        finished=generated.finished,
        full_finished=full.finished,
        rouge1=vs_data["rouge1"],
        rougeL=vs_data["rougeL"],
        rouge1_vs_full=vs_full["rouge1"],
        rougeL_vs_full=vs_full["rougeL"],
    )
