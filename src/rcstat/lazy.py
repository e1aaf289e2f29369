"""Public names of a package resolved when first read (PEP 562), so that importing the package
does no work: the one home of the packages' lazy ``__getattr__``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``homes[name]`` (a module path)
    when ``name`` is first read and returns its attribute ``name``.

    >>> getattr_ = lazy_names("demo", {"sqrt": "math"})
    >>> getattr_("sqrt")(9.0)
    3.0
    >>> getattr_("cube")
    Traceback (most recent call last):
    ...
    AttributeError: module 'demo' has no attribute 'cube'
    """

    def __getattr__(name: str) -> Any:
        if name in homes:
            return getattr(import_module(homes[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
