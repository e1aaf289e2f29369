"""One layer's contribution to attribution, reduced from its generation block (eq. 10).

For one layer the capture yields the raw scores of the generated queries against every key,
``block[h, j, i] = f(i, m + j)`` (``m`` = prompt length, ``j < |g|``). From it, for every
query head ``h``:

* the head's ranking scores over the whole sequence (paper §4.2 step 1): ``E(X(p, g),
  Y(g, g))`` and the upper bound ``A`` on raw scores, and the same two on the post-softmax
  weights (supplement Table 2);
* per answer unit ``g'`` (token rows ``[a, b)`` of ``g``) and per prompt key ``i``, the
  *key-level expected RC*

  ``t_h(g', i) = (1 / (|g'|·|Y|)) Σ_{j ∈ g'} Σ_{y ∈ Y} max(f(i, j) − y, 0)``,
  with ``Y = Y(g, g') = {f(k, l) : k ∈ g, l ∈ g', k <= l}``.

  Because every key of a span meets the same ``|g'|`` queries, the step-2 score of a span is
  the mean of its keys' values: ``e_h(p_i) = E(X(p_i, g'), Y(g, g')) = mean_{i ∈ p_i}
  t_h(g', i)``. One sort of ``Y`` and one ``searchsorted`` of the ``|g'|·m`` cross scores
  serve chunks, sentences and single tokens at once;
* with the upper-bound statistic, ``A(X(p_i, g'), Y(g, g'))`` per candidate span (the bound
  does not decompose over keys, so spans are scored directly);
* the post-softmax attention of the unit's queries to each prompt key, summed over heads
  (the attention-weight baseline).

When the only unit is the whole answer (a one-sentence answer), ``Y(g, g') = Y(g, g)`` and
the head's ranking score is the mean of its keys' values, ``E(X(p, g), Y(g, g)) = mean_{i ∈ p}
t_h(g, i)``: the cross samples are ranked once, not twice. With several units the tensor path
ranks them once too: ``Y(g, g')`` is the part of ``Y(g, g)`` in the unit's rows, so a sample's
rank among the head's self samples gives its rank among the unit's
(:func:`~rcstat.stats.block_units_expected`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rcstat.attribution.fused import (
    UnitOrder,
    fused_attribution,
    fused_serves,
    row_segments,
    unit_order,
)
from rcstat.capture import SoftmaxParams, attention_probs
from rcstat.capture.host import upload
from rcstat.stats import (
    UnitRows,
    block_expected,
    block_statistics,
    block_units_expected,
    rc_statistics,
    unit_rows,
    units_key_expected,
)

__all__ = ["attribution_reducer"]


def _span_upper(
    cross: torch.Tensor,
    y: torch.Tensor,
    y_valid: torch.Tensor,
    spans: Sequence[tuple[int, int]],
) -> torch.Tensor:
    """``A(X(p_i, g'), Y)`` for every span: cross ``[H, |g'|, m]``, y ``[H, Y]`` with its
    padding mask ``y_valid`` ``[Y]`` → ``[H, S]``."""
    longest = max(end - start for start, end in spans)
    heads, rows = cross.shape[0], cross.shape[1]
    x = cross.new_zeros(heads, len(spans), rows, longest)  # [H, S, |g'|, L]
    valid = torch.zeros(len(spans), rows, longest, dtype=torch.bool, device=cross.device)
    for index, (start, end) in enumerate(spans):
        x[:, index, :, : end - start] = cross[:, :, start:end]
        valid[index, :, : end - start] = True
    flat = x.flatten(-2)  # [H, S, |g'|·L]
    shape = (heads, len(spans), y.shape[-1])
    return rc_statistics(
        flat,
        y[:, None, :].expand(shape),
        x_valid=valid.flatten(-2).expand_as(flat),
        y_valid=y_valid.expand(shape),
        check_finite=False,  # the capture checks the scores
    ).upper


def _ranking(block: torch.Tensor, prompt_len: int, upper: bool) -> list[torch.Tensor | None]:
    """``[E, A]`` per head of ``X(p, g)`` vs ``Y(g, g)`` (``A`` None unless ``upper``)."""
    if upper:
        stats = block_statistics(block, prompt_len, check_finite=False, lower=False)
        return [stats.expected, stats.upper]
    return [block_expected(block, prompt_len, check_finite=False), None]  # [H]


def _tensor_path(
    block: torch.Tensor,
    prompt_len: int,
    rows: UnitRows,
    params: SoftmaxParams,
    *,
    upper: bool,
    post_softmax: bool,
    rank_heads: bool,
) -> tuple[list[torch.Tensor | None], torch.Tensor, torch.Tensor]:
    """``(rank, t, attention)`` of one layer by tensor operations (every device and option):
    the ranking rows of :func:`attribution_reducer` (None where not computed: the raw
    ranking without ``rank_heads``), the units' key-level RC over the prompt ``[U, H, m]``
    float64 and their mean weights summed over heads ``[U, m]`` float32."""
    gen_len = block.shape[1]
    positions = torch.arange(prompt_len, prompt_len + gen_len, device=block.device)
    probs = attention_probs(block, positions, params)  # [H, |g|, m + |g|]
    rank: list[torch.Tensor | None] = [None, None]
    if rank_heads and not upper:  # the head's ranking and its units' values in one go
        expected, per_key = block_units_expected(
            block, prompt_len, rows, (0, prompt_len), check_finite=False
        )  # [H], [U, H, m]
        rank = [expected, None]
    else:
        per_key = units_key_expected(block, rows, (0, prompt_len), check_finite=False)
        if rank_heads:
            rank = _ranking(block, prompt_len, upper)
    rank += _ranking(probs, prompt_len, upper) if post_softmax else [None, None]
    # mean over each unit's rows of the weights summed over heads, by prefix sums
    summed = probs[:, :, :prompt_len].sum(0).double()  # [|g|, m]
    on_prompt = torch.nn.functional.pad(summed.cumsum(0), (0, 0, 1, 0))  # [|g| + 1, m]
    a, length = rows.starts, rows.lengths
    attention = ((on_prompt[a + length] - on_prompt[a]) / length[:, None]).float()  # [U, m]
    return rank, per_key, attention


def attribution_reducer(
    prompt_len: int,
    units: Sequence[tuple[int, int]],
    spans: Sequence[tuple[int, int]],
    context: tuple[int, int],
    softmax: dict[int, SoftmaxParams],
    *,
    upper: bool,
    post_softmax: bool,
) -> Any:
    """A capture reducer computing the quantities of the module doc for one layer.

    Parameters
    ----------
    prompt_len
        ``m``.
    units
        Token rows ``[a, b)`` of each answer unit, relative to the start of ``g``.
    spans
        Token ranges ``[start, end)`` of the candidate spans (absolute; inside the prompt).
    context
        Token range ``[first, last)`` of the context, whose per-key values are returned.
    softmax
        Per layer, what the model applies before its softmax.
    upper
        Rank heads and score spans with the upper bound too (else the ``A`` rows of ``rank``
        are NaN and the expected RC needs no sort of the cross samples: each of them is
        searched in the sorted self samples, as for the spans). The lower bound is never
        computed.
    post_softmax
        Also rank heads by RC of post-softmax weights (else those rows are NaN).

    Returns
    -------
    callable
        ``reducer(layer, scores [1, H, |g|, m + |g|]) -> dict`` of tensors left on the
        layer's device: ``rank`` ``[4, H]`` (E and A on raw scores, E and A on weights; NaN
        where not computed), ``token_scores`` ``[U, H, C]`` float32 (``t_h`` of the context
        keys), ``per_head`` ``[U, H, S]`` float64 (each span's mean ``t_h``, or its ``A``
        with ``upper``) and ``attention`` ``[U, m]`` (weights summed over heads, averaged
        over the unit's queries).
    """
    starts, ends = (torch.tensor(v) for v in zip(*spans, strict=True))
    first, last = context
    fused = not upper and not post_softmax  # the kernel serves the default statistic
    on_device: dict[
        torch.device,
        tuple[torch.Tensor, torch.Tensor, UnitRows, torch.Tensor, UnitOrder | None],
    ] = {}

    def reduce(layer: int, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        block = scores[0]  # [H, |g|, m + |g|]
        device = block.device
        gen_len = block.shape[1]
        if device not in on_device:  # a model may span devices
            if max(b for _, b in units) > gen_len:
                raise ValueError(
                    f"units end past the block's {gen_len} generated rows: "
                    f"{[u for u in units if u[1] > gen_len]}"
                )
            rows = unit_rows(list(units), block.shape[-1], prompt_len)
            moved = rows.map(lambda t: upload(t, device))
            segments = torch.from_numpy(row_segments(units, gen_len))
            placed = unit_order(units, gen_len) if fused and fused_serves(block) else None
            on_device[device] = (
                upload(starts, device),
                upload(ends, device),
                moved,
                upload(segments, device),
                None if placed is None else placed.map(lambda t: upload(t, device)),
            )
        start, end, rows, segments, placed = on_device[device]
        whole = not upper and len(units) == 1 and tuple(units[0]) == (0, gen_len)
        rank: list[torch.Tensor | None]
        if fused and fused_serves(block):
            expected, per_key, attention = fused_attribution(
                block,
                prompt_len,
                segments,
                rows,
                softmax[layer],
                rank_heads=not whole,
                placed=placed,
            )  # [H], [U, H, m], [U, m]
            rank = [expected, None, None, None]
        else:
            rank, per_key, attention = _tensor_path(
                block,
                prompt_len,
                rows,
                softmax[layer],
                upper=upper,
                post_softmax=post_softmax,
                rank_heads=not whole,
            )
        if whole:  # Y(g, g') = Y(g, g): each head's E is the mean of its keys' values
            rank[0] = per_key[0].mean(-1)
        nan = torch.full((block.shape[0],), float("nan"), dtype=torch.float64, device=device)
        if upper:
            flat = block.reshape(block.shape[0], -1)  # [H, |g|·(m + |g|)]
            per_head = torch.stack(
                [
                    _span_upper(block[:, a:b, :prompt_len], flat[:, index], valid, spans)
                    for (a, b), index, valid in zip(units, rows.index, rows.valid, strict=True)
                ]
            )  # [U, H, S]
        else:  # e_h(p_i) = the mean of the span's per-key values, by prefix sums
            prefix = torch.nn.functional.pad(per_key.cumsum(-1), (1, 0))  # [U, H, m + 1]
            per_head = (prefix[..., end] - prefix[..., start]) / (end - start)  # [U, H, S]
        return {
            "rank": torch.stack([nan if r is None else r for r in rank]),  # [4, H]
            "token_scores": per_key[..., first:last].float(),  # [U, H, C]
            "per_head": per_head,  # [U, H, S]
            "attention": attention,  # [U, m]
        }

    return reduce
