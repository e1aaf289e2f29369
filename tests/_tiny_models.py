"""Tiny random-weight causal LMs built in process (no downloads), one per architecture."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import torch
import transformers
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
    vocab_size=640,  # >= the tiny test tokenizer (tests/_tiny_tokenizer.py)
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)

ARCHITECTURES = ("llama", "qwen2", "mistral", "gemma2")


def one_thread() -> Iterator[None]:
    """Intra-op threads only add contention on tiny models (seconds instead of ms per test
    on a loaded 2-core machine): a module's tests run with one (a module-scoped fixture)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@cache
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
    """A 3-layer, 4-query-head, 2-KV-head model of ``arch`` with fixed random weights.

    A combination the installed transformers refuses (newer releases have no sdpa for Gemma2)
    skips the calling test: there is nothing to test."""
    try:
        return _build(arch, attn_implementation)
    except ValueError as err:
        if "does not support an attention implementation" not in str(err):
            raise
        pytest.skip(f"transformers {transformers.__version__}: {arch} has no {attn_implementation}")


def reference_scores(model: Any, input_ids: torch.Tensor) -> list[torch.Tensor]:
    """Raw post-RoPE q·kᵀ per layer, recomputed from the attention modules' inputs."""
    captured: list[torch.Tensor] = []

    def hook(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        cos, sin = kwargs["position_embeddings"]
        rope = sys.modules[type(module).__module__].apply_rotary_pos_emb
        batch, length, _ = hidden.shape
        hd = module.head_dim
        q = module.q_proj(hidden).view(batch, length, -1, hd).transpose(1, 2)
        k = module.k_proj(hidden).view(batch, length, -1, hd).transpose(1, 2)
        q, k = rope(q, k, cos, sin)
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)  # the obvious (copying) GQA expansion
        captured.append(q.double() @ k.double().transpose(-1, -2))

    handles = [
        layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True)
        for layer in model.model.layers
    ]
    try:
        with torch.no_grad():
            model(input_ids)
    finally:
        for h in handles:
            h.remove()
    return captured


def tiny_loader(model: str | None, devices: Any) -> tuple[PreTrainedModel, Any]:
    """A loader for the library calls' ``loader=``: the in-memory tiny Llama and the tiny
    tokenizer, whatever ``model`` and ``devices`` say."""
    from tests._tiny_tokenizer import make_tiny_tokenizer

    return tiny_model("llama"), make_tiny_tokenizer()
