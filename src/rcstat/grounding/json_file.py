"""Saving grounding objects (results, probes, head profiles) as one ``.json`` file each."""

from __future__ import annotations

from pathlib import Path

__all__ = ["save_json"]


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
