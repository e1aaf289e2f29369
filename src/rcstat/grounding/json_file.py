"""Saving grounding objects (results, probes, head profiles) as one ``.json`` file each, and
checking the format a file says it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["check_format", "save_json"]


def save_json(path: str | Path, text: str, owner: str) -> Path:
    """Write the JSON ``text`` to ``path`` (UTF-8) and return the path.

    Raises
    ------
    ValueError
        If ``path`` does not end in ``.json``; the message names ``owner`` (e.g.
        ``"GroundingProbe.save"``).
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"{owner} writes a .json file, got {path.name!r}")
    path.write_text(text, encoding="utf-8")
    return path


def check_format(data: Any, expected: str, where: str, what: str) -> None:
    """``ValueError`` naming ``where`` unless ``data`` is an object whose ``"format"`` is
    ``expected`` (``what``: the kind of object, e.g. ``"detector"``).

    >>> check_format({"format": "x-1"}, "x-2", "a.json", "detector")
    Traceback (most recent call last):
    ...
    ValueError: a.json: not an rcstat detector (format 'x-1')
    """
    if not isinstance(data, dict) or data.get("format") != expected:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"{where}: not an rcstat {what} (format {found!r})")
