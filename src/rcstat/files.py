"""Atomic file writes: the one home for replacing a file that a reader may open meanwhile."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomic"]


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
    handle, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    try:
        os.chmod(temporary, 0o666 & ~_umask())
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as sink:
            sink.write(text)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


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
