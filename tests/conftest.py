"""Fixtures shared by several test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from rcstat.press.extra import has_kvpress
from tests._browser import CHROMIUM_NAMES, find_chromium
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

# Modules that import kvpress at import time (all their tests carry the `press` marker): not
# collected where the rcstat[press] extra is absent (the core-only CI environment).
_NEEDS_KVPRESS = [
    "test_cli_compress.py",
    "test_evaluation_kv.py",
    "test_evaluation_kv_bench.py",
    "test_evaluation_kv_diagnosis.py",
    "test_press_answer.py",
    "test_press_keep_masks.py",
    "test_press_rcstat_press.py",
]
collect_ignore = [] if has_kvpress() else _NEEDS_KVPRESS


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama and the tiny tokenizer, saved as a local safetensors checkpoint."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(path, safe_serialization=True)
    make_tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def chromium() -> str:
    """A headless-capable Chromium on PATH (the browser tests are skipped without one)."""
    found = find_chromium()
    if found is None:
        pytest.skip(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)})")
    return found
