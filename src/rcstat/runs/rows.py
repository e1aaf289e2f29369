"""Row files that survive Ctrl-C, atomic writes, and the plan of a resumed run.

A resumable run (:mod:`rcstat.runs.job`) grows its row files one item at a time:

* **Append-only, one write per item** (:func:`append_jsonl`, :func:`append_csv_row`), so an
  interruption can only cut the last line: :func:`read_jsonl` / :func:`read_csv_rows` drop a
  cut last line with a warning naming the file and the line, and raise :class:`RowFileError`
  naming them for a bad line anywhere else.
* **Atomic rewrites**: every file rcstat replaces goes through :func:`rcstat.files.write_atomic` (a
  temporary sibling, then ``os.replace``) — the one home of atomic writes.
* **Items are known by key and content**: each item's rows carry the content hash of the
  inputs that produced them; :func:`resume_plan` drops the rows of an item whose content
  changed under the same key (it is computed again) and, unless told otherwise, those of failed
  items (they are retried).

Warnings go through the ``rcstat.runs`` logger (printed on standard error when logging is not
configured). The module imports only the standard library.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcstat.files import write_atomic

__all__ = [
    "EXAMPLE_HASH",
    "ResumePlan",
    "RowFile",
    "RowFileError",
    "append_csv_row",
    "append_jsonl",
    "drop_cut_last_line",
    "read_csv_rows",
    "read_jsonl",
    "resume_plan",
    "write_csv_rows",
    "write_json",
    "write_jsonl",
]

logger = logging.getLogger("rcstat.runs")

#: The field of a row that holds the content hash of its example.
EXAMPLE_HASH = "example_hash"


class RowFileError(ValueError):
    """A row file has a malformed line that is not the last one (not an interrupted write)."""


def write_json(path: Path, data: Mapping[str, Any], *, indent: int | None = 1) -> None:
    """Write ``data`` as JSON to ``path`` atomically (see :func:`rcstat.files.write_atomic`)."""
    write_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def _truncate(path: Path, offset: int, line: int, why: str) -> None:
    with path.open("r+b") as handle:
        handle.truncate(offset)
    logger.warning("%s, line %d: %s; dropped (its example is computed again)", path, line, why)


def drop_cut_last_line(path: Path) -> None:
    """Drop a last line without its newline (a write cut by an interruption), with a warning
    naming the file and the line."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        start = data.rfind(b"\n") + 1
        _truncate(path, start, data.count(b"\n") + 1, "cut-off last line (an interrupted write)")


def read_jsonl(path: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The records of a JSON-lines row file (empty when absent).

    A last line that is not a JSON object (a write cut by an interruption) is removed from the
    file with a warning naming the file and the line; a complete last line missing only its
    newline gets it back. With ``repair=False`` the file is only read (a cut last line is
    skipped): for files another process may be writing.

    Raises
    ------
    RowFileError
        A line before the last one is not a JSON object (the message names file and line).
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records: list[dict[str, Any]] = []
    offset = 0
    for number, line in enumerate(lines):
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"a JSON {type(record).__name__}, not an object")
            except ValueError as err:
                if number == last:
                    if repair:
                        why = "cut-off last line (an interrupted write)"
                        _truncate(path, offset, number + 1, why)
                    return records
                raise RowFileError(
                    f"{path}, line {number + 1}: not a row of this run ({err}); remove or fix "
                    "that line to resume, or choose another output folder"
                ) from err
            records.append(record)
        offset += len(line) + 1
    if repair and data and not data.endswith(b"\n"):
        with path.open("ab") as handle:
            handle.write(b"\n")
    return records


def _json_line(record: Mapping[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n"


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record as one line, in one write, flushed."""
    with path.open("a", encoding="utf-8") as sink:
        sink.write(_json_line(record))
        sink.flush()


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace a JSON-lines file atomically."""
    write_atomic(path, "".join(_json_line(r) for r in records))


def read_csv_rows(
    path: Path, columns: Sequence[str], *, repair: bool = True
) -> list[dict[str, str]]:
    """The rows of a CSV row file with header ``columns`` (empty when absent).

    A last record that is cut (no final newline, or too few fields) is removed with a warning
    naming the file and the line; with ``repair=False`` it is only skipped (the file is read,
    never changed).

    Raises
    ------
    RowFileError
        The header is not ``columns``, or a record before the last one has the wrong number
        of fields (the message names file and line).
    """
    if not path.is_file() or path.stat().st_size == 0:
        return []
    data = path.read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 0x0A]  # line → byte offset
    text = data.decode("utf-8", errors="replace")
    physical = len(starts) - (1 if data.endswith(b"\n") else 0)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[tuple[int, list[str]]] = []  # (first line, fields)
    line = 1
    try:
        for fields in reader:
            records.append((line, fields))
            line = reader.line_num + 1
    except csv.Error as err:
        if reader.line_num < physical:  # malformed before the end: not an interrupted write
            raise RowFileError(
                f"{path}, line {reader.line_num}: not a CSV row ({err}); remove or fix that "
                "line to resume, or choose another output folder"
            ) from err
        records.append((line, []))  # a quoted field left open by a cut write
        cut_at_end = True
    else:
        cut_at_end = False
    if not records or records[0][1] != list(columns):
        raise RowFileError(
            f"{path}, line 1: header {records[0][1] if records else []} is not "
            f"{list(columns)}; not a row file of this run"
        )
    rows: list[dict[str, str]] = []
    body = records[1:]
    for index, (first, fields) in enumerate(body):
        is_last = index == len(body) - 1
        if not fields and not (is_last and cut_at_end):
            continue
        cut = len(fields) != len(columns)
        if is_last and (cut or cut_at_end or not data.endswith(b"\n")):
            if repair:
                _truncate(path, starts[first - 1], first, "cut-off last row (an interrupted write)")
            return rows
        if cut:
            raise RowFileError(
                f"{path}, line {first}: {len(fields)} fields, expected {len(columns)}; "
                "remove or fix that line to resume, or choose another output folder"
            )
        rows.append(dict(zip(columns, fields, strict=True)))
    return rows


def _csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def append_csv_row(path: Path, columns: Sequence[str], row: Mapping[str, Any]) -> None:
    """Append one CSV row in one write (the header first when the file is new or empty)."""
    header = not path.is_file() or path.stat().st_size == 0
    with path.open("a", encoding="utf-8", newline="") as sink:
        sink.write(_csv_text(columns, [row], header))
        sink.flush()


def write_csv_rows(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Replace a CSV row file atomically."""
    write_atomic(path, _csv_text(columns, rows, True))


@dataclass(frozen=True)
class RowFile:
    """One row file of a run: its name, the field naming a row's key and, for a CSV file, its
    header (``None``: JSON lines). The ``commit`` file's row marks a key done; it carries the
    key's content hash in ``hash_field`` and, for a failed item, the error in ``error_field``."""

    name: str
    key: str
    columns: tuple[str, ...] | None = None
    commit: bool = False
    hash_field: str = EXAMPLE_HASH
    error_field: str = "error"

    def read(self, folder: Path) -> list[dict[str, Any]]:
        """The rows in ``folder``, read only (a cut last line is skipped, never truncated:
        another process may be writing the file)."""
        path = folder / self.name
        if self.columns is None:
            return read_jsonl(path, repair=False)
        return list(read_csv_rows(path, self.columns, repair=False))

    def write(self, folder: Path, rows: Sequence[Mapping[str, Any]]) -> None:
        path = folder / self.name
        if self.columns is None:
            write_jsonl(path, rows)
        else:
            write_csv_rows(path, self.columns, rows)

    def read_for_resume(self, folder: Path) -> list[dict[str, Any]]:
        """The rows in ``folder``, a line cut by an interruption removed from the file (for
        CSV: first a last line without its newline, then a last record cut short)."""
        path = folder / self.name
        if self.columns is None:
            return read_jsonl(path)
        drop_cut_last_line(path)
        return list(read_csv_rows(path, self.columns))

    def append(self, folder: Path, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows`` in one write (see :func:`append_jsonl`, :func:`append_csv_row`)."""
        path = folder / self.name
        if self.columns is None:
            text = "".join(_json_line(row) for row in rows)
        else:
            header = not path.is_file() or path.stat().st_size == 0
            text = _csv_text(self.columns, rows, header)
        with path.open("a", encoding="utf-8", newline="") as sink:
            sink.write(text)
            sink.flush()


# ------------------------------------------------------------------------------ resuming


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run keeps and what it computes again.

    Attributes
    ----------
    keep : list of dict
        Records still valid: this call's finished items with unchanged content (and failed
        ones when not retried), and every record of items this call does not ask for.
    done : set of str
        Keys that need no work.
    changed, retried, duplicates : list of str
        Keys whose records were dropped: the example's content changed, the item failed and
        is retried, or a repeated record of a key.
    """

    keep: list[dict[str, Any]]
    done: set[str]
    changed: list[str]
    retried: list[str]
    duplicates: list[str]

    @property
    def dropped(self) -> int:
        return len(self.changed) + len(self.retried) + len(self.duplicates)


def resume_plan(
    records: Iterable[Mapping[str, Any]],
    wanted: Mapping[str, str],
    *,
    key: str,
    retry_failed: bool = True,
    failed: str = "error",
    hash_field: str = EXAMPLE_HASH,
) -> ResumePlan:
    """Sort a run's records into kept and dropped for the items ``wanted`` (key → hash).

    A record of a wanted key is kept when its ``hash_field`` is the wanted hash and it
    did not fail (its ``failed`` field is empty) — or failed and ``retry_failed`` is off; the
    first such record of a key wins. Records of other keys are kept as they are.
    """
    keep: list[dict[str, Any]] = []
    done: set[str] = set()
    changed: list[str] = []
    retried: list[str] = []
    duplicates: list[str] = []
    for record in records:
        name = str(record.get(key))
        if name not in wanted:
            keep.append(dict(record))  # an item this call does not ask for: left as it is
        elif record.get(hash_field) != wanted[name]:
            changed.append(name)
        elif name in done:
            duplicates.append(name)
        elif record.get(failed) and retry_failed:
            retried.append(name)
        else:
            keep.append(dict(record))
            done.add(name)
    if changed:
        logger.warning(
            "%d item(s) whose example changed since their rows were written are computed "
            "again (first: %s)",
            len(set(changed)),
            changed[0],
        )
    if retried:
        logger.warning("%d failed item(s) are tried again (first: %s)", len(retried), retried[0])
    return ResumePlan(keep, done, changed, retried, duplicates)
