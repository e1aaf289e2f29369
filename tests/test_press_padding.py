"""Padded batches on rcstat.press.cache / attention: a left-padded batch with different prompts,
different kept entries per (sequence, KV head) and padding inside the continuation decodes
like each sequence alone, without storing padding and without a mask on the packed layers."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import rcstat.press.attention as attention_module
from rcstat.press import RaggedCache, ragged_attention
from tests._tiny_models import one_thread, tiny_model

ATOL = 1e-4
PROMPTS = (16, 11, 7)  # real prompt lengths of the batch's rows (left-padded to 16)
QUESTIONS = (3, 5, 1)  # real continuation lengths (left-padded to 5: padding in the middle)
STEPS = 6


_one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


def _rows(seed: int, kv_heads: int, layers: int) -> list[dict[str, Any]]:
    """Per row: prompt ids, question ids, forced decode tokens and each layer's keep over its
    real prompt (different counts per head, the last token kept)."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for prompt, question in zip(PROMPTS, QUESTIONS, strict=True):
        keeps = []
        for _ in range(layers):
            keep = torch.rand(kv_heads, prompt, generator=gen) < 0.5
            keep[:, -1] = True
            keeps.append(keep)
        rows.append(
            {
                "prompt": torch.randint(3, 600, (prompt,), generator=gen),
                "question": torch.randint(3, 600, (question,), generator=gen),
                "tokens": torch.randint(3, 600, (STEPS,), generator=gen),
                "keeps": keeps,
            }
        )
    return rows


def _left_pad(parts: list[torch.Tensor], fill: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, W], mask [B, W])`` with every part right-aligned."""
    width = max(int(p.numel()) for p in parts)
    ids = torch.full((len(parts), width), fill, dtype=torch.long)
    mask = torch.zeros(len(parts), width, dtype=torch.long)
    for b, part in enumerate(parts):
        ids[b, width - part.numel() :] = part
        mask[b, width - part.numel() :] = 1
    return ids, mask


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """Each real token's index among its row's real tokens (as generate computes them)."""
    return (mask.cumsum(1) - 1).clamp_min(0)


def _solo(model: Any, row: dict[str, Any]) -> torch.Tensor:
    """One sequence alone, unpadded: logits ``[q + steps, vocab]`` of the question and steps."""
    cache = RaggedCache(slack=2)
    with torch.no_grad(), ragged_attention(model, backend="reference"):
        model(row["prompt"][None], past_key_values=cache)
        for layer, keep in enumerate(row["keeps"]):
            cache.compress_layer(layer, keep[None])
        logits = [model(row["question"][None], past_key_values=cache).logits[0]]
        for token in row["tokens"]:
            logits.append(model(token.view(1, 1), past_key_values=cache).logits[0])
    return torch.cat(logits)


def _batched(
    model: Any, rows: list[dict[str, Any]], known: bool, calls: list[Any]
) -> tuple[torch.Tensor, RaggedCache]:
    """The rows as one left-padded batch; ``known``: the padding is given to the cache."""
    ids, mask = _left_pad([r["prompt"] for r in rows])
    width = ids.shape[1]
    keeps = []
    for layer in range(model.config.num_hidden_layers):
        keep = torch.ones(len(rows), model.config.num_key_value_heads, width, dtype=torch.bool)
        for b, row in enumerate(rows):  # padding marked kept: the cache must evict it anyway
            keep[b, :, width - row["prompt"].numel() :] = row["keeps"][layer]
        keeps.append(keep if known else keep & mask.bool()[:, None])
    question, question_mask = _left_pad([r["question"] for r in rows])
    cache = RaggedCache(slack=2)
    with torch.no_grad(), ragged_attention(model, backend="reference"):
        model(ids, attention_mask=mask, position_ids=_positions(mask), past_key_values=cache)
        for layer, keep in enumerate(keeps):
            cache.compress_layer(layer, keep, attention_mask=mask if known else None)
        calls.clear()
        full = torch.cat([mask, question_mask], 1)
        positions = _positions(full)[:, -question.shape[1] :]
        logits = [
            model(question, attention_mask=full, position_ids=positions, past_key_values=cache)
        ]
        for step in range(STEPS):
            full = torch.cat([full, torch.ones(len(rows), 1, dtype=torch.long)], 1)
            tokens = torch.stack([r["tokens"][step] for r in rows]).view(-1, 1)
            positions = _positions(full)[:, -1:]
            logits.append(
                model(tokens, attention_mask=full, position_ids=positions, past_key_values=cache)
            )
    return torch.cat([out.logits for out in logits], 1), cache


@pytest.fixture
def mask_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The ``mask`` argument of every packed_attention call."""
    calls: list[Any] = []
    original = attention_module.packed_attention

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(kwargs.get("mask"))
        return original(*args, **kwargs)

    monkeypatch.setattr(attention_module, "packed_attention", spy)
    return calls


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("known", [True, False])
def test_padded_batch_decodes_like_each_sequence_alone(
    arch: str, known: bool, mask_calls: list[Any]
) -> None:
    """Known padding: evicted, never appended, no mask on the packed layers. Unknown padding
    (the cache was not told): stored and masked through the gathered mask. Both equal each
    row run alone, at every real position."""
    model = tiny_model(arch)
    rows = _rows(seed=1, kv_heads=model.config.num_key_value_heads, layers=3)
    got, cache = _batched(model, rows, known, mask_calls)
    masks = list(mask_calls)
    question_width = max(QUESTIONS)
    for b, row in enumerate(rows):
        want = _solo(model, row)
        real = got[b, question_width - QUESTIONS[b] :]  # drop the continuation's padding
        torch.testing.assert_close(real, want, rtol=0, atol=ATOL, msg=f"row {b}")
    assert len(masks) == 3 * (1 + STEPS)
    assert all((mask is None) == known for mask in masks)
    for layer in range(3):
        packed = cache.layer(layer).packed
        assert packed is not None and packed.padding_free == known
        kept = torch.stack([torch.stack([k.sum() for k in r["keeps"][layer]]) for r in rows])
        if known:  # the real tokens only: the continuation's padding was not stored
            appended = torch.tensor(QUESTIONS)[:, None] + STEPS
        else:
            appended = torch.full((len(rows), 1), question_width + STEPS)
        assert torch.equal(cache.kept_lengths(layer), kept + appended)
        live = packed.positions[packed.positions >= 0]
        assert int(live.numel()) == packed.live


def test_a_foreign_4d_mask_is_not_skipped(mask_calls: list[Any]) -> None:
    """A mask the mask function did not build (a caller's 4D mask) reaches the packed path."""
    model = tiny_model("llama")
    ids = torch.randint(3, 600, (1, 12), generator=torch.Generator().manual_seed(4))
    cache = RaggedCache(slack=2)
    with torch.no_grad(), ragged_attention(model, backend="reference"):
        model(ids, past_key_values=cache)
        for layer in range(3):
            cache.compress_layer(
                layer,
                torch.ones(1, 2, 12, dtype=torch.bool),
                attention_mask=torch.ones(1, 12, dtype=torch.bool),
            )
        mask_calls.clear()
        custom = torch.ones(1, 1, 1, 13, dtype=torch.bool)
        custom[..., 3] = False
        model(ids[:, :1], attention_mask=custom, past_key_values=cache)
    assert len(mask_calls) == 3 and all(m is not None for m in mask_calls)


def test_compress_layer_checks_the_attention_mask() -> None:
    cache = RaggedCache()
    kv = torch.randn(2, 2, 6, 4)
    cache.update(kv, kv.clone(), 0)
    keep = torch.ones(2, 2, 6, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"attention_mask is \(2, 5\)"):
        cache.compress_layer(0, keep, attention_mask=torch.ones(2, 5))
    only_padding = torch.ones(2, 6, dtype=torch.long)
    only_padding[1] = 0
    with pytest.raises(ValueError, match=r"no entry for \(batch, kv_head\) \[\(1, 0\), \(1, 1\)\]"):
        cache.compress_layer(0, keep, attention_mask=only_padding)
    assert not cache.is_packed(0)  # a refused compression changes nothing


def test_a_pass_with_its_own_mask_after_a_padded_one_stores_every_token() -> None:
    """A padded pass's record does not outlive it: a later pass with a caller's 4D mask stores
    its token in every row and leaves the layer to the masked path from then on."""
    model = tiny_model("llama")
    rows = _rows(seed=3, kv_heads=2, layers=3)
    ids, mask = _left_pad([r["prompt"] for r in rows])
    cache = RaggedCache(slack=4)
    with torch.no_grad(), ragged_attention(model, backend="reference"):
        model(ids, attention_mask=mask, position_ids=_positions(mask), past_key_values=cache)
        for layer in range(3):
            keep = torch.ones(3, 2, ids.shape[1], dtype=torch.bool)
            cache.compress_layer(layer, keep, attention_mask=mask)
        full = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
        step = torch.full((3, 1), 7)
        model(
            step, attention_mask=full, position_ids=_positions(full)[:, -1:], past_key_values=cache
        )
        before = cache.kept_lengths(0).clone()
        custom = torch.cat([full, torch.ones(3, 1, dtype=torch.long)], 1).bool()[:, None, None, :]
        model(step, attention_mask=custom, past_key_values=cache)
    assert torch.equal(cache.kept_lengths(0), before + 1)
    assert not cache.layer(0).packed.padding_free
