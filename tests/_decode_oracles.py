"""Ragged layouts and an obvious attention oracle for the split-KV decode kernel's tests
(``tests/decode_kernel_cases.py`` under the interpreter, ``tests/test_press_decode_kernel.py``
on a GPU)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rcstat.press import PackedKV
from rcstat.press.layout import pack_rows


def ragged_layout(
    seg_len: list[int],
    room: int,
    dim: int,
    gen: torch.Generator,
    *,
    kv_heads: int,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> PackedKV:
    """A packed layer with the given live lengths (0 allowed) and ``room`` free rows each; the
    room holds large garbage, which the kernel must never read. Built on the CPU in float32,
    then moved to ``device`` / ``dtype``."""
    lengths = torch.tensor(seg_len)
    live = int(lengths.sum())
    segment = torch.repeat_interleave(torch.arange(len(seg_len)), lengths)  # [N]
    rank = torch.arange(live) - (torch.cumsum(lengths, 0) - lengths)[segment]
    keys, values = (torch.randn(live, dim, generator=gen) for _ in "kv")
    max_len = max(seg_len)
    packed = pack_rows(
        keys,
        values,
        torch.arange(live),
        segment,
        rank,  # positions: the live entries are the oldest ones, all visible
        lengths,
        room=room,
        batch=len(seg_len) // kv_heads,
        kv_heads=kv_heads,
        length=max(max_len, 1),
        max_len=max_len,
        appended=0,
        padding_free=False,
    )
    for s in range(len(seg_len)):  # garbage in the room: masks, not zeros, must keep it out
        end = int(packed.seg_start[s + 1])
        packed.keys[end - room : end] = 1e3  # (finite: the padded reference gathers row 0)
        packed.values[end - room : end] = -1e3
    return dataclasses.replace(
        packed,
        keys=packed.keys.to(device, dtype),
        values=packed.values.to(device, dtype),
        positions=packed.positions.to(device),
        seg_start=packed.seg_start.to(device),
        seg_len=packed.seg_len.to(device),
        clock=packed.clock.to(device),
    )


def naive_attention(query: torch.Tensor, packed: PackedKV, scaling: float) -> torch.Tensor:
    """One softmax per (segment, head) over the segment's live rows, in float64 on the CPU;
    zeros for an empty segment. ``[batch, 1, heads, dim]``."""
    query = query.cpu()
    packed = dataclasses.replace(
        packed,
        **{
            name: getattr(packed, name).cpu() for name in ("keys", "values", "seg_start", "seg_len")
        },
    )
    batch, heads, _, dim = query.shape
    group = heads // packed.kv_heads
    out = torch.zeros(batch, 1, heads, dim, dtype=torch.float64)
    for s in range(batch * packed.kv_heads):
        b, kv_head = divmod(s, packed.kv_heads)
        start, n = int(packed.seg_start[s]), int(packed.seg_len[s])
        keys = packed.keys[start : start + n].double()
        values = packed.values[start : start + n].double()
        for head in range(kv_head * group, (kv_head + 1) * group):
            if n == 0:
                continue
            scores = keys @ query[b, head, 0].double() * scaling  # [n]
            weights = torch.exp(scores - scores.max())
            out[b, 0, head] = weights @ values / weights.sum()
    return out


def decode_logits(
    model: torch.nn.Module,
    cache: object,
    question: torch.Tensor,
    tokens: list[torch.Tensor],
    steps: int,
) -> torch.Tensor:
    """The logits of ``question`` then ``steps`` decode steps on ``cache`` (inside whatever
    attention context the caller set): greedy when ``tokens`` is empty (the tokens chosen are
    appended to it), else forced to ``tokens``."""
    forced = bool(tokens)
    logits = [model(question, past_key_values=cache).logits]
    for step in range(steps):
        if not forced:
            tokens.append(logits[-1][:, -1:].argmax(-1))
        logits.append(model(tokens[step], past_key_values=cache).logits)
    return torch.cat(logits, 1).float()


def greedy_options(steps: int) -> dict[str, Any]:
    """``generate`` keywords: exactly ``steps`` greedy tokens, with every step's logits."""
    return {
        "max_new_tokens": steps,
        "min_new_tokens": steps,
        "do_sample": False,
        "pad_token_id": 0,
        "return_dict_in_generate": True,
        "output_logits": True,
    }


def padded_generate(
    model: torch.nn.Module, rows: list[torch.Tensor], backend: str | None, steps: int
) -> object:
    """Greedy ``generate`` of a left-padded batch of ``rows`` (1-D ids of different lengths):
    on a ``DynamicCache`` when ``backend`` is None, else on a ragged cache holding every real
    prompt entry (told the padding, so it stores none) with ``ragged_attention(backend)``; every
    step is then one query per head (the prompt but its last token is prefilled first)."""
    from transformers import DynamicCache

    from rcstat.generation import left_pad, padded_positions
    from rcstat.press import RaggedCache, ragged_attention

    ids, mask = left_pad(rows)
    options = greedy_options(steps)
    with torch.no_grad():
        if backend is None:
            return model.generate(
                ids, attention_mask=mask, past_key_values=DynamicCache(), **options
            )
        config = model.config
        cache = RaggedCache(slack=3)  # repacks during the generation too
        head = mask[:, :-1]
        model(
            ids[:, :-1],
            attention_mask=head,
            position_ids=padded_positions(head),
            past_key_values=cache,
        )
        keep = torch.ones(
            len(rows),
            config.num_key_value_heads,
            ids.shape[1] - 1,
            dtype=torch.bool,
            device=ids.device,
        )
        for layer in range(config.num_hidden_layers):
            cache.compress_layer(layer, keep, attention_mask=head)
        with ragged_attention(model, backend=backend):  # type: ignore[arg-type]
            return model.generate(ids, attention_mask=mask, past_key_values=cache, **options)
