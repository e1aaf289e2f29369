"""Tests of rcstat.runs.rows (row files, resume plans) and of the progress helper.

Oracles: hand-written row files cut the way an interrupted write cuts them (mid-line, inside a
quoted CSV field, without the final newline).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from rcstat.progress import progress
from rcstat.runs.rows import (
    RowFileError,
    append_csv_row,
    append_jsonl,
    read_csv_rows,
    read_jsonl,
    resume_plan,
)

COLUMNS = ("id", "value", "error")


# ---------------------------------------------------------------------------- row files


def test_jsonl_cut_last_line_is_dropped_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "predictions.jsonl"
    for i in range(3):
        append_jsonl(path, {"id": f"e{i}", "value": i})
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # cut inside the third line
    with caplog.at_level(logging.WARNING, logger="rcstat.runs"):
        records = read_jsonl(path)
    assert [r["id"] for r in records] == ["e0", "e1"]
    assert f"{path}, line 3: cut-off last line" in caplog.text
    assert path.read_bytes() == whole[: whole.rfind(b'{"id": "e2"')]  # truncated in place
    append_jsonl(path, {"id": "e2", "value": 2})
    assert path.read_bytes() == whole  # the next append starts a fresh line


def test_jsonl_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}')  # complete, only the newline is missing
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b"]
    append_jsonl(path, {"id": "c"})
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b", "c"]


def test_jsonl_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a"}\n{"id": \n{"id": "c"}\n')
    with pytest.raises(RowFileError, match=r"p\.jsonl, line 2: not a row of this run"):
        read_jsonl(path)
    path.write_text('{"id": "a"}\n[1, 2]\n{"id": "c"}\n')
    with pytest.raises(RowFileError, match=r"line 2: .*a JSON list, not an object"):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "absent.jsonl") == []


@pytest.mark.parametrize(
    "cut",
    [
        lambda text: text[:-1],  # the newline of the last row is missing
        lambda text: text[: text.rindex(",")],  # cut between two fields
        lambda text: text[: text.rindex("two") + 2],  # cut inside a quoted field
    ],
)
def test_csv_cut_last_row_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture, cut) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "examples.csv"
    append_csv_row(path, COLUMNS, {"id": "a", "value": "1", "error": ""})
    append_csv_row(path, COLUMNS, {"id": "b", "value": "2", "error": "line one\nline two"})
    assert [r["error"] for r in read_csv_rows(path, COLUMNS)] == ["", "line one\nline two"]
    path.write_text(cut(path.read_text()))
    with caplog.at_level(logging.WARNING, logger="rcstat.runs"):
        rows = read_csv_rows(path, COLUMNS)
    assert rows == [{"id": "a", "value": "1", "error": ""}]
    assert f"{path}, line 3: cut-off last row" in caplog.text
    append_csv_row(path, COLUMNS, {"id": "c", "value": "3", "error": ""})
    assert [r["id"] for r in read_csv_rows(path, COLUMNS)] == ["a", "c"]


def test_csv_bad_middle_row_and_header_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "examples.csv"
    path.write_text("id,value,error\na,1,\nb,2\nc,3,\n")
    with pytest.raises(RowFileError, match=r"examples\.csv, line 3: 2 fields, expected 3"):
        read_csv_rows(path, COLUMNS)
    path.write_text('id,value,error\na,"1"x,\nc,3,\n')
    with pytest.raises(RowFileError, match="line 2: not a CSV row"):
        read_csv_rows(path, COLUMNS)
    path.write_text("id,other\na,1\n")
    with pytest.raises(RowFileError, match="line 1: header"):
        read_csv_rows(path, COLUMNS)


# ------------------------------------------------------------------------------ resuming


def test_resume_plan_keeps_redoes_and_retries() -> None:
    records = [
        {"key": "same", "example_hash": "h1", "error": None},
        {"key": "changed", "example_hash": "old", "error": None},
        {"key": "failed", "example_hash": "h3", "error": "ValueError: x"},
        {"key": "same", "example_hash": "h1", "error": None},  # a repeated line
        {"key": "elsewhere", "example_hash": "h9", "error": None},  # not asked for now
    ]
    wanted = {"same": "h1", "changed": "new", "failed": "h3", "fresh": "h4"}
    plan = resume_plan(records, wanted, key="key")
    assert plan.done == {"same"}
    assert [r["key"] for r in plan.keep] == ["same", "elsewhere"]
    assert (plan.changed, plan.retried, plan.duplicates) == (["changed"], ["failed"], ["same"])
    assert plan.dropped == 3
    kept = resume_plan(records, wanted, key="key", retry_failed=False)
    assert kept.done == {"same", "failed"} and kept.retried == []


# ------------------------------------------------------------------------------ progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_prints_plain_lines_without_a_terminal() -> None:
    log = io.StringIO()
    assert list(progress(range(40), desc="heads", unit="example", stream=log)) == list(range(40))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("heads: 0/40 example (") and lines[-1].startswith("heads: 40/40")
    assert len(lines) == 1 + 20  # the start, then every twentieth
    log = io.StringIO()
    assert list(progress(iter("ab"), desc="x", stream=log)) == ["a", "b"]  # no length
    assert log.getvalue().splitlines()[-1].startswith("x: 2 item")
    log = io.StringIO()
    assert list(progress(range(3), desc="quiet", enabled=False, stream=log)) == [0, 1, 2]
    assert log.getvalue() == ""


def test_progress_draws_a_bar_on_a_terminal() -> None:
    screen = _Terminal()
    assert list(progress(range(5), desc="bar", stream=screen)) == list(range(5))
    assert "\r" in screen.getvalue() and "bar" in screen.getvalue()
