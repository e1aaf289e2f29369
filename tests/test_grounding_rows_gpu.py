"""The fused grounding kernels under Triton's interpreter (numpy on the CPU); the cases are
in ``tests/grounding_rows_cases.py``."""

from __future__ import annotations

import pytest

from tests._interpreter import run_cases


@pytest.mark.long(seconds=95)  # under the interpreter, one core
def test_fused_grounding_rows_under_the_interpreter_match_the_reference() -> None:
    out = run_cases("tests/grounding_rows_cases.py")
    assert "skipped" not in out, out[-2000:]
