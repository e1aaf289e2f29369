"""A pytest plugin for the processes :func:`tests._interpreter.run_cases` starts.

Triton 3.6's interpreter turns a runtime scalar (a one-element array) into a loop bound with
``int(array)``, which NumPy 2.4 and later refuse ("only 0-dimensional arrays can be converted
to Python scalars", triton-lang/triton#9171, fixed after 3.6 by #9172): every interpreter case
whose loop bound is a kernel argument fails on such a machine. :func:`pytest_configure` makes
that conversion explicit, as the upstream fix does.
"""

from __future__ import annotations

import os
from typing import Any


def interpreter_index_fix() -> None:
    """Make the interpreter's ``tensor.__index__`` take the one element of its array
    explicitly (``int(data.squeeze())``); once per process, and only where the interpreter
    has the hook it patches."""
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None or getattr(patch, "index_fixed", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched.index_fixed = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def pytest_configure(config: Any) -> None:
    """Under the interpreter only (``TRITON_INTERPRET=1``, set by ``run_cases``)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_index_fix()
