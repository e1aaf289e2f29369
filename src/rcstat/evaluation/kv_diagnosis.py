"""Where a press loses what the full-cache answer needed (press investigation, paper §5.2).

The KV benchmark reports one number per example and press: the value error rate (VER) at the
last layer. This module opens it up, for one example and any presses, layer by layer and KV
head by KV head:

- **realized ratio** per layer and KV head: the share of the context's entries evicted;
- **lost attention**: with the full cache and the reference answer ``g`` teacher-forced, the
  attention weight that ``g``'s queries put on the entries a head evicts, averaged over the
  positions of ``g`` and the query heads sharing the KV head. ``1 − lost`` is what the head
  still sees of what the full-cache answer read;
- **VER by layer**: the VER formula applied to every layer's head outputs (every layer
  compressed), so that one sees where the error starts and how it grows;
- **VER alone**: the last layer's VER when only that one layer is compressed (the others keep
  the full cache), the part of the error a layer causes on its own.

Evictions are read from the press itself: kvpress's masking presses (and RCStatPress on a
plain cache) record ``masked_key_indices``, truncating presses leave fewer keys, which are
matched to their positions among the full cache's keys. Every VER here is computed on the
full cache by an exact attention (float64 scores) that leaves out each head's evicted
entries, which gives the attention outputs of removing them (the tests check it against
:mod:`rcstat.evaluation.kv`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import DynamicCache
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from rcstat.capture import attention_probs, capture_scores, grouped_scores, softmax_params
from rcstat.capture.switch import switched_attention
from rcstat.defaults import DATASET_MAX_NEW_TOKENS
from rcstat.evaluation.kv import FullReference, full_reference
from rcstat.evaluation.metrics import head_outputs, value_errors
from rcstat.models.cache_argument import with_cache
from rcstat.press.answer import prefill

__all__ = ["Diagnosis", "PressDiagnosis", "answer_attention", "diagnose", "kept_entries"]


@dataclass(frozen=True)
class PressDiagnosis:
    """One press on one example (see the module doc)."""

    keep: torch.Tensor  # [layers, kv_heads, m] bool: the context entries each head kept
    lost_attention: torch.Tensor  # [layers, kv_heads] float64
    ver_by_layer: torch.Tensor  # [layers] float64, every layer compressed
    ver_alone: torch.Tensor  # [layers] float64, last layer's VER with only that layer compressed

    @property
    def ver(self) -> float:
        """The benchmark's VER: the last layer's, every layer compressed."""
        return float(self.ver_by_layer[-1])

    @property
    def head_ratios(self) -> torch.Tensor:
        """``[layers, kv_heads]`` float64: evicted share of the context per head."""
        return 1.0 - self.keep.double().mean(-1)


@dataclass(frozen=True)
class Diagnosis:
    """Every press on one example, with what they share."""

    reference: FullReference
    attention: torch.Tensor  # [layers, kv_heads, m] float64: the answer's full-cache attention
    presses: dict[str, PressDiagnosis]


def _attention_modules(model: Any) -> list[Any]:
    return [layer.self_attn for layer in cast(Any, model).model.layers]


def _keys(cache: DynamicCache, layer: int) -> torch.Tensor:
    """``[batch, kv_heads, length, dim]``: a filled layer's keys."""
    return cast(torch.Tensor, cache.layers[layer].keys)


def answer_attention(model: Any, reference: FullReference) -> torch.Tensor:
    """``[layers, kv_heads, m]`` float64: the full-cache attention weight of the reference
    answer's queries on each context entry, averaged over answer positions and over the query
    heads of each KV head (the question and the answer itself take the rest of each row)."""
    context, question = reference.context_ids, reference.question_ids
    answer = torch.tensor([reference.answer_ids], device=context.device)
    tokens = torch.cat([context, question, answer], dim=1)  # [1, m + q + |g|]
    m, start = context.shape[1], context.shape[1] + question.shape[1]
    params = softmax_params(model)
    kv_heads = int(model.config.num_key_value_heads)
    positions = torch.arange(start, tokens.shape[1])

    def reduce(layer: int, scores: torch.Tensor) -> torch.Tensor:
        probs = attention_probs(scores, positions, params[layer])  # [1, H, |g|, T]
        per_head = probs[0, :, :, :m].double().mean(1)  # [H, m]
        return per_head.view(kv_heads, -1, m).mean(1).cpu()  # [Hkv, m]

    with torch.no_grad(), capture_scores(model, reduce, query_start=start) as captured:
        model(tokens)
    return torch.stack(captured.ordered())


def _positions_of(kept: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """``[n]`` positions of the rows of ``kept [n, D]`` among the rows of ``full [m, D]``."""
    distance = torch.cdist(kept.double(), full.double())  # [n, m]
    best, where = distance.min(-1)
    scale = full.double().norm(dim=-1).max().clamp_min(1.0)
    if bool((best > 1e-5 * scale).any()):
        raise ValueError("a kept key matches no key of the full cache: the press changed keys")
    return where


def kept_entries(model: Any, context: torch.Tensor, press: Any, full: DynamicCache) -> torch.Tensor:
    """``[layers, kv_heads, m]`` bool: which context entries ``press`` keeps per KV head.

    ``context`` ``[1, m]`` is prefilled into a plain cache under the press; ``full`` holds the
    same context's uncompressed cache (to place the keys a truncating press kept)."""
    cache = DynamicCache()
    prefill(model, context, press, cache)
    m = context.shape[1]
    masks: list[torch.Tensor] = []
    for layer, module in enumerate(_attention_modules(model)):
        keys = _keys(cache, layer)  # [1, Hkv, n, D]
        keep = torch.ones(keys.shape[1], m, dtype=torch.bool)
        masked = getattr(module, "masked_key_indices", None)
        if masked is not None:  # masking press: every key is still there
            _, heads, where = (index.cpu() for index in masked)
            keep[heads, where] = False
        elif keys.shape[2] < m:  # truncating press
            keep[:] = False
            reference = _keys(full, layer)
            for head in range(keys.shape[1]):
                keep[head, _positions_of(keys[0, head], reference[0, head, :m])] = True
        masks.append(keep)
        module.masked_key_indices = None
    return torch.stack(masks)


def _masked_attention(keep: Mapping[int, torch.Tensor]) -> Callable[..., Any]:
    """An attention function computing softmax attention exactly (float64 scores), with the
    context entries ``keep[layer]`` ``[Hkv, m]`` lacks removed from each KV head's keys."""

    def attention(
        module: Any,
        query: torch.Tensor,  # [B, Hq, q, D]
        key: torch.Tensor,  # [B, Hkv, k, D]
        value: torch.Tensor,  # [B, Hkv, k, D]
        attention_mask: torch.Tensor | None,
        dropout: float = 0.0,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        group = query.shape[1] // key.shape[1]
        scores = grouped_scores(query, key).double() * float(module.scaling)  # [B, Hq, q, k]
        rows, columns = scores.shape[-2:]
        visible = torch.ones(rows, columns, dtype=torch.bool, device=scores.device).tril(
            columns - rows
        )  # query row r sits at position k - q + r
        visible = visible.expand(scores.shape[1], rows, columns).clone()  # [Hq, q, k]
        mask = keep.get(int(module.layer_idx))
        if mask is not None:
            m = mask.shape[-1]
            visible[:, :, :m] &= mask.to(scores.device).repeat_interleave(group, 0)[:, None, :]
        probs = scores.masked_fill(~visible, float("-inf")).softmax(-1)
        values = value.double().repeat_interleave(group, 1)  # [B, Hq, k, D]
        output = (probs @ values).to(query.dtype)  # [B, Hq, q, D]
        return output.transpose(1, 2).contiguous(), None

    return attention


def _masked_outputs(
    model: Any, full: DynamicCache, reference: FullReference, keep: Mapping[int, torch.Tensor]
) -> list[torch.Tensor]:
    """Every layer's head outputs ``[|g|, H, D]`` at the answer positions, the reference answer
    teacher-forced on ``full`` with the entries ``keep[layer]`` ``[Hkv, m]`` lacks removed."""
    question = reference.question_ids
    answer = torch.tensor([reference.answer_ids], device=question.device)
    tokens = torch.cat([question, answer], dim=1)
    m = reference.context_ids.shape[1]
    positions = torch.arange(m, m + tokens.shape[1], device=tokens.device).unsqueeze(0)
    layers = len(_attention_modules(model))
    mask = ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]  # no padding: None, the attention is causal
    try:
        with (
            torch.no_grad(),
            switched_attention(model, "rcstat-masked", _masked_attention(keep), mask),
            ExitStack() as stack,
        ):
            recorded = [stack.enter_context(head_outputs(model, i)) for i in range(layers)]
            model(tokens, **with_cache(model, full), position_ids=positions)
    finally:
        full.crop(m)
    return [r[-1][0, question.shape[1] :] for r in recorded]


def diagnose(
    model: Any,
    tokenizer: Any,
    context: str,
    question: str,
    presses: Mapping[str, Any],
    *,
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS,
) -> Diagnosis:
    """Diagnose every press of ``presses`` (name → kvpress press) on one example."""
    if not presses:
        raise ValueError("give at least one press to diagnose")
    reference = full_reference(model, tokenizer, context, question, max_new_tokens=max_new_tokens)
    attention = answer_attention(model, reference)  # [L, Hkv, m]
    full = DynamicCache()
    prefill(model, reference.context_ids, None, full)
    baseline = _masked_outputs(model, full, reference, {})
    layers = len(baseline)
    found: dict[str, PressDiagnosis] = {}
    for name, press in presses.items():
        keep = kept_entries(model, reference.context_ids, press, full)  # [L, Hkv, m]
        lost = (attention * (~keep).double()).sum(-1)  # [L, Hkv]
        every = _masked_outputs(model, full, reference, dict(enumerate(keep)))
        ver_by_layer = torch.stack(
            [value_errors(b, c).mean() for b, c in zip(baseline, every, strict=True)]
        )
        alone = torch.stack(
            [
                value_errors(
                    baseline[-1], _masked_outputs(model, full, reference, {i: keep[i]})[-1]
                ).mean()
                for i in range(layers)
            ]
        )
        found[name] = PressDiagnosis(keep, lost, ver_by_layer, alone)
    return Diagnosis(reference, attention, found)
