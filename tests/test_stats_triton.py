"""The Triton kernels of the CUDA path under Triton's interpreter (numpy on the CPU); the
cases are in ``tests/triton_cases.py``."""

from __future__ import annotations

import pytest

from tests._interpreter import run_cases


@pytest.mark.long(seconds=180)  # under the interpreter, one core
def test_kernels_under_the_interpreter_match_the_oracles() -> None:
    out = run_cases("tests/triton_cases.py")
    # the only skip: the bucket-table case when sets are searched whole
    assert "1 skipped" in out, out[-2000:]
