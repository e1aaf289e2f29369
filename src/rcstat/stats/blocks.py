"""RC sample sets taken from a block of attention scores (docs/definitions.md).

A *generation block* holds the pre-softmax scores of the generated queries against every key
up to the end of the sequence: ``scores[..., j, i] = f(i, m + j)`` for generated query ``j``
(``0 <= j < |g|``) and key position ``i`` (``0 <= i < m + |g|``), where ``m`` is the prompt
length. From it:

- cross samples ``X(p, g) = {f(i, j) : i ∈ p, j ∈ g}``  → the first ``m`` columns, all valid;
- self samples  ``Y(g, g) = {f(k, l) : k, l ∈ g, k <= l}`` → the last ``|g|`` columns, lower
  triangle including the diagonal (a mask, never ``-inf`` fills).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

import rcstat.stats._gpu as _gpu
from rcstat.stats._validate import raise_if_not_finite
from rcstat.stats.rc import (
    RCStatistics,
    expected_rc,
    expected_rc_shared,
    gpu_statistics,
    rc_statistics,
)


def _check_block(scores: torch.Tensor, prompt_len: int) -> int:
    """Return ``|g|`` after checking that ``scores`` is a generation block ``[..., g, m + g]``."""
    if not isinstance(scores, torch.Tensor) or scores.dim() < 2:
        raise ValueError("scores must be a tensor of shape [..., generated, prompt + generated]")
    gen_len, keys = scores.shape[-2], scores.shape[-1]
    if gen_len == 0:
        raise ValueError("the generation is empty: scores has no query rows")
    if prompt_len <= 0:
        raise ValueError(f"prompt_len must be positive, got {prompt_len}")
    if keys != prompt_len + gen_len:
        raise ValueError(
            f"scores has {keys} key columns but prompt_len + generated = "
            f"{prompt_len} + {gen_len} = {prompt_len + gen_len}"
        )
    return gen_len


def cross_self_samples(
    scores: torch.Tensor, prompt_len: int
) -> tuple[torch.Tensor, None, torch.Tensor, None]:
    """Split a generation block into ``(x, x_valid, y, y_valid)`` sample sets.

    Parameters
    ----------
    scores
        ``[..., g, m + g]`` pre-softmax scores of the generated queries (raw ``<q, k>``).
    prompt_len
        ``m``, the number of prompt tokens.

    Returns
    -------
    tuple
        ``x [..., g·m]`` (query-major) and ``y [..., g(g+1)/2]`` (the causal entries, key
        ``<=`` query, query-major), both dense: the masks are ``None``.
    """
    gen_len = _check_block(scores, prompt_len)
    batch = scores.shape[:-2]
    x = scores[..., :prompt_len].reshape(*batch, gen_len * prompt_len)  # [..., g·m]
    return x, None, self_samples(scores, prompt_len), None


def self_samples(scores: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The self samples ``Y(g, g)`` of a generation block ``[..., g, m + g]``.

    Returns ``[..., g(g+1)/2]`` (query-major, keys ``<=`` their query), gathered with an
    index built once per shape: boolean indexing would wait for the device.
    """
    _check_block(scores, prompt_len)
    gen_len, keys = scores.shape[-2:]
    index = _gpu.causal_index(gen_len, keys, prompt_len, scores.device)  # [g(g+1)/2]
    return scores.reshape(*scores.shape[:-2], gen_len * keys)[..., index]


def block_statistics(
    scores: torch.Tensor, prompt_len: int, *, check_finite: bool = True, lower: bool = True
) -> RCStatistics:
    """Per-head ``E(X(p, g), Y(g, g))`` and its bounds from a generation block (§2.1).

    Parameters
    ----------
    scores
        ``[..., g, m + g]`` generation block, e.g. ``[heads, g, m + g]`` for one layer.
    prompt_len
        ``m``.
    check_finite
        Raise on NaN / inf samples (see :func:`rc_statistics`). Unchecked, they make the
        results non-finite (``mean_gap`` included).
    lower
        Compute the lower bound too (see :func:`rc_statistics`). Without it, on CUDA with
        Triton, the cross samples are read in place from the block: no copy, no sort.

    Returns
    -------
    RCStatistics
        Each field float64 with shape ``scores.shape[:-2]`` (``lower`` None without
        ``lower``).
    """
    gen_len = _check_block(scores, prompt_len)
    if not lower and _gpu.available(scores):
        batch, keys = scores.shape[:-2], scores.shape[-1]
        rows = scores.reshape(-1, gen_len, keys)  # [R, g, m + g] (a view when it can be)
        y = self_samples(rows, prompt_len)
        return gpu_statistics(rows[..., :prompt_len], y, None, batch, check_finite, "scores")
    x, _, y, _ = cross_self_samples(scores, prompt_len)
    return rc_statistics(x, y, check_finite=check_finite, lower=lower)


def block_expected(
    scores: torch.Tensor, prompt_len: int, *, check_finite: bool = True
) -> torch.Tensor:
    """Per-head ``E(X(p, g), Y(g, g))`` alone, without sorting the cross samples.

    Each cross sample is searched in the sorted self samples (on CUDA with Triton, read in
    place from the block by one kernel). Arguments as in :func:`block_statistics`; returns
    float64 with shape ``scores.shape[:-2]``.
    """
    gen_len = _check_block(scores, prompt_len)
    batch = scores.shape[:-2]
    y = self_samples(scores, prompt_len)  # [..., g(g+1)/2]
    if _gpu.available(scores):
        rows = scores.reshape(-1, gen_len, scores.shape[-1])  # [R, g, m + g]
        expected = _gpu.shared_expected(
            rows[:, None, :, :prompt_len], y.reshape(rows.shape[0], -1), None
        )[:, 0]
        if check_finite:
            raise_if_not_finite(expected, "scores")
        return expected.reshape(batch)
    x = scores[..., :prompt_len].reshape(*batch, 1, gen_len * prompt_len)  # one set per head
    return expected_rc_shared(x, y, check_finite=check_finite)[..., 0]


@dataclass(frozen=True)
class UnitRows:
    """Where the self samples ``Y(g, g')`` of answer units lie in a generation block.

    ``index[u]`` holds the flat positions (in a ``[g, columns]`` block) of unit ``u``'s
    samples ``{f(k, l) : a <= l < b, k <= l}``, padded; ``valid[u]`` marks the real ones.
    ``batch[u]`` (None: 0 for every unit) is the block of a batch ``[B, H, g, columns]`` the
    unit lies in (:func:`stacked_unit_rows`). Build once per shape with :func:`unit_rows` and
    move to the block's device.
    """

    starts: torch.Tensor  # [U] int64, a
    lengths: torch.Tensor  # [U] int32, b - a
    index: torch.Tensor  # [U, Ymax] int64
    valid: torch.Tensor  # [U, Ymax] bool
    longest: int  # max(b - a)
    batch: torch.Tensor | None = None  # [U] int64

    def map(self, move: Callable[[torch.Tensor], torch.Tensor]) -> UnitRows:
        """The same rows with every tensor moved by ``move`` (e.g. to a device)."""
        return UnitRows(
            move(self.starts),
            move(self.lengths),
            move(self.index),
            move(self.valid),
            self.longest,
            None if self.batch is None else move(self.batch),
        )


def unit_rows(units: list[tuple[int, int]], columns: int, prompt_len: int) -> UnitRows:
    """:class:`UnitRows` of the units ``[a, b)`` (rows of ``g``) in a block with ``columns``
    key columns whose generated keys start at column ``prompt_len``."""
    if not units:
        raise ValueError("units is empty: give at least one [start, end) row range")
    positions = []
    for a, b in units:
        if not 0 <= a < b:
            raise ValueError(f"unit rows [{a}, {b}) are empty or negative")
        rows, keys = np.tril_indices(b)  # query-major pairs (row, key <= row)
        first = a * (a + 1) // 2  # the pairs of rows before a
        positions.append(rows[first:] * columns + prompt_len + keys[first:])
    width = max(len(p) for p in positions)
    index = np.zeros((len(units), width), dtype=np.int64)
    valid = np.zeros((len(units), width), dtype=bool)
    for u, found in enumerate(positions):
        index[u, : len(found)] = found
        valid[u, : len(found)] = True
    starts = torch.tensor([a for a, _ in units])
    lengths = torch.tensor([b - a for a, b in units], dtype=torch.int32)
    return UnitRows(
        starts,
        lengths,
        torch.from_numpy(index),
        torch.from_numpy(valid),
        longest=int(lengths.max()),
    )


def stacked_unit_rows(
    parts: Sequence[UnitRows | None], columns: int, row_offset: int = 0
) -> UnitRows:
    """The units of the blocks of one batch ``[B, H, rows, columns]``: the units of
    ``parts[b]`` (from :func:`unit_rows` with these ``columns``; None: block ``b`` has none)
    in block ``b``, their rows moved down by ``row_offset`` (the blocks start that many rows
    into the batch's tensor)."""
    found = [(b, part) for b, part in enumerate(parts) if part is not None]
    if not found:
        raise ValueError("no block has units: give the units of at least one block")
    width = max(part.index.shape[1] for _, part in found)
    pad = torch.nn.functional.pad
    return UnitRows(
        torch.cat([part.starts for _, part in found]) + row_offset,
        torch.cat([part.lengths for _, part in found]),
        torch.cat(
            [
                pad(part.index + row_offset * columns, (0, width - part.index.shape[1]))
                for _, part in found
            ]
        ),
        torch.cat([pad(part.valid, (0, width - part.valid.shape[1])) for _, part in found]),
        max(part.longest for _, part in found),
        torch.cat([torch.full((len(part.starts),), b, dtype=torch.long) for b, part in found]),
    )


def _unit_blocks(rows: UnitRows, device: torch.device) -> torch.Tensor:
    """``[U]`` int64: the block of a batch each unit lies in (0 for all of one block)."""
    if rows.batch is not None:
        return rows.batch
    return torch.zeros(rows.index.shape[0], dtype=torch.long, device=device)


def unit_self_samples(scores: torch.Tensor, rows: UnitRows) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, valid)`` ``[U, H, Ymax]``: every unit's self samples ``Y(g, g')`` per head, padded,
    gathered from a block ``[H, g, columns]`` (or the blocks ``[B, H, g, columns]`` of a batch)
    with the index of :func:`unit_rows` (no boolean indexing: nothing waits for the device)."""
    blocks = scores if scores.dim() == 4 else scores[None]  # [B, H, g, columns]
    count, heads, gen_len, columns = blocks.shape
    units, width = rows.index.shape
    flat = blocks.reshape(count, heads, gen_len * columns)
    y = flat[
        _unit_blocks(rows, blocks.device)[:, None, None],
        torch.arange(heads, device=blocks.device)[None, :, None],
        rows.index[:, None, :],
    ]  # [U, H, Y]
    return y, rows.valid[:, None, :].expand(units, heads, width)


def units_key_expected(
    scores: torch.Tensor,
    rows: UnitRows,
    keys: tuple[int, int],
    *,
    check_finite: bool = True,
) -> torch.Tensor:
    """Key-level expected RC of every unit: ``t_h(g', i)`` ``[U, H, K]`` float64.

    ``t_h(g', i) = (1 / (|g'|·|Y|)) Σ_{j ∈ g'} Σ_{y ∈ Y(g, g')} max(f(i, j) − y, 0)`` for the
    keys ``i`` in ``[keys[0], keys[1])`` (paper eq. 10 before the mean over a span's keys).
    On CUDA with Triton one kernel ranks every unit's cross samples in place; elsewhere each
    unit is searched in its sorted self samples (:func:`expected_rc_shared`).

    Parameters
    ----------
    scores
        ``[H, g, m + g]`` generation block, or ``[B, H, rows, columns]`` blocks of a batch
        (``rows.batch`` says each unit's block).
    rows
        From :func:`unit_rows` (or :func:`stacked_unit_rows`) of the same shape, on the
        block's device.
    """
    blocks = scores if scores.dim() == 4 else scores[None]  # [B, H, g, columns]
    heads = blocks.shape[1]
    first, last = keys
    units, width = rows.index.shape
    device = blocks.device
    batch = _unit_blocks(rows, device)
    y, valid = unit_self_samples(scores, rows)  # [U, H, Y]
    if not _gpu.available(scores):
        out = []
        for u, (b, a, length) in enumerate(
            zip(batch.tolist(), rows.starts.tolist(), rows.lengths.tolist(), strict=True)
        ):
            cross = blocks[b, :, a : a + length, first:last].transpose(1, 2)  # [H, K, |g'|]
            out.append(expected_rc_shared(cross, y[u], y_valid=valid[u], check_finite=check_finite))
        return torch.stack(out)  # [U, H, K]
    samples = _gpu.prepared_self(
        y.reshape(units * heads, width), valid.reshape(units * heads, width)
    )
    stride_b, stride_h, stride_row, stride_key = blocks.stride()
    base = (
        batch[:, None] * stride_b
        + rows.starts[:, None] * stride_row
        + torch.arange(heads, device=device)[None, :] * stride_h
        + first * stride_key
    ).reshape(-1)  # [U·H] row (u, h) starts at key `first` of the unit's first row
    lengths = rows.lengths[:, None].expand(units, heads).reshape(-1)
    shape = (last - first, rows.longest, 1)
    sums = _gpu.ragged_rank_sums(
        blocks, base, lengths, shape, (stride_key, stride_row, 1), samples
    )[0]  # [U·H, K]
    expected = sums / (lengths.double() * samples.count.double())[:, None]
    if check_finite:
        raise_if_not_finite(expected, "scores")
    return expected.view(units, heads, last - first)


def block_units_expected(
    scores: torch.Tensor,
    prompt_len: int,
    rows: UnitRows,
    keys: tuple[int, int],
    *,
    check_finite: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`block_expected` and :func:`units_key_expected` of one block, each cross sample
    searched once: ``(E [H], t [U, H, K])`` float64 (on CUDA with Triton the two functions'
    kernels serve instead).

    A unit's self samples are those of the head whose query row lies in the unit:
    ``Y(g, g') = {f(k, l) ∈ Y(g, g) : l ∈ g'}``. With ``Y(g, g)`` sorted once, a cross sample's
    rank there, ``c(x) = #{y < x}`` (the head's ranking, eq. 6), gives its rank among the
    unit's, ``c'(x) = #{k < c(x) : row_k ∈ g'}``, and the unit's prefix sum ``S'(c'(x))`` is the
    running sum of the unit's samples up to ``c(x)``: two lookups per sample for eq. 10,
    where a second search was needed. Arguments as in :func:`units_key_expected` (one block
    ``[H, g, m + g]``).
    """
    gen_len = _check_block(scores, prompt_len)
    if scores.dim() != 3 or rows.batch is not None:
        raise ValueError(f"scores must be one block [H, g, m + g], got {tuple(scores.shape)}")
    if _gpu.available(scores):
        return (
            block_expected(scores, prompt_len, check_finite=check_finite),
            units_key_expected(scores, rows, keys, check_finite=check_finite),
        )
    if check_finite:
        raise_if_not_finite(scores, "scores")
    heads, columns = scores.shape[0], scores.shape[-1]
    first, last = keys
    y = self_samples(scores, prompt_len).double()  # [H, M], query-major
    center = y.mean(-1, keepdim=True)  # [H, 1]: subtracted for precision only
    ys, order = torch.sort(y - center, dim=-1)  # [H, M]
    # the query row of each self sample, in self_samples' order, then in the sorted order
    row_of = _gpu.causal_index(gen_len, columns, prompt_len, scores.device) // columns  # [M]
    sorted_rows = row_of[order]  # [H, M]
    x = scores[:, :, :prompt_len].double() - center[:, :, None]  # [H, g, m]
    below = torch.searchsorted(ys, x.reshape(heads, -1)).view(heads, gen_len, prompt_len)
    running = torch.nn.functional.pad(ys.cumsum(-1), (1, 0))  # [H, M + 1]
    total = below.double() * x - running.gather(-1, below.view(heads, -1)).view_as(x)
    expected = total.sum((1, 2)) / (gen_len * prompt_len * ys.shape[-1])  # [H]
    per_key = []
    for a, length in zip(rows.starts.tolist(), rows.lengths.tolist(), strict=True):
        member = (sorted_rows >= a) & (sorted_rows < a + length)  # [H, M]
        count = torch.nn.functional.pad(member.cumsum(-1), (1, 0))  # [H, M + 1]
        sums = torch.nn.functional.pad(torch.where(member, ys, 0.0).cumsum(-1), (1, 0))
        rank = below[:, a : a + length, first:last].reshape(heads, -1)  # [H, |g'|·K]
        terms = count.gather(-1, rank).double() * x[:, a : a + length, first:last].reshape(
            heads, -1
        ) - sums.gather(-1, rank)
        size = count[:, -1:].double()  # [H, 1]: |Y(g, g')|
        per_key.append(terms.view(heads, length, last - first).sum(1) / (length * size))
    return expected, torch.stack(per_key)  # [H], [U, H, K]


def iot_expected_rc(scores: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Independent-output-tokens approximation of expected RC (supplement Table 1).

    ``mean_{j ∈ g} E(X(p, {j}), Y(g, {j}))``: each generated query compares its prompt scores
    only with its own scores against generated keys ``k <= j``.

    Parameters
    ----------
    scores
        ``[..., g, m + g]`` generation block.
    prompt_len
        ``m``.

    Returns
    -------
    torch.Tensor
        float64, shape ``scores.shape[:-2]``.
    """
    gen_len = _check_block(scores, prompt_len)
    causal = torch.ones(gen_len, gen_len, dtype=torch.bool, device=scores.device).tril()
    y = scores[..., prompt_len:]  # [..., g, g]: one self sample set per query row
    per_query = expected_rc(
        scores[..., :prompt_len], y, y_valid=causal.expand(y.shape).contiguous()
    )  # [..., g]
    return per_query.mean(-1)
