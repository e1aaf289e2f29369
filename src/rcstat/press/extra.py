"""The KV-cache press needs kvpress, an optional extra: ``pip install "rcstat[press]"``.

kvpress caps the transformers version and pulls several heavy packages, so rcstat's analysis,
attribution and head analysis never import it. The modules that subclass kvpress's presses call
:func:`require_kvpress` first, so a missing extra fails at once with the install command.
"""

from __future__ import annotations

from importlib.util import find_spec

from rcstat.defaults import INSTALL_PRESS

__all__ = ["MissingExtraError", "has_kvpress", "require_kvpress"]


class MissingExtraError(ImportError):
    """An optional dependency of rcstat is not installed."""


def has_kvpress() -> bool:
    """Whether kvpress can be imported (without importing it)."""
    return find_spec("kvpress") is not None


def require_kvpress(feature: str = "the KV-cache press") -> None:
    """Raise :class:`MissingExtraError` with the install command when kvpress is missing."""
    if not has_kvpress():
        raise MissingExtraError(
            f"{feature} needs kvpress, which is not installed; install it with: {INSTALL_PRESS}"
        )
