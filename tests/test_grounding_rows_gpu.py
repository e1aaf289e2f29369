"""The fused grounding kernels under Triton's interpreter (numpy on the CPU); the cases are
in ``tests/grounding_rows_cases.py``.

Triton 3.6's interpreter turns a runtime scalar (a one-element array) into a loop bound with
``int(array)``, which NumPy 2.4 and later refuse ("only 0-dimensional arrays can be converted
to Python scalars", triton-lang/triton#9171, fixed after 3.6 by #9172): every case failed on a
machine with NumPy 2.5. The cases' process loads this module as a plugin, whose
:func:`pytest_configure` makes that conversion explicit, as the upstream fix does.
"""

from __future__ import annotations

import os
from typing import Any

from tests._interpreter import run_cases

PLUGIN = "tests.test_grounding_rows_gpu"


def interpreter_index_fix() -> None:
    """Make the interpreter's ``tensor.__index__`` take the one element of its array
    explicitly (``int(data.squeeze())``); once per process."""
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
    """In the cases' process only (``-p``): a test module's hooks are not run otherwise."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_index_fix()


def test_fused_grounding_rows_under_the_interpreter_match_the_reference() -> None:
    options = f"{os.environ.get('PYTEST_ADDOPTS', '')} -p {PLUGIN}".strip()
    out = run_cases("tests/grounding_rows_cases.py", PYTEST_ADDOPTS=options)
    assert "skipped" not in out, out[-2000:]
