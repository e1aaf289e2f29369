"""The fused grounding kernels under Triton's interpreter (numpy on the CPU).

``tests/grounding_rows_cases.py`` holds the cases; they run in a fresh process because the
interpreter is chosen when ``triton`` is first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_fused_grounding_rows_under_the_interpreter_match_the_reference() -> None:
    pytest.importorskip("triton")
    env = os.environ | {"TRITON_INTERPRET": "1", "RCSTAT_TRITON": "1"}
    case = "tests/grounding_rows_cases.py"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", case],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
