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
  attention score of LLM-Check (Sriramanan et al., 2024).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rcstat.capture import SoftmaxParams, attention_probs
from rcstat.stats import normalized_rc_shared

__all__ = ["HEAD_FEATURES", "ResponseRows", "grounding_reducer"]

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


def grounding_reducer(
    rows: ResponseRows, softmax: dict[int, SoftmaxParams]
) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """A capture reducer returning the statistics of the module doc for one layer.

    Parameters
    ----------
    rows
        The token ranges; the capture must start at ``rows.first_row``.
    softmax
        Per layer, what the model applies before its softmax.

    Returns
    -------
    callable
        ``reducer(layer, scores [1, H, G + 1, T]) -> [3, H, G]`` float32 on the layer's
        device: ``rc``, ``lookback`` and ``attention_score`` of the rows that produce the
        ``G`` response tokens (rows ``a - 1 .. a + G - 2``).
    """
    c0, c1 = rows.context
    start = rows.first_row
    num_rows = rows.num_rows - 1  # the row after the last token produces nothing
    ranks = torch.arange(num_rows)
    seen = ranks[None, :] <= ranks[:, None]  # [G, G]: response key i visible from row j
    on_device: dict[torch.device, torch.Tensor] = {}

    def reduce(layer: int, scores: torch.Tensor) -> torch.Tensor:
        block = scores[0, :, :num_rows]  # [H, G, T]
        if block.device not in on_device:
            on_device[block.device] = seen.to(block.device)
        valid = on_device[block.device]
        context = block[..., c0:c1]  # [H, G, C]
        own = block[..., start : start + num_rows]  # [H, G, G]: keys a-1 .. a+G-2
        rc = normalized_rc_shared(
            context[:, :, None, :], own, y_valid=valid.expand_as(own), check_finite=False
        )[..., 0]  # [H, G]
        positions = torch.arange(start, start + num_rows, device=block.device)
        probs = attention_probs(block, positions, softmax[layer])  # [H, G, T]
        on_context = probs[..., c0:c1].mean(-1)  # [H, G]
        on_response = probs[..., start : start + num_rows].sum(-1) / valid.sum(-1)  # [H, G]
        lookback = on_context / (on_context + on_response).clamp_min(1e-30)
        diagonal = probs[:, ranks.to(block.device), positions]  # [H, G]
        log_diagonal = diagonal.clamp_min(1e-30).log()
        return torch.stack([rc.float(), lookback, log_diagonal])  # [3, H, G]

    return reduce
