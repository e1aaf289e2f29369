"""Reading dataset files: located errors, typed record access, file lookup.

Every loader in :mod:`rcstat.data` reads one upstream file in its official format, through
:func:`load_limited`; its arguments follow one convention (:mod:`rcstat.data`). A malformed
record raises :class:`DatasetFormatError` naming the file, the record (1-based JSON-lines line,
or the index path inside a JSON document) and the problem; a broken record is never skipped
silently. JSON-lines files are parsed line by line, so ``limit`` stops early on a full upstream
file. :func:`find_shared_data` walks up from this file and from the working directory to the
first folder that holds ``shared/data`` (the developer slices).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DatasetFormatError",
    "Where",
    "check_limit",
    "data_files",
    "find_shared_data",
    "iter_jsonl",
    "keyed_records",
    "load_limited",
    "read_json",
    "resolve_file",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    list: "a list",
    dict: "an object",
    bool: "a bool",
}


class DatasetFormatError(ValueError):
    """A record of a dataset file does not follow the upstream format.

    Parameters
    ----------
    path : str or Path
        The file that was read.
    location : str
        Where in the file: ``"line 3"`` (JSON lines, 1-based) or an index path such as
        ``"data[0].paragraphs[2].qas[1]"`` (JSON documents, 0-based indices).
    problem : str
        What is wrong, e.g. ``"missing key 'question'"``.

    Attributes
    ----------
    path, location, problem
        The three parts of the message, for programmatic use.
    """

    def __init__(self, path: str | Path, location: str, problem: str) -> None:
        self.path = Path(path)
        self.location = location
        self.problem = problem
        super().__init__(f"{self.path}: {location}: {problem}")


@dataclass(frozen=True)
class Where:
    """A record's location in a file, for error messages and typed key access."""

    path: Path
    location: str

    def error(self, problem: str) -> DatasetFormatError:
        return DatasetFormatError(self.path, self.location, problem)

    def child(self, suffix: str) -> Where:
        return Where(self.path, f"{self.location}{suffix}")

    def check(self, value: Any, kind: type[T], what: str) -> T:
        """Return `value` if it is a `kind` (bool is not an int), else raise."""
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(
                f"{what} must be {_TYPE_NAMES.get(kind, kind.__name__)}, got {type(value).__name__}"
            )
        return value

    def get(self, record: Mapping[str, Any], key: str, kind: type[T]) -> T:
        """``record[key]``, checked to be a `kind`."""
        if key not in record:
            raise self.error(f"missing key {key!r}")
        return self.check(record[key], kind, f"key {key!r}")

    def get_optional(self, record: Mapping[str, Any], key: str, kind: type[T], default: T) -> T:
        """``record[key]`` checked to be a `kind`, or `default` when absent."""
        if key not in record:
            return default
        return self.check(record[key], kind, f"key {key!r}")

    def text(self, record: Mapping[str, Any], key: str, *, non_empty: bool = False) -> str:
        """``record[key]`` as a string; with `non_empty`, a blank string is an error."""
        value = self.get(record, key, str)
        if non_empty and not value.strip():
            raise self.error(f"key {key!r} is empty")
        return value

    def strings(self, value: Any, what: str) -> list[str]:
        """`value` checked to be a list of strings."""
        items = self.check(value, list, what)
        for j, item in enumerate(items):
            self.check(item, str, f"{what}[{j}]")
        return items


def iter_jsonl(path: Path) -> Iterator[tuple[int, Where, dict[str, Any]]]:
    """Yield ``(line_number, where, record)`` for every non-blank line of a JSON-lines file.

    Raises
    ------
    DatasetFormatError
        On a line that is not valid JSON, not an object, or not UTF-8 (1-based line number).
    """
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = Where(path, f"line {number}")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise where.error(f"not valid UTF-8: {exc}") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise where.error(f"invalid JSON: {exc}") from None
            yield number, where, where.check(record, dict, "the record")


def keyed_records(
    path: Path,
    records: list[Any],
    *,
    label: str,
    key: str,
    read_key: Callable[[Where, dict[str, Any]], K],
    what: str = "the record",
) -> Iterator[tuple[K, Where, dict[str, Any]]]:
    """Yield ``(key value, where, record)`` for a JSON list of objects with a unique key.

    ``label`` names record ``i`` as ``label.format(i)`` (e.g. ``"record {}"``), ``what`` names
    a record in the error of one that is not an object; ``read_key`` reads the key ``key`` of a
    record. The ``where`` yielded names the record and its key value: ``"record 3 (id 'x')"``.

    Raises
    ------
    DatasetFormatError
        On a record that is not an object, a bad key (as ``read_key`` raises), or a key value
        seen before (the message names the earlier record).
    """
    seen: dict[K, int] = {}
    for i, record in enumerate(records):
        where = Where(path, label.format(i))
        record = where.check(record, dict, what)
        value = read_key(where, record)
        if value in seen:
            raise where.error(f"duplicate {key} {value!r} (also {label.format(seen[value])})")
        seen[value] = i
        yield value, Where(path, f"{label.format(i)} ({key} {value!r})"), record


def read_json(path: Path) -> Any:
    """Parse a whole JSON document, raising :class:`DatasetFormatError` on invalid JSON."""
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(path, "file", f"not valid UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(
            path, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None


def resolve_file(path: str | Path, dataset: str, suffix: str) -> Path:
    """The data file to read: `path` itself, or the only ``*{suffix}`` file in a folder.

    Parameters
    ----------
    path : str or Path
        A file, or a folder holding exactly one file ending in `suffix` (a shared slice).
    dataset : str
        Dataset name, for messages.
    suffix : str
        File ending looked for in a folder, e.g. ``".jsonl"``.

    Raises
    ------
    FileNotFoundError
        If `path` does not exist or a folder holds no such file.
    ValueError
        If a folder holds several candidate files (pass the file itself).
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise FileNotFoundError(f"{dataset}: no such file or folder: {path}")
    candidates = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(suffix))
    if not candidates:
        raise FileNotFoundError(f"{dataset}: no '*{suffix}' file in {path}; pass the data file")
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates)
        raise ValueError(f"{dataset}: several '*{suffix}' files in {path} ({names}); pass one")
    return candidates[0]


def check_limit(limit: int | None) -> int | None:
    """Validate a ``limit`` argument: ``None`` or an integer >= 0."""
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")
    return limit


def data_files(path: str | Path, dataset: str, suffix: str) -> list[Path]:
    """The data files to read: `path` itself, or every ``*{suffix}`` file of a folder.

    Parameters
    ----------
    path : str or Path
        A data file, or a folder (a shared slice) whose data files are all read.
    dataset : str
        Dataset name, for messages.
    suffix : str
        File ending looked for in a folder, e.g. ``".json"``.

    Returns
    -------
    list of Path
        ``[path]`` for a file; for a folder its ``*{suffix}`` files in natural name order
        (digit runs compare as numbers: ``batch_2`` before ``batch_10``).

    Raises
    ------
    FileNotFoundError
        If `path` does not exist or a folder holds no such file.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.exists():
        raise FileNotFoundError(f"{dataset}: no such file or folder: {path}")
    files = [p for p in path.iterdir() if p.is_file() and p.name.endswith(suffix)]
    if not files:
        raise FileNotFoundError(f"{dataset}: no '*{suffix}' file in {path}; pass the data file")
    return sorted(files, key=_natural_key)


def _natural_key(path: Path) -> list[Any]:
    # re.split with a group alternates text and digit runs, so equal positions share a type
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def load_limited(
    path: str | Path,
    dataset: str,
    suffix: str,
    read: Callable[[Path], Iterable[T]],
    limit: int | None,
    *,
    every_file: bool = False,
) -> list[T]:
    """What a loader returns: the examples that `read` yields from the data file of `path`
    (:func:`resolve_file`) or, with `every_file`, from every data file of a folder in natural
    name order (:func:`data_files`), at most `limit` of them (:func:`check_limit`).

    The files are opened one after the other and `read` is consumed lazily, so a loader stops
    reading as soon as it has `limit` examples (a JSON-lines file line by line).
    """
    limit = check_limit(limit)
    if every_file:
        files = data_files(path, dataset, suffix)
    else:
        files = [resolve_file(path, dataset, suffix)]
    return list(islice(chain.from_iterable(map(read, files)), limit))


def find_shared_data(start: str | Path | None = None) -> Path | None:
    """The nearest ``shared/data`` folder above this package or the working directory.

    Parameters
    ----------
    start : str or Path, optional
        Where to start walking up instead (the folder itself is tried first).

    Returns
    -------
    Path or None
        The first ``<ancestor>/shared/data`` that is a folder, or ``None``.
    """
    origins = [Path(start)] if start is not None else [Path(__file__), Path.cwd()]
    for origin in origins:
        origin = origin.resolve()
        for folder in (origin, *origin.parents):
            candidate = folder / "shared" / "data"
            if candidate.is_dir():
                return candidate
    return None
