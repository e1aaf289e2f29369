"""Users' own (context, response) pairs in JSON lines, one object per line.

* :func:`load_pairs` reads unlabelled pairs for ``rcstat ground --pairs``:
  ``{"context", "response", "question"?, "id"?}`` → :class:`ResponsePair`.
* :func:`load_labelled_pairs` reads labelled pairs for ``rcstat bench grounding --dataset
  jsonl``: ``{"id", "context", "response", "question"?, "label": 0|1, "spans"?: [[start,
  end], ...], "group"?}`` → :class:`~rcstat.data.examples.GroundingExample`, the type the
  FaithBench loader returns, so that the benchmark runs unchanged.

Mapping of a labelled line to :class:`GroundingExample`
-------------------------------------------------------
* ``label`` 1 means hallucinated / unsupported (``label=True``), 0 supported.
* ``spans`` are ``[start, end)`` character offsets of the unsupported text in ``response``;
  each becomes a :class:`~rcstat.data.examples.LabeledSpan` labelled ``"Unwanted"`` (the
  FaithBench label of unsupported text), so that the span-level evaluation reads them.
* ``group`` (default: the ``id``) keeps pairs that share it in one cross-validation fold.
* ``meta`` holds ``line`` (1-based) and ``question`` when the line has one.

A malformed line raises :class:`~rcstat.data.records.DatasetFormatError` naming the file, the
line and the expected format; ids must be unique within a file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcstat.data.examples import GroundingExample, LabeledSpan
from rcstat.data.records import DatasetFormatError, Where, iter_jsonl, load_limited

__all__ = ["LABELLED_FORMAT", "PAIRS_FORMAT", "ResponsePair", "load_labelled_pairs", "load_pairs"]

DATASET = "jsonl"
#: The line format of :func:`load_pairs`, for error messages.
PAIRS_FORMAT = '{"context": str, "response": str, "question"?: str, "id"?: str}'
#: The line format of :func:`load_labelled_pairs`, for error messages.
LABELLED_FORMAT = (
    '{"id": str, "context": str, "response": str, "question"?: str, "label": 0|1, '
    '"spans"?: [[start, end], ...], "group"?: str}'
)
#: The label of a span of unsupported text (FaithBench's, see :mod:`rcstat.data.faithbench`).
UNSUPPORTED_LABEL = "Unwanted"


@dataclass(frozen=True)
class ResponsePair:
    """One unlabelled pair: ``id`` (the line's, or ``"line-<n>"``), ``context``, ``response``,
    ``question`` (None when the line has none) and its 1-based ``line``."""

    id: str
    context: str
    response: str
    question: str | None
    line: int


def load_pairs(path: str | Path, *, limit: int | None = None) -> list[ResponsePair]:
    """Read unlabelled pairs (format :data:`PAIRS_FORMAT`) from a JSON-lines file.

    Raises
    ------
    DatasetFormatError
        A line that is not a JSON object, a missing, empty or mistyped key, or a duplicate id
        (the message names the line and the expected format).
    FileNotFoundError
        If ``path`` does not exist.
    """
    try:
        return load_limited(path, DATASET, ".jsonl", _iter_pairs, limit)
    except DatasetFormatError as err:
        raise DatasetFormatError(
            err.path, err.location, f"{err.problem} (expected: {PAIRS_FORMAT})"
        ) from err


def load_labelled_pairs(path: str | Path, *, limit: int | None = None) -> list[GroundingExample]:
    """Read labelled pairs (format :data:`LABELLED_FORMAT`) as grounding examples.

    Raises
    ------
    DatasetFormatError
        As :func:`load_pairs` (:func:`rcstat.data.load_dataset` adds the expected format),
        and a label other than 0/1 or a span that is not ``[start, end]`` with
        ``0 <= start < end <= len(response)``.
    FileNotFoundError
        If ``path`` does not exist.
    """
    return load_limited(path, DATASET, ".jsonl", _iter_labelled, limit)


def _lines(path: Path, id_required: bool) -> Iterator[tuple[int, Where, dict[str, Any], str]]:
    """Each line with its checked id (``line-<n>`` when optional and absent)."""
    seen: dict[str, int] = {}
    for number, where, record in iter_jsonl(path):
        if id_required or "id" in record:
            item = where.text(record, "id", non_empty=True)
        else:
            item = f"line-{number}"
        if item in seen:
            raise where.error(f"duplicate id {item!r} (also line {seen[item]})")
        seen[item] = number
        yield number, where, record, item


def _texts(where: Where, record: dict[str, Any]) -> tuple[str, str, str | None]:
    context = where.text(record, "context", non_empty=True)
    response = where.text(record, "response", non_empty=True)
    question: str | None = where.get_optional(record, "question", str, None)
    if question is not None and not question.strip():
        raise where.error("key 'question' is empty (leave it out instead)")
    return context, response, question


def _iter_pairs(path: Path) -> Iterator[ResponsePair]:
    for number, where, record, item in _lines(path, id_required=False):
        context, response, question = _texts(where, record)
        yield ResponsePair(item, context, response, question, number)


def _iter_labelled(path: Path) -> Iterator[GroundingExample]:
    for number, where, record, item in _lines(path, id_required=True):
        context, response, question = _texts(where, record)
        label = where.get(record, "label", int)
        if label not in (0, 1):
            raise where.error(f"key 'label' must be 0 or 1 (1 = unsupported), got {label}")
        spans = []
        for j, span in enumerate(where.get_optional(record, "spans", list, [])):
            if not (
                isinstance(span, list)
                and len(span) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in span)
                and 0 <= span[0] < span[1] <= len(response)
            ):
                raise where.error(
                    f"spans[{j}] must be [start, end] with 0 <= start < end <= "
                    f"{len(response)} (the response's length), got {span!r}"
                )
            spans.append(LabeledSpan(span[0], span[1], (UNSUPPORTED_LABEL,)))
        group = where.get_optional(record, "group", str, item)
        meta: dict[str, Any] = {"line": number}
        if question is not None:
            meta["question"] = question
        yield GroundingExample(
            item, context, response, bool(label), group, DATASET, tuple(spans), meta
        )
