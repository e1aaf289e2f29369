"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

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

# Under pytest-xdist (`make test` runs one worker a core), each worker keeps its share of the
# cores for torch's own threads instead of every worker taking them all.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, torch.get_num_threads() // int(workers)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with ``long`` tests first, longest first (each file by its longest mark's
    ``seconds``, measured on two cores): `make test`'s workers take a file at a time
    (``--dist loadfile``), so the rest of the suite runs beside the long files and the
    workers finish together."""
    longest: dict[Path, float] = {}
    for item in items:
        for mark in item.iter_markers("long"):
            longest[item.path] = max(longest.get(item.path, 0.0), mark.kwargs["seconds"])
    items.sort(key=lambda item: -longest.get(item.path, 0.0))


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
