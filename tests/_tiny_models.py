"""Tiny random-weight causal LMs built in process (no downloads), one per architecture."""

from __future__ import annotations

from functools import lru_cache

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedModel,
    Qwen2Config,
    Qwen2ForCausalLM,
)

_COMMON = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)

ARCHITECTURES = ("llama", "qwen2", "mistral", "gemma2")


@lru_cache(maxsize=None)
def _build(arch: str, attn_implementation: str) -> PreTrainedModel:
    torch.manual_seed(0)
    if arch == "llama":
        model: PreTrainedModel = LlamaForCausalLM(LlamaConfig(**_COMMON))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**_COMMON))
    elif arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**_COMMON, sliding_window=None))
    elif arch == "gemma2":
        model = Gemma2ForCausalLM(Gemma2Config(**_COMMON, head_dim=16, sliding_window=128))
    else:
        raise ValueError(arch)
    # Larger projections make scores spread like a trained model's (|f| ~ 10).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(8.0)
    model.set_attn_implementation(attn_implementation)
    return model.eval()


def tiny_model(arch: str = "llama", attn_implementation: str = "sdpa") -> PreTrainedModel:
    """A 3-layer, 4-query-head, 2-KV-head model of ``arch`` with fixed random weights."""
    return _build(arch, attn_implementation)
