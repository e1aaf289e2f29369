"""Per-token, per-head grounding statistics from one layer's attention scores (docs/grounding.md).

The response ``r`` is teacher-forced after the prompt (chat template, context ``c``,
instruction). Response token ``j`` (absolute position ``a + j``) is *produced* by the query at
position ``a + j - 1``: the row that decides it. For that row ``q`` and every query head the
reducer computes

* ``rc``: the scale-free normalized RC ``E(X, Y) / (E(X, Y) + E(Y, X))`` (docs/definitions.md)
  with ``X`` = the raw scores of ``q`` against the context keys and ``Y`` = its raw scores
  against the response written so far, keys ``a - 1 .. q`` (the last template token opens the
  response, so ``Y`` is never empty): how strongly the query that writes the token reads the
  context rather than the response. ``Y`` is sorted once per row and every context score is
  searched in it (:func:`~rcstat.stats.normalized_rc_shared`), so the cost is one binary
  search per (row, context key), not a sort of the context;
* ``lookback``: the Lookback Lens ratio (Chuang et al., 2024)
  ``A_c / (A_c + A_r)`` with ``A_c`` the mean attention weight on the context keys and
  ``A_r`` the mean weight on the response keys ``a - 1 .. q``;
* ``attention_score``: ``log α_qq``, the log-diagonal of the attention map whose mean is the
  attention score of LLM-Check (Sriramanan et al., 2024);
* ``copy``: ``Σ_{k ∈ M_j} α_qk``, the attention weight of ``q`` on the context keys ``M_j``
  that hold the token being written (the same word, compared without case or leading space):
  how much the head copies the token from the context, as retrieval heads do (Wu et al., 2024).

In the same pass it attributes each response sentence ``g'`` to the context (paper eq. 10)
with a fixed set of support heads: the key-level expected RC ``t_h(g', i)`` of
:mod:`rcstat.attribution.reduce`, for the context keys only, summed over those heads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rcstat.capture import SoftmaxParams, attention_probs
from rcstat.capture.host import upload
from rcstat.stats import UnitRows, normalized_rc_shared, unit_rows, units_key_expected

__all__ = ["HEAD_FEATURES", "ResponseRows", "grounding_reducer", "heads_by_layer"]

#: The per-head statistics of every response token, in the order the reducer returns them.
HEAD_FEATURES = ("rc", "lookback", "attention_score")


@dataclass(frozen=True)
class ResponseRows:
    """Where the context and the response sit in the token sequence.

    Attributes
    ----------
    context
        ``[start, end)`` absolute token range of the context.
    response
        ``[start, end)`` absolute token range of the response; the captured query rows are
        ``start - 1 .. end - 1`` (``G + 1`` rows: the row before each token, and the last).
    """

    context: tuple[int, int]
    response: tuple[int, int]

    @property
    def first_row(self) -> int:
        """Absolute position of the first captured query row."""
        return self.response[0] - 1

    @property
    def num_rows(self) -> int:
        """``G + 1``."""
        return self.response[1] - self.response[0] + 1


def heads_by_layer(flat: np.ndarray, heads: int) -> dict[int, torch.Tensor]:
    """Flat head indices ``layer * heads + head`` grouped by layer (sorted head indices)."""
    grouped: dict[int, list[int]] = {}
    for index in sorted(int(i) for i in flat):
        grouped.setdefault(index // heads, []).append(index % heads)
    return {layer: torch.tensor(chosen) for layer, chosen in grouped.items()}


def grounding_reducer(
    rows: ResponseRows,
    softmax: dict[int, SoftmaxParams],
    *,
    rc_heads: dict[int, torch.Tensor] | None = None,
    support_heads: dict[int, torch.Tensor] | None = None,
    units: Sequence[tuple[int, int]] = (),
    matches: torch.Tensor | None = None,
) -> Callable[[int, torch.Tensor], dict[str, torch.Tensor]]:
    """A capture reducer returning the statistics of the module doc for one layer.

    Parameters
    ----------
    rows
        The token ranges; the capture must start at ``rows.first_row``.
    softmax
        Per layer, what the model applies before its softmax.
    rc_heads
        Per layer, the heads whose ``rc`` is computed (default: every head); the others get
        NaN. ``lookback`` and ``attention_score`` come for every head.
    support_heads
        Per layer, the heads that attribute each unit to the context (paper eq. 10).
    units
        Rows ``[a, b)`` of each response unit (sentence), relative to the response's start.
    matches
        ``[G, C]`` bool: context key ``k`` holds the token that row ``j`` writes (``copy``);
        none: ``copy`` is zero.

    Returns
    -------
    callable
        ``reducer(layer, scores [1, H, G + 1, T]) -> dict`` on the layer's device:
        ``features`` ``[3, H, G]`` float32 (``rc``, ``lookback``, ``attention_score`` of the
        rows that produce the ``G`` response tokens) and ``support`` ``[U, C]`` float64, the
        key-level expected RC ``t_h(g', i)`` of every unit for every context key, summed over
        the layer's support heads, ``copy`` ``[H, G]`` float32 and ``copied`` ``[U, C]``
        float64, the ``copy`` weight of every unit's rows on each context key, summed over the
        rows and the layer's heads.
    """
    c0, c1 = rows.context
    start = rows.first_row
    num_rows = rows.num_rows - 1  # the row after the last token produces nothing
    ranks = torch.arange(num_rows)
    seen = ranks[None, :] <= ranks[:, None]  # [G, G]: response key i visible from row j
    on_device: dict[torch.device, tuple[torch.Tensor, UnitRows | None, torch.Tensor | None]] = {}

    def reduce(layer: int, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        block = scores[0, :, :num_rows]  # [H, G, T]
        device = block.device
        if device not in on_device:
            # units of the generated block (rows 1.., generated keys from column start + 1)
            found = unit_rows(list(units), scores.shape[-1], start + 1) if units else None
            moved = None if found is None else found.map(lambda t: upload(t, device))
            match = None if matches is None else upload(matches, device)
            on_device[device] = (upload(seen, device), moved, match)
        valid, unit_rows_, match = on_device[device]

        def rc_of(picked: torch.Tensor) -> torch.Tensor:  # [h, G, T] -> [h, G]
            own = picked[..., start : start + num_rows]  # [h, G, G]: keys a-1 .. a+G-2
            return normalized_rc_shared(
                picked[..., c0:c1][:, :, None, :],
                own,
                y_valid=valid.expand_as(own),
                check_finite=False,
            )[..., 0].float()

        if rc_heads is None:
            rc = rc_of(block)  # [H, G]
        else:
            rc = torch.full(block.shape[:2], float("nan"), dtype=torch.float32, device=device)
            chosen = rc_heads.get(layer)
            if chosen is not None:
                index = upload(chosen, device)
                rc[index] = rc_of(block[index])
        positions = torch.arange(start, start + num_rows, device=device)
        probs = attention_probs(block, positions, softmax[layer])  # [H, G, T]
        on_context = probs[..., c0:c1].mean(-1)  # [H, G]
        on_response = probs[..., start : start + num_rows].sum(-1) / valid.sum(-1)  # [H, G]
        lookback = on_context / (on_context + on_response).clamp_min(1e-30)
        diagonal = probs[:, positions - start, positions]  # [H, G]
        heads = None if support_heads is None else support_heads.get(layer)
        if heads is None or unit_rows_ is None:
            support = torch.zeros(len(units), c1 - c0, dtype=torch.float64, device=device)
        else:
            # the generated block of the attribution machinery: rows of g, keys 0 .. a+G-1
            generated = scores[0, upload(heads, device), 1:]  # [h, G, T]
            per_key = units_key_expected(generated, unit_rows_, (c0, c1), check_finite=False)
            support = per_key.sum(1)  # [U, C] summed over the support heads
        features = torch.stack([rc, lookback, diagonal.clamp_min(1e-30).log()])  # [3, H, G]
        if match is None:
            copy = torch.zeros(block.shape[:2], dtype=torch.float32, device=device)
            copied = torch.zeros(len(units), c1 - c0, dtype=torch.float64, device=device)
        else:
            on_match = probs[..., c0:c1] * match  # [H, G, C]: weight on keys holding the token
            copy = on_match.sum(-1).float()  # [H, G]
            per_row = on_match.sum(0).double()  # [G, C] over the heads
            copied = (
                torch.stack([per_row[a:b].sum(0) for a, b in units])
                if units
                else (per_row.new_zeros(0, c1 - c0))
            )  # [U, C]
        return {"features": features, "support": support, "copy": copy, "copied": copied}

    return reduce
