"""Atomic file writes: the one home for replacing a file that a reader may open meanwhile."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["is_temporary_for", "write_atomic"]


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` through a temporary file in the
    same folder moved over ``path`` with :func:`os.replace`, so that a reader sees the old file
    or the new one, never half of one; the temporary file is removed if the write fails. The
    file gets the permissions of any new file (``0o666`` less the process's umask), not the
    temporary file's private ``0o600``.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "a.txt", "one\\n").read_text()
    'one\\n'
    >>> sorted(p.name for p in folder.iterdir())
    ['a.txt']
    """
    target = Path(path)
    prefix, suffix = _temporary_affixes(target.name)
    handle, temporary = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    try:
        os.chmod(temporary, 0o666 & ~_umask())
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as sink:
            sink.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _temporary_affixes(name: str) -> tuple[str, str]:
    """The prefix and suffix of :func:`write_atomic`'s temporary file for a file ``name``."""
    return f".{name}.", ".tmp"


def is_temporary_for(entry: str, name: str) -> bool:
    """Whether a file named ``entry`` is :func:`write_atomic`'s temporary file of a file
    ``name`` beside it (a write in progress, maybe by another process)."""
    prefix, suffix = _temporary_affixes(name)
    return entry.startswith(prefix) and entry.endswith(suffix)


def _umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux);
    elsewhere set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
