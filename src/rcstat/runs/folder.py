"""Output-folder safety: rcstat writes only into folders it owns, and replaces them whole.

* An output folder is **claimed** by the command that writes it: :data:`OUTPUT_MARKER`
  (``.rcstat-output.json``) names the command and the files it wrote. A folder that holds
  files but no marker, or the marker of another command, is refused
  (:func:`check_output_folder`) — rcstat never replaces files it did not write.
* Results are **staged** (:func:`staged_output`): written into a temporary sibling first and
  moved into the folder only when the command succeeded; files the command wrote before and
  does not write again are removed, except the rows of a resumable run (``keep``).
* A resumable run writes its rows into the folder as it goes; it claims the folder first
  (:func:`claim_output_folder`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rcstat.files import is_temporary_for
from rcstat.runs.rows import write_json

__all__ = [
    "OUTPUT_MARKER",
    "check_output_folder",
    "check_writable",
    "claim_output_folder",
    "staged_output",
]

#: The file that marks a folder as written by an rcstat command (and lists what it wrote).
OUTPUT_MARKER = ".rcstat-output.json"


def check_output_folder(out: Path, command: str) -> None:
    """Refuse an ``--out`` that holds files rcstat's ``command`` did not write.

    An absent or empty folder, or one whose :data:`OUTPUT_MARKER` names the same command, is
    fine (the command's previous files there are replaced as a whole).
    """
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if not out.is_dir() or all(_claiming(entry) for entry in out.iterdir()):
        return
    marker = _read_marker(out)
    if marker is None:
        raise ValueError(
            f"--out {out} is not empty and was not written by rcstat; choose a new or empty "
            "folder (rcstat never replaces files it did not write)"
        )
    if marker.get("command") != command:
        raise ValueError(
            f"--out {out} holds the output of `rcstat {marker.get('command')}`, not of "
            f"`rcstat {command}`; choose another folder"
        )


def check_writable(out: Path, option: str = "--out") -> None:
    """Refuse, before any work, an output folder that cannot be written (``ValueError`` naming
    ``option``): a temporary folder is made and removed where the results will be written —
    in ``out`` when it exists, and beside it, where :func:`staged_output` stages them (the
    nearest folder that exists: the missing ones are made there).
    """
    folders = [out] if out.is_dir() else []
    beside = out.parent
    while not beside.exists() and beside != beside.parent:
        beside = beside.parent
    if not beside.is_dir():
        raise ValueError(f"{option} {out}: {beside} is a file, not a folder")
    for folder in [*folders, beside]:
        try:
            Path(tempfile.mkdtemp(prefix=".rcstat-write-check.", dir=folder)).rmdir()
        except OSError as err:
            raise ValueError(
                f"{option} {out} cannot be written ({folder}: {err.strerror or err}); choose a "
                "folder you can write to"
            ) from err


def _claiming(entry: Path) -> bool:
    """Whether ``entry`` is the marker being written by another process claiming the folder
    (the temporary file of :func:`~rcstat.files.write_atomic`): the processes of one
    data-parallel run claim its folder at the same time."""
    return is_temporary_for(entry.name, OUTPUT_MARKER)


def _read_marker(out: Path) -> dict[str, Any] | None:
    path = out / OUTPUT_MARKER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@contextmanager
def staged_output(out: Path, command: str, *, keep: Sequence[str] = ()) -> Iterator[Path]:
    """Yield a temporary folder; on success move its files into ``out``, else delete it.

    ``out`` is checked by :func:`check_output_folder` first. Files that this command wrote
    there before and does not write again are removed (no stale results beside new ones),
    except those named in ``keep`` (the rows of a resumable run). The files written are
    listed in ``out``'s :data:`OUTPUT_MARKER`.
    """
    check_output_folder(out, command)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield stage
        out.mkdir(parents=True, exist_ok=True)
        previous = _read_marker(out) or {}
        written = sorted(item.name for item in stage.iterdir())
        for name in previous.get("files", []):
            stale = out / str(name)
            if name not in written and name not in keep and stale.is_file():
                stale.unlink()
        for name in written:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
            shutil.move(str(stage / name), target)
        write_json(out / OUTPUT_MARKER, {"command": command, "files": sorted({*written, *keep})})
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def claim_output_folder(out: Path, command: str) -> None:
    """Check ``out`` (see :func:`check_output_folder`) and mark it as ``command``'s, for
    commands that write rows into ``out`` as they go (resumable runs)."""
    check_output_folder(out, command)
    out.mkdir(parents=True, exist_ok=True)
    if _read_marker(out) is None:
        write_json(out / OUTPUT_MARKER, {"command": command, "files": []})
