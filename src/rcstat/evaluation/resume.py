"""Resumable benchmark runs: the keys already written to a JSON-lines file."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["done_keys"]


def done_keys(path: Path, key: str) -> set[str]:
    """The ``key`` field of every line of the JSON-lines file ``path`` (empty if absent)."""
    if not path.exists():
        return set()
    return {json.loads(line)[key] for line in path.read_text().splitlines() if line.strip()}
