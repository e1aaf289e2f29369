"""Switch a model to a named attention function for the length of a ``with`` block.

transformers dispatches attention through ``AttentionInterface`` by the name in
``config._attn_implementation``. Both the score capture and the ragged KV cache register a
function under their own name and switch the model to it; this module is the one place that
does so. Two facts shape it: a custom name receives no attention mask unless a mask function
is registered under the same name, and the previous implementation must be restored however
the block ends (nothing is patched at import).

``set_attn_implementation`` checks the request and walks every module of the model each time
(about half a millisecond a switch for an 8B model's 424 modules); a call of rcstat switches
twice. The first switch between two names on a model goes through it, and the configs it
changed are recorded with their values before and after; a later switch between the same names
on the same model sets those values directly, provided every recorded config still holds its
recorded value before (otherwise, e.g. after the user set another implementation in between, it
goes through ``set_attn_implementation`` again).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface, PreTrainedModel
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
    _switch(model, previous, name)
    try:
        yield previous
    finally:
        _switch(model, name, previous)


#: A switch's changes: ``(config, value before, value after)`` of each config it changed.
_Changes = tuple[tuple[Any, Any, Any], ...]
#: Per model, the changes of each ``(from, to)`` switch made through transformers.
_RECORDED: weakref.WeakKeyDictionary[torch.nn.Module, dict[tuple[str, str], _Changes]] = (
    weakref.WeakKeyDictionary()
)


def _switch(model: torch.nn.Module, current: str, name: str) -> None:
    """Switch ``model`` from ``current`` to ``name``: the recorded changes of this switch when
    every recorded config still holds its value before, else ``set_attn_implementation`` (its
    changes recorded for the next time)."""
    recorded = _RECORDED.setdefault(model, {})
    changes = recorded.get((current, name))
    if changes is not None and all(_value(c) == before for c, before, _ in changes):
        for config, _, after in changes:
            config._attn_implementation_internal = after
        return
    configs = _configs(model)
    before = [_value(config) for config in configs]
    model.set_attn_implementation(name)  # type: ignore[operator]
    changes = tuple(
        (config, old, _value(config))
        for config, old in zip(configs, before, strict=True)
        if _value(config) != old
    )
    # a switch that changed the implementation where no config shows it (a transformers
    # release keeping it elsewhere) is not recorded: it goes through transformers every time
    if changes or current_implementation(model) == current:
        recorded[(current, name)] = changes


def _value(config: Any) -> Any:
    """The attention implementation a config holds (what its property reads; None where a
    transformers release keeps it elsewhere)."""
    return getattr(config, "_attn_implementation_internal", None)


def _configs(model: torch.nn.Module) -> list[Any]:
    """Every distinct config of ``model``'s pretrained (sub)models and their sub-configs: all
    that ``set_attn_implementation`` may change."""
    found: dict[int, Any] = {}
    pending = [m.config for m in model.modules() if isinstance(m, PreTrainedModel)]
    while pending:
        config = pending.pop()
        if id(config) in found or not hasattr(config, "_attn_implementation_internal"):
            continue
        found[id(config)] = config
        pending += [
            sub
            for key in getattr(config, "sub_configs", {})
            if (sub := getattr(config, key, None)) is not None
        ]
    return list(found.values())
