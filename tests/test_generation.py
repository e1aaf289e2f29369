"""rcstat.generation: left padding, position ids and batched greedy decoding against a
cache-free greedy loop of each row alone."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from rcstat.generation import greedy, greedy_batch, left_pad, padded_positions
from tests._tiny_models import tiny_model


def test_left_pad_and_positions_by_hand() -> None:
    ids, mask = left_pad([torch.tensor([5, 6, 7]), torch.tensor([9])])
    assert ids.tolist() == [[5, 6, 7], [0, 0, 9]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert padded_positions(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    assert padded_positions(mask, [10, 4]).tolist() == [[10, 11, 12], [4, 4, 4]]
    with pytest.raises(ValueError, match="non-empty 1-D"):
        left_pad([torch.tensor([1]), torch.tensor([], dtype=torch.long)])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        left_pad([])


def _alone(model: torch.nn.Module, ids: list[int], steps: int, stops: set[int]) -> list[int]:
    """Greedy without a cache: the whole sequence through the model at every step."""
    out: list[int] = []
    for _ in range(steps):
        token = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
        if token in stops:
            break
        out.append(token)
    return out


def test_greedy_batch_equals_each_row_alone() -> None:
    """Rows with different cached prefixes and prompts, one stopping early: each gets its own
    cache-free greedy continuation, and the finished flags say which stopped."""
    torch.set_num_threads(1)
    model = tiny_model("llama")
    gen = torch.Generator().manual_seed(5)
    prefixes = [torch.randint(3, 600, (n,), generator=gen) for n in (9, 4, 6)]
    prompts = [torch.randint(3, 600, (n,), generator=gen) for n in (2, 5, 1)]
    steps = 7
    with torch.no_grad():
        whole = [torch.cat([p, q]).tolist() for p, q in zip(prefixes, prompts, strict=True)]
        free = [_alone(model, row, steps, set()) for row in whole]
        stops = {free[1][2]}  # row 1 stops at its third token
        wants = [_alone(model, row, steps, stops) for row in whole]
        ids, mask = left_pad(prefixes)
        cache = DynamicCache()
        model(ids, attention_mask=mask, position_ids=padded_positions(mask), past_key_values=cache)
        got = greedy_batch(model, cache, prompts, steps, stops, [9, 4, 6], mask)
    for row, (result, want) in enumerate(zip(got, wants, strict=True)):
        assert result.ids == want, row
        assert result.finished == (len(want) < steps), row
    assert got[1].finished and got[1].ids == free[1][:2]


def test_greedy_is_the_one_row_batch() -> None:
    model = tiny_model("qwen2")
    ids = torch.randint(3, 600, (1, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        cache = DynamicCache()
        model(ids[:, :5], past_key_values=cache)
        got = greedy(model, cache, ids[:, 5:], 5, set(), start=5)
        want = _alone(model, ids[0].tolist(), 5, set())
    assert got.ids == want and not got.finished
    with pytest.raises(ValueError, match="3 prompts need 3 starts"):
        greedy_batch(model, DynamicCache(), [ids[0]] * 3, 2, set(), [0, 0])
