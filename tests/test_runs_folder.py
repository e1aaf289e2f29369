"""Tests of rcstat.runs.folder.check_writable: an output folder that cannot be written is refused
before any work, naming the option, and the check leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rcstat.runs.folder import check_writable, staged_output


def test_a_writable_folder_passes_and_nothing_is_left(tmp_path: Path) -> None:
    existing = tmp_path / "out"
    existing.mkdir()
    (existing / "kept.txt").write_text("x")
    check_writable(existing)
    check_writable(tmp_path / "new" / "deeper" / "out")  # made later, where a parent exists
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in existing.iterdir()] == ["kept.txt"]


def test_a_file_on_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"^--out .*file/a/out: .*file is a file, not a folder"):
        check_writable(tmp_path / "file" / "a" / "out")


def test_a_folder_that_refuses_writes_is_named_with_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()

    def refuse(*args: Any, dir: Any = None, **kwargs: Any) -> str:
        if Path(dir) == out:
            raise PermissionError(13, "Permission denied", str(Path(dir) / ".tmp123"))
        return str(Path(dir) / ".made")

    monkeypatch.setattr("rcstat.runs.folder.tempfile.mkdtemp", refuse)
    with pytest.raises(ValueError) as err:
        check_writable(out, "--out")
    assert str(err.value) == (
        f"--out {out} cannot be written ({out}: Permission denied); choose a folder you can "
        "write to"
    )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes anyway")
def test_a_read_only_folder_is_refused_before_staging_would_fail(tmp_path: Path) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="cannot be written"):
            check_writable(parent / "out")
        with pytest.raises(OSError), staged_output(parent / "out", "ground"):
            pass  # what the check spares the user: a failure only at the end
    finally:
        parent.chmod(0o755)
