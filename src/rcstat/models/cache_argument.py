"""How a transformers model takes and returns its KV cache, across the releases rcstat supports.

transformers 5.2 names a forward pass's cache ``past_key_values``, in its arguments and in its
outputs; later 5.x releases name it ``cache`` and keep the old name as a deprecated alias, to
be removed in 5.40. rcstat passes the cache by the name the model's own ``forward`` declares,
so that it works on both sides of the rename.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_keyword", "forward_takes", "returned_cache", "with_cache"]


@functools.cache
def _parameters_of(model_class: Any) -> frozenset[str]:
    return frozenset(inspect.signature(model_class.forward).parameters)


def forward_takes(model: Any, name: str) -> bool:
    """Whether the model's class declares ``forward(..., name=...)`` (read from the class, so
    that wrappers of an instance's ``forward``, e.g. accelerate's hooks, do not hide it)."""
    model_class: Any = type(model)
    return name in _parameters_of(model_class)


def cache_keyword(model: Any) -> str:
    """``"cache"`` when the model's class declares ``forward(..., cache=...)``, else
    ``"past_key_values"``."""
    return "cache" if forward_takes(model, "cache") else "past_key_values"


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` to pass to ``model(...)``: ``model(ids, **with_cache(model, c))``."""
    return {cache_keyword(model): cache}


def returned_cache(output: Any) -> Any:
    """The cache a forward pass returned: ``output.cache``, or ``output.past_key_values`` in
    releases before the rename."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
