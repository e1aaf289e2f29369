"""Metrics of KV-cache compression (paper §5.2; docs/definitions.md).

- **VER** (value error rate): at the model's last layer, for every query head and every
  generated position ``j``, ``||v*_j - v̂_j||² / ||v*_j||²`` where ``v*`` is the head's
  attention output (softmax-weighted sum of values, before the output projection) with the
  full cache and ``v̂`` under compression, the same reference generation teacher-forced.
- **ROUGE-1 / ROUGE-L F1** (``rouge-score``) of a prediction against references.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn


@dataclass(frozen=True)
class VER:
    """Mean and standard deviation of the per-(head, position) squared relative errors."""

    mean: float
    std: float
    count: int


def value_errors(reference: torch.Tensor, compressed: torch.Tensor) -> torch.Tensor:
    """Squared relative errors ``||v* - v̂||² / ||v*||²`` over the last (feature) axis.

    Parameters
    ----------
    reference, compressed
        ``[..., dim]`` attention outputs per head and position (same shape).

    Returns
    -------
    torch.Tensor
        ``[...]`` float64.

    Examples
    --------
    >>> import torch
    >>> value_errors(torch.tensor([[3.0, 4.0]]), torch.tensor([[3.0, 1.0]]))
    tensor([0.3600], dtype=torch.float64)
    """
    if reference.shape != compressed.shape:
        raise ValueError(
            f"reference {tuple(reference.shape)} and compressed {tuple(compressed.shape)} "
            "outputs must have the same shape"
        )
    reference, compressed = reference.double(), compressed.double()
    norm = reference.pow(2).sum(-1)
    if bool((norm == 0).any()):
        raise ValueError("a reference attention output is exactly zero: VER is undefined there")
    return (reference - compressed).pow(2).sum(-1) / norm


def summarize_ver(errors: Sequence[torch.Tensor]) -> VER:
    """Pool per-example error tensors into the dataset VER (mean and std over all entries)."""
    pooled = torch.cat([e.reshape(-1) for e in errors])
    if pooled.numel() == 0:
        raise ValueError("no value errors to summarise")
    std = float(pooled.std()) if pooled.numel() > 1 else 0.0
    return VER(mean=float(pooled.mean()), std=std, count=int(pooled.numel()))


@contextmanager
def head_outputs(model: nn.Module, layer: int = -1) -> Iterator[list[torch.Tensor]]:
    """Record a layer's per-head attention outputs (the input of ``o_proj``).

    Yields a list that receives one ``[batch, q_len, heads, head_dim]`` tensor per forward
    pass of that layer. The hook is removed on exit.
    """
    decoder = cast(Any, model).model
    attention = decoder.layers[layer].self_attn
    heads = int(cast(Any, model).config.num_attention_heads)
    recorded: list[torch.Tensor] = []

    def hook(_: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        hidden = args[0]  # [batch, q_len, heads · head_dim]
        recorded.append(hidden.detach().view(*hidden.shape[:2], heads, -1).clone())

    handle = attention.o_proj.register_forward_pre_hook(hook)
    try:
        yield recorded
    finally:
        handle.remove()


def rouge_f1(prediction: str, references: Sequence[str]) -> dict[str, float]:
    """ROUGE-1 and ROUGE-L F1 of ``prediction`` against the best-matching reference."""
    from rouge_score import rouge_scorer

    if not references:
        raise ValueError("at least one reference is needed")
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    scores = [scorer.score(ref, prediction) for ref in references]
    return {
        "rouge1": max(s["rouge1"].fmeasure for s in scores),
        "rougeL": max(s["rougeL"].fmeasure for s in scores),
    }
