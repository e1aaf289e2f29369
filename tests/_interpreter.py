"""Run a file of Triton kernel cases under Triton's interpreter (numpy on the CPU).

The interpreter is chosen when ``triton`` is first imported, so the cases run in a fresh
pytest process with ``TRITON_INTERPRET=1``; their file names do not start with ``test_`` so
that the main run does not collect them. Every such process loads
:mod:`tests._interpreter_plugin` (a fix of Triton 3.6's interpreter under NumPy >= 2.4).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = "tests._interpreter_plugin"


def run_cases(cases: str, **env: str) -> str:
    """Run ``cases`` (a path from the repository root) under the interpreter with ``env``
    added; fail with its output unless every case passed. Returns pytest's output."""
    pytest.importorskip("triton")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", PLUGIN, cases],
        cwd=ROOT,
        env=os.environ | {"TRITON_INTERPRET": "1", "RCSTAT_TRITON": "1"} | env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert " passed" in run.stdout, run.stdout[-2000:]
    return run.stdout
