"""Post-softmax attention weights (``attn_probs``) rebuilt from captured raw scores.

The capture hands reducers raw ``<q, k>`` scores. Some reductions also need what the model's
softmax makes of them — the attention-weight baseline of attribution and the post-softmax head
ranking of the paper's supplement (Table 2). :func:`softmax_params` reads, per layer, what the
model applies before its softmax (scaling, Gemma-2-style logit soft-capping, a sliding
window); :func:`attention_probs` applies it with the causal mask:

``probs[j, i] = softmax_i(cap · tanh(scaling · <q_j, k_i> / cap))`` over keys ``i <= j`` (and
``j - i < window`` with a sliding window); without soft-capping the inner term is
``scaling · <q_j, k_i>``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rcstat.capture.architecture import UnsupportedModelError

__all__ = ["SoftmaxParams", "attention_probs", "softmax_params"]


@dataclass(frozen=True)
class SoftmaxParams:
    """What one layer applies to ``<q, k>`` before its softmax."""

    scaling: float
    softcap: float | None = None
    sliding_window: int | None = None


def softmax_params(model: torch.nn.Module) -> dict[int, SoftmaxParams]:
    """Per layer index, the softmax parameters of the model's attention modules.

    Raises
    ------
    UnsupportedModelError
        If no attention module exposes ``layer_idx`` and ``scaling``.
    """
    found: dict[int, SoftmaxParams] = {}
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        scaling = getattr(module, "scaling", None)
        if layer is None or scaling is None or int(layer) in found:
            continue
        softcap = getattr(module, "attn_logit_softcapping", None)
        window = getattr(module, "sliding_window", None)
        found[int(layer)] = SoftmaxParams(
            float(scaling),
            None if softcap is None else float(softcap),
            None if window is None else int(window),
        )
    if not found:
        raise UnsupportedModelError(
            f"{type(model).__name__}: no attention module exposes `layer_idx` and `scaling`"
        )
    return found


def attention_probs(
    scores: torch.Tensor, query_positions: torch.Tensor, params: SoftmaxParams
) -> torch.Tensor:
    """Softmax attention weights from raw scores of chosen query rows.

    Parameters
    ----------
    scores
        ``[..., q, k]`` raw ``<q, k>`` of queries at absolute ``query_positions`` against keys
        ``0 .. k-1`` (future keys included; they are masked here).
    query_positions
        ``[q]`` int64 absolute positions of the query rows, or ``[..., q]`` (broadcast
        against the leading axes of ``scores``) when the rows of each sequence of a batch
        sit at their own positions.
    params
        The layer's :class:`SoftmaxParams`.

    Returns
    -------
    torch.Tensor
        ``[..., q, k]`` float32, each row summing to one over its visible keys.
    """
    logits = scores.float() * params.scaling
    if params.softcap is not None:
        logits = torch.tanh(logits / params.softcap) * params.softcap
    keys = torch.arange(scores.shape[-1], device=scores.device)  # [k]
    rows = query_positions.to(scores.device)[..., None]  # [..., q, 1]
    visible = keys <= rows  # [..., q, k]
    if params.sliding_window is not None:
        visible &= rows - keys[None, :] < params.sliding_window
    return logits.masked_fill(~visible, float("-inf")).softmax(dim=-1)
