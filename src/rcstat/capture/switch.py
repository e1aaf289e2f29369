"""Switch a model to a named attention function for the length of a ``with`` block.

transformers dispatches attention through ``AttentionInterface`` by the name in
``config._attn_implementation``. Both the score capture and the ragged KV cache register a
function under their own name and switch the model to it; this module is the one place that
does so. Two facts shape it: a custom name receives no attention mask unless a mask function
is registered under the same name, and the previous implementation must be restored however
the block ends (nothing is patched at import).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

__all__ = ["current_implementation", "switched_attention"]


def current_implementation(model: torch.nn.Module) -> str:
    """The attention implementation the model runs now (``"eager"`` when unset)."""
    config: Any = model.config
    return str(config._attn_implementation or "eager")


@contextmanager
def switched_attention(
    model: torch.nn.Module,
    name: str,
    attention: Callable[..., Any],
    mask: Callable[..., Any],
) -> Iterator[str]:
    """Register ``attention`` and ``mask`` under ``name`` and run the model with them.

    Yields the name of the previous implementation, which is restored on exit (also on
    error). Raises ``RuntimeError`` if the model already runs ``name`` (the contexts of one
    name cannot be nested).
    """
    previous = current_implementation(model)
    if previous == name:
        raise RuntimeError(f"the model already runs the {name!r} attention function")
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, mask)
    model.set_attn_implementation(name)  # type: ignore[operator]
    try:
        yield previous
    finally:
        model.set_attn_implementation(previous)  # type: ignore[operator]
