"""Running a model over an example: input checks, stop tokens and greedy generation.

This is the one home of greedy decoding in rcstat. :func:`greedy` continues a prompt on top of
any KV cache (a plain ``DynamicCache``, or a compressed one: the press runs it inside its own
attention context), passing explicit ``position_ids`` because a compressed cache holds fewer
entries than the sequence it stands for. :func:`generate_answer` uses it to complete a
:class:`~rcstat.segments.Segmented` example. Every answer records whether it **finished**
(the model emitted a stop token) or was **cut** at the token limit, so that a truncated answer
is never shown as a complete one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch

from rcstat.capture import AttentionLayout, attention_layout
from rcstat.defaults import DEFAULT_MAX_NEW_TOKENS
from rcstat.models.cache_argument import with_cache
from rcstat.segments import Segmented

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "Answered",
    "Generated",
    "check_example",
    "check_max_new_tokens",
    "generate_answer",
    "greedy",
    "greedy_batch",
    "input_device",
    "left_pad",
    "padded_positions",
    "stop_token_ids",
]


@dataclass(frozen=True)
class Generated:
    """Greedily generated token ids (stop token excluded) and how the generation ended."""

    ids: list[int]
    finished: bool  # True: a stop token ended it; False: cut at the token limit


@dataclass(frozen=True)
class Answered:
    """An example completed by the model, and whether its answer finished by itself."""

    example: Segmented
    finished: bool


def check_max_new_tokens(max_new_tokens: int) -> int:
    """``max_new_tokens`` as an int ≥ 1, or a ``ValueError`` that names it."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    return max_new_tokens


def input_device(model: torch.nn.Module) -> torch.device:
    """Where input ids go: the device of the input embedding (a split model's first layer), or
    where accelerate runs it when its weights are offloaded (``_hf_hook.execution_device``)."""
    embeddings = cast(Any, model).get_input_embeddings()
    execution = getattr(getattr(embeddings, "_hf_hook", None), "execution_device", None)
    if execution is not None:
        return torch.device(execution)
    return cast(torch.device, embeddings.weight.device)


def stop_token_ids(model: torch.nn.Module, tokenizer: Any) -> frozenset[int]:
    """Token ids that end a generation: the tokenizer's EOS and padding tokens and every EOS
    id of the model's generation config (chat models often list the end-of-turn token)."""
    stops = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    config = getattr(model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None)
    stops.update(configured if isinstance(configured, list) else [configured])
    return frozenset(int(t) for t in stops if t is not None)


def left_pad(
    parts: Sequence[torch.Tensor], device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D token id tensors right-aligned: ``(ids [B, W], mask [B, W])``, the padding
    (id 0, mask 0) on the left as decoder-only generation wants it."""
    if not parts or any(p.dim() != 1 or p.numel() == 0 for p in parts):
        raise ValueError("left_pad needs one or more non-empty 1-D id tensors")
    width = max(int(p.numel()) for p in parts)
    device = parts[0].device if device is None else device
    ids = torch.zeros(len(parts), width, dtype=torch.long, device=device)
    mask = torch.zeros(len(parts), width, dtype=torch.long, device=device)
    for row, part in enumerate(parts):
        ids[row, width - part.numel() :] = part
        mask[row, width - part.numel() :] = 1
    return ids, mask


def padded_positions(mask: torch.Tensor, starts: Sequence[int] | None = None) -> torch.Tensor:
    """``[B, W]`` position ids of a left-padded block: row ``b``'s real tokens count from
    ``starts[b]`` (0 by default); padded slots repeat the first real position."""
    offsets = torch.tensor(starts or [0] * mask.shape[0], device=mask.device).unsqueeze(1)
    return offsets + (mask.cumsum(1) - 1).clamp_min(0)


def greedy(
    model: torch.nn.Module,
    cache: Any,
    prompt: torch.Tensor,
    steps: int,
    stops: frozenset[int] | set[int],
    start: int = 0,
) -> Generated:
    """Greedy continuation of ``prompt`` ``[1, q]`` on top of ``cache``.

    ``start`` is the logical position of the prompt's first token (the length of the sequence
    already in the cache before any compression), passed as ``position_ids`` as kvpress's
    pipeline does. At most ``steps`` tokens are generated; the stop token that ends the
    generation is not included.
    """
    return greedy_batch(model, cache, [prompt[0]], steps, stops, [start])[0]


def greedy_batch(
    model: torch.nn.Module,
    cache: Any,
    prompts: Sequence[torch.Tensor],
    steps: int,
    stops: frozenset[int] | set[int],
    starts: Sequence[int],
    cached_mask: torch.Tensor | None = None,
) -> list[Generated]:
    """Greedy continuations of a batch of ``prompts`` (1-D ids, any lengths) on ``cache``.

    Row ``b``'s prompt continues the sequence in the cache's row ``b`` from logical position
    ``starts[b]``. ``cached_mask`` ``[B, K]`` marks the real positions of what the cache holds
    (None: no padding there). The prompts are left-padded into one block; a finished row is
    fed its last token until every row has stopped, and its further outputs are dropped.
    """
    check_max_new_tokens(steps)
    batch = len(prompts)
    if len(starts) != batch or (cached_mask is not None and cached_mask.shape[0] != batch):
        raise ValueError(f"{batch} prompts need {batch} starts and cached-mask rows")
    ids, mask = left_pad(prompts)
    padded = cached_mask is not None or bool((mask == 0).any())
    full = torch.cat([cached_mask.to(mask), mask], 1) if cached_mask is not None else mask
    lengths = torch.tensor([int(p.numel()) for p in prompts], device=ids.device)
    position = torch.tensor(starts, device=ids.device) + lengths  # [B] next position
    out: list[list[int]] = [[] for _ in range(batch)]
    finished = [False] * batch
    with torch.no_grad():
        logits = model(
            ids,
            **with_cache(model, cache),
            position_ids=padded_positions(mask, starts),
            **({"attention_mask": full} if padded else {}),
        ).logits
        for step_index in range(steps):
            tokens = logits[:, -1].argmax(-1)  # [B]
            for row, token in enumerate(tokens.tolist()):
                if finished[row]:
                    continue
                if token in stops:
                    finished[row] = True
                else:
                    out[row].append(token)
            if all(finished) or step_index == steps - 1:
                break
            if padded:
                full = torch.cat([full, full.new_ones(batch, 1)], 1)
            logits = model(
                tokens.unsqueeze(1),
                **with_cache(model, cache),
                position_ids=position.unsqueeze(1),
                **({"attention_mask": full} if padded else {}),
            ).logits
            position = position + 1
    return [Generated(ids_, finished=done) for ids_, done in zip(out, finished, strict=True)]


def generate_answer(
    model: PreTrainedModel,
    tokenizer: Any,
    example: Segmented,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
) -> Answered:
    """Greedily generate the continuation of ``example`` and append it as the generation."""
    from transformers import DynamicCache

    check_max_new_tokens(max_new_tokens)
    prompt = example.input_ids.to(input_device(model))
    generated = greedy(
        model, DynamicCache(), prompt, max_new_tokens, stop_token_ids(model, tokenizer)
    )
    if not generated.ids:
        raise ValueError("the model generated an empty answer; pass the answer explicitly")
    return Answered(example.with_generation(tokenizer, generated.ids), generated.finished)


def check_window(layout: AttentionLayout, tokens: int) -> None:
    """Raise ``ValueError`` if ``tokens`` exceed the model's window (when it has one)."""
    if layout.max_positions is not None and tokens > layout.max_positions:
        raise ValueError(
            f"the input has {tokens} tokens but the model's window is "
            f"{layout.max_positions} (max_position_embeddings)"
        )


def check_example(model: PreTrainedModel, example: Segmented) -> AttentionLayout:
    """Check that ``example`` can be analysed by ``model``; return the model's layout.

    Raises
    ------
    ValueError
        Empty prompt or generation, more tokens than the model's window, or token ids
        outside its vocabulary (a tokenizer of another model).
    UnsupportedModelError
        If the model's attention cannot be captured.
    """
    layout = attention_layout(model)
    if example.gen_len == 0:
        raise ValueError("the generation is empty: give an answer or let the model generate one")
    if example.prompt_len == 0:
        raise ValueError("the prompt is empty")
    check_window(layout, example.seq_len)
    embeddings = cast(torch.nn.Embedding, model.get_input_embeddings())
    vocab = int(embeddings.weight.shape[0])
    if int(example.input_ids.max()) >= vocab:
        raise ValueError(
            f"token id {int(example.input_ids.max())} is outside the model's vocabulary "
            f"({vocab}): the tokenizer does not belong to this model"
        )
    return layout
