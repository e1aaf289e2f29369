"""Shared pieces of the dataset loaders: example types, errors, markup parser, file access.

Every loader in :mod:`rcstat.data` reads one upstream file in its *official* format and turns
each record into a typed, frozen example:

* :class:`QAExample` — a prompt (``context``), a ``question`` and reference ``answers``; used
  by the KV-compression and head-analysis tasks (SQuAD v2, QMSum, 2WikiMultihopQA).
* :class:`AttributionExample` — candidate passages (``chunks``), an ``answer`` text and the
  annotated spans of that answer with their gold chunk (:class:`AttributedSpan`); used by the
  attribution task (QuoteSum, VERI-GRAN).

Design
------
* **Strict, located errors.** A malformed record raises :class:`DatasetFormatError` naming the
  file, the record (1-based JSONL line, or the index path inside a JSON document) and the
  problem. A broken record is never skipped silently.
* **One markup grammar.** QuoteSum and VERI-GRAN mark attributed spans as ``[ k text ]``
  (SEMQA format). :func:`parse_span_markup` removes the markers exactly like the upstream
  scorer's ``strip_attribution_tokens`` (``re.sub(r'\\[ (\\d) ([^\\[\\]]*) \\]', r'\\2', t)``)
  and returns the character offsets of every span in the cleaned text, or raises
  :class:`MarkupError` on unbalanced or malformed markers.
* **Lazy reading.** JSON-lines files are parsed line by line, so ``limit`` stops early on a
  full upstream file.
* **Finding the developer slices.** :func:`find_shared_data` walks up from this file and from
  the working directory to the first folder that holds ``shared/data``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "AttributedSpan",
    "AttributionExample",
    "DatasetFormatError",
    "MarkedSpan",
    "MarkupError",
    "QAExample",
    "find_shared_data",
    "parse_span_markup",
]

T = TypeVar("T")

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    list: "a list",
    dict: "an object",
    bool: "a bool",
}


# --------------------------------------------------------------------------------- errors


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


class MarkupError(ValueError):
    """Span markup ``[ k text ]`` that cannot be parsed.

    Parameters
    ----------
    message : str
        The problem.
    position : int
        Character offset of the offending marker in the marked-up text.
    """

    def __init__(self, message: str, position: int) -> None:
        self.position = position
        super().__init__(f"{message} (at character {position})")


# ------------------------------------------------------------------------------ examples


@dataclass(frozen=True)
class QAExample:
    """A question-answering example: prompt context, question and reference answers.

    Parameters
    ----------
    id : str
        Upstream id where the dataset has one, else one derived from the file and record.
    context : str
        The text the model reads before the question (document, transcript, paragraphs).
    question : str
        The question or query.
    answers : tuple of str
        Reference answers (all acceptable); ``()`` for an unanswerable SQuAD v2 question.
    dataset : str
        The dataset name as used by :func:`rcstat.data.load_dataset`.
    meta : dict
        Dataset-specific extras (documented by each loader). Being a dict, it makes the
        example unhashable.
    """

    id: str
    context: str
    question: str
    answers: tuple[str, ...]
    dataset: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttributedSpan:
    """One annotated span of an answer and the chunk it is attributed to.

    Parameters
    ----------
    start, end : int
        ``[start, end)`` character offsets of the span in :attr:`AttributionExample.answer`.
    gold_chunk : int
        0-based index into :attr:`AttributionExample.chunks` of the gold source.
    """

    start: int
    end: int
    gold_chunk: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"span needs 0 <= start < end, got [{self.start}, {self.end})")
        if self.gold_chunk < 0:
            raise ValueError(f"gold_chunk must be >= 0, got {self.gold_chunk}")


@dataclass(frozen=True)
class AttributionExample:
    """An attribution example: candidate chunks, an answer and its attributed spans.

    Parameters
    ----------
    id : str
        Upstream id where the dataset has one, else one derived from the file and record.
    question : str
        The question the answer responds to.
    chunks : tuple of str
        The candidate passages ``p_1..p_N`` (paper eq. 10).
    answer : str
        The answer text with the span markup removed.
    units : tuple of AttributedSpan
        The annotated spans of `answer` (the attribution units), in text order; ``()`` when
        the record carries no markup.
    dataset : str
        The dataset name as used by :func:`rcstat.data.load_dataset`.
    meta : dict
        Dataset-specific extras (documented by each loader).

    Raises
    ------
    ValueError
        If a unit lies outside `answer` or points past the last chunk.
    """

    id: str
    question: str
    chunks: tuple[str, ...]
    answer: str
    units: tuple[AttributedSpan, ...]
    dataset: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for unit in self.units:
            if unit.end > len(self.answer):
                raise ValueError(
                    f"unit [{unit.start}, {unit.end}) exceeds the answer ({len(self.answer)} chars)"
                )
            if unit.gold_chunk >= len(self.chunks):
                raise ValueError(
                    f"unit gold_chunk {unit.gold_chunk} out of range for {len(self.chunks)} chunks"
                )

    @property
    def unit_texts(self) -> tuple[str, ...]:
        """The text of each unit, ``answer[start:end]``."""
        return tuple(self.answer[u.start : u.end] for u in self.units)


# -------------------------------------------------------------------------------- markup


@dataclass(frozen=True)
class MarkedSpan:
    """A span found by :func:`parse_span_markup`.

    Parameters
    ----------
    start, end : int
        ``[start, end)`` character offsets in the cleaned text.
    label : int
        The number ``k`` written in the opening marker ``[ k``.
    """

    start: int
    end: int
    label: int


_OPENER = re.compile(r"\[ (\d+) ")
_LOOKS_LIKE_OPENER = re.compile(r"\[\s*\d")
_BRACKET = re.compile(r"[\[\]]")


def parse_span_markup(
    text: str, *, strip_whitespace: bool = True
) -> tuple[str, tuple[MarkedSpan, ...]]:
    """Remove ``[ k text ]`` span markers and return the clean text and the spans.

    Parameters
    ----------
    text : str
        Text with spans marked as ``"[ " + k + " " + span + " ]"`` (QuoteSum / SEMQA markup,
        also used by VERI-GRAN): one space after ``[``, the decimal label ``k``, one space,
        the span text, one space, ``]``.
    strip_whitespace : bool, default True
        Shrink each span's offsets to exclude leading/trailing whitespace of its text (the
        clean text itself is unchanged). With ``False`` a span covers exactly the characters
        between the markers.

    Returns
    -------
    clean : str
        `text` with the markers removed — identical to the upstream scorer's
        ``strip_attribution_tokens`` (QuoteSum ``evals/scorers.py``).
    spans : tuple of MarkedSpan
        The spans in text order, with offsets into `clean`.

    Raises
    ------
    MarkupError
        On a malformed opening marker (e.g. ``[2 text ]``), a nested ``[`` inside a span, a
        closing ``]`` not preceded by a space, an unmatched ``]``, a span left open, or an
        empty span.

    Notes
    -----
    Outside spans, a literal bracket pair whose content does not start with a digit (e.g.
    ``[sic]``) is kept as text; any ``[`` followed by optional spaces and a digit must be a
    well-formed opener.

    Examples
    --------
    >>> clean, spans = parse_span_markup("[ 2 Denitrification ] releases nitrogen gas.")
    >>> clean
    'Denitrification releases nitrogen gas.'
    >>> spans
    (MarkedSpan(start=0, end=15, label=2),)
    >>> parse_span_markup("geometry[ 1  is a branch. ] The end.")[0]
    'geometry is a branch. The end.'
    """
    pieces: list[str] = []
    spans: list[MarkedSpan] = []
    clean_len = 0  # length of "".join(pieces)
    pos = 0  # next unread character of `text`
    open_at: int | None = None  # offset of the current span's opener in `text`
    open_label = 0
    span_start = 0  # offset in the clean text where the current span starts
    literal_depth = 0  # literal "[" ... "]" pairs open outside spans

    for match in _BRACKET.finditer(text):
        i = match.start()
        if text[i] == "[":
            if open_at is not None:
                raise MarkupError(f"'[' inside the span opened at character {open_at}", i)
            opener = _OPENER.match(text, i)
            if opener is None:
                if _LOOKS_LIKE_OPENER.match(text, i):
                    raise MarkupError("malformed opening marker, expected '[ k '", i)
                literal_depth += 1
                continue
            pieces.append(text[pos:i])
            clean_len += i - pos
            pos = opener.end()
            open_at, open_label, span_start = i, int(opener.group(1)), clean_len
        else:  # "]"
            if open_at is None:
                if literal_depth == 0:
                    raise MarkupError("unmatched ']'", i)
                literal_depth -= 1
                continue
            if i - 1 < pos or text[i - 1] != " ":
                raise MarkupError("closing marker must be ' ]'", i)
            pieces.append(text[pos : i - 1])
            clean_len += i - 1 - pos
            start, end = span_start, clean_len
            if strip_whitespace:
                inner = text[pos : i - 1]
                start += len(inner) - len(inner.lstrip())
                end -= len(inner) - len(inner.rstrip())
            if start >= end:
                raise MarkupError("empty span", open_at)
            spans.append(MarkedSpan(start, end, open_label))
            pos = i + 1
            open_at = None
    if open_at is not None:
        raise MarkupError("span opened here is never closed with ' ]'", open_at)
    pieces.append(text[pos:])
    return "".join(pieces), tuple(spans)


# ----------------------------------------------------------------------- record access


@dataclass(frozen=True)
class _Where:
    """A record's location in a file, for error messages and typed key access."""

    path: Path
    location: str

    def error(self, problem: str) -> DatasetFormatError:
        return DatasetFormatError(self.path, self.location, problem)

    def child(self, suffix: str) -> _Where:
        return _Where(self.path, f"{self.location}{suffix}")

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


def iter_jsonl(path: Path) -> Iterator[tuple[int, _Where, dict[str, Any]]]:
    """Yield ``(line_number, where, record)`` for every non-blank line of a JSON-lines file.

    Raises
    ------
    DatasetFormatError
        On a line that is not valid JSON, not an object, or not UTF-8 (1-based line number).
    """
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = _Where(path, f"line {number}")
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


def parse_record_markup(where: _Where, key: str, marked: str) -> tuple[str, tuple[MarkedSpan, ...]]:
    """:func:`parse_span_markup` on a record field, with errors located in the file."""
    try:
        return parse_span_markup(marked)
    except MarkupError as exc:
        raise where.error(f"bad span markup in {key!r}: {exc}") from None
