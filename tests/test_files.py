"""rcstat.files.write_atomic: a reader sees the old file or the new one, never half of one.

Oracles: the file system itself — a reader that opened the old file keeps reading it whole, a
hard link to the old file keeps its bytes (the target is a new file moved over the name, not
the old one rewritten), nothing else is left in the folder, and a failure before the move
leaves the old file as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rcstat import files
from rcstat.files import write_atomic


def test_a_new_file_is_written(tmp_path: Path) -> None:
    target = tmp_path / "new.txt"
    assert write_atomic(target, "one\r\ntwo\n") == target
    assert target.read_bytes() == b"one\r\ntwo\n"  # UTF-8, newlines as given
    assert [p.name for p in tmp_path.iterdir()] == ["new.txt"]
    assert write_atomic(str(tmp_path / "é.txt"), "ü").read_bytes() == "ü".encode()


def test_the_old_file_is_replaced_not_rewritten(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    old = "old contents\n" * 100
    target.write_text(old, encoding="utf-8")
    link = tmp_path / "link.json"
    os.link(target, link)  # a second name of the old file
    before = os.stat(target).st_ino
    with target.open(encoding="utf-8") as reader:
        reader.read(5)  # a reader in the middle of the old file
        write_atomic(target, "new\n")
        assert reader.read() == old[5:]  # it still reads the old file, whole
    assert target.read_text(encoding="utf-8") == "new\n"
    assert link.read_text(encoding="utf-8") == old  # the old file itself is untouched
    assert os.stat(target).st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "results.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    target.write_text("old\n", encoding="utf-8")
    moves: list[tuple[str, str]] = []

    def refuse(source: str, destination: str) -> None:
        moves.append((str(source), str(destination)))
        raise OSError("no space left on device")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError, match="no space left"):
        write_atomic(target, "new\n")
    assert len(moves) == 1 and moves[0][1] == str(target)
    assert Path(moves[0][0]).parent == tmp_path  # the temporary lay in the target's folder
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_the_file_gets_the_users_umask(tmp_path: Path, mask: int) -> None:
    """Like any new file (``open``): ``0o666`` less the umask, not the temporary's ``0o600``."""
    previous = os.umask(mask)
    try:
        written = write_atomic(tmp_path / "run.json", "{}\n")
        plain = tmp_path / "plain.txt"
        plain.write_text("x", encoding="utf-8")
    finally:
        os.umask(previous)
    assert written.stat().st_mode & 0o777 == 0o666 & ~mask == plain.stat().st_mode & 0o777
