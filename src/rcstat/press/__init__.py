"""KV-cache compression: the per-KV-head ragged cache and its attention (DESIGN.md §2.2).

Names are resolved lazily (PEP 562): importing ``rcstat.press`` does no work and does not
import transformers until a name is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcstat.press.ragged import (
        PackedKV,
        RaggedCache,
        RaggedLayer,
        packed_attention,
        ragged_attention,
    )
    from rcstat.press.rcstat_press import RCStatPress

__all__ = [
    "PackedKV",
    "RCStatPress",
    "RaggedCache",
    "RaggedLayer",
    "packed_attention",
    "ragged_attention",
]

_HOMES = {name: "rcstat.press.ragged" for name in __all__ if name != "RCStatPress"}
_HOMES["RCStatPress"] = "rcstat.press.rcstat_press"


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'rcstat.press' has no attribute {name!r}")
