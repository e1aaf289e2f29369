"""Per-model facts the capture needs, read from the model and its config."""

from __future__ import annotations

from dataclasses import dataclass

import torch


class UnsupportedModelError(ValueError):
    """The model's attention cannot be captured (it does not dispatch through
    transformers' ``AttentionInterface``, or it is not a decoder-only causal LM)."""


@dataclass(frozen=True)
class AttentionLayout:
    """Shape of a model's attention: ``num_layers`` × ``num_heads`` query heads sharing
    ``num_kv_heads`` key/value heads (GQA groups of ``num_heads // num_kv_heads``)."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int | None

    @property
    def group_size(self) -> int:
        return self.num_heads // self.num_kv_heads


def attention_layout(model: torch.nn.Module) -> AttentionLayout:
    """Read the attention layout of a Hugging Face causal LM.

    Raises
    ------
    UnsupportedModelError
        If the model has no text config with layer and head counts, is an encoder-decoder,
        or does not route attention through ``AttentionInterface``.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no `config`; pass a Hugging Face causal LM"
        )
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{type(model).__name__} is an encoder-decoder model; rcstat needs a decoder-only LM"
        )
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    try:
        num_layers = int(text.num_hidden_layers)
        num_heads = int(text.num_attention_heads)
    except AttributeError as err:
        raise UnsupportedModelError(
            f"cannot read layer/head counts from {type(text).__name__}: {err}"
        ) from err
    num_kv_heads = int(getattr(text, "num_key_value_heads", None) or num_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // num_heads)
    can_switch = getattr(model, "_can_set_attn_implementation", None)
    if can_switch is None or not can_switch():
        raise UnsupportedModelError(
            f"{type(model).__name__} does not dispatch attention through transformers' "
            "AttentionInterface, so its pre-softmax scores cannot be captured "
            "(supported: Llama, Qwen2, Mistral, Gemma2 and other modern architectures)"
        )
    max_positions = getattr(text, "max_position_embeddings", None)
    return AttentionLayout(num_layers, num_heads, num_kv_heads, head_dim, max_positions)
