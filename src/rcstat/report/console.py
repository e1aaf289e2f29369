"""Console helpers shared by the commands: byte sizes and the mark of a cut answer (progress
lines live in :mod:`rcstat.progress`, low enough for every long loop)."""

from __future__ import annotations

__all__ = ["CUT_MARK", "format_bytes"]

#: Appended to an answer that was cut at the token limit.
CUT_MARK = " [cut at the token limit]"


def format_bytes(count: int) -> str:
    """A byte count for people.

    >>> format_bytes(512), format_bytes(1536), format_bytes(3 * 1024**3)
    ('512 B', '1.5 KiB', '3.0 GiB')
    """
    value = float(count)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
