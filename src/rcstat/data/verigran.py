"""VERI-GRAN loader: one :class:`~rcstat.data.examples.AttributionExample` per statement.

Reads the upstream JSON-lines files (``verifiability_granular_{dev,test}.jsonl``), one
statement per line: ``question`` (str), ``summary`` (str, the whole engine answer with the
annotated spans marked ``[ N text ]``, ``text`` attributed to ``passages[N-1]``), ``chunk``
(str, the annotated sentence, the "statement") and ``passages`` (list of str).

Which text is the answer
------------------------
The paper attributes the statement, but upstream the markup lives in ``summary``: ``chunk`` is
the same sentence *without* markers (in the dev slice all 20 statements are substrings of the
cleaned summary and every span lies inside its statement). So by default
(``answer="summary"``) ``answer`` is the cleaned summary, the units are offsets into it, and
``meta["statement"]`` with ``meta["statement_start"]``/``meta["statement_end"]`` locates the
statement in it (the occurrence that contains the units). ``answer="statement"`` gives the
statement itself as the answer, with the units shifted into it.

Markers are removed exactly as in QuoteSum (:func:`~rcstat.data.markup.parse_span_markup`):
``"geometry[ 1  is a branch. ] The"`` → ``"geometry is a branch. The"``, unit ``"is a
branch."``. ``passages`` are kept as they are (no passage is dropped), so
``gold_chunk == N - 1``. Upstream 3 statements carry no markup; they load with ``units == ()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, Literal

from rcstat.data.examples import AttributedSpan, AttributionExample
from rcstat.data.markup import MarkedSpan, parse_record_markup
from rcstat.data.records import Where, iter_jsonl, load_limited

__all__ = ["load_verigran"]

DATASET = "verigran"

AnswerMode = Literal["summary", "statement"]


def load_verigran(
    path: str | Path, *, answer: AnswerMode = "summary", limit: int | None = None
) -> list[AttributionExample]:
    """Load VERI-GRAN statements from an upstream JSON-lines file.

    Parameters
    ----------
    path : str or Path
        ``verifiability_granular_dev.jsonl`` (or test), or a folder holding it
        (:mod:`rcstat.data`).
    answer : {"summary", "statement"}, default "summary"
        What :attr:`AttributionExample.answer` is: the whole cleaned summary (where upstream
        puts the markup) or only the statement (``chunk``), see the module docstring.
    limit : int, optional
        At most this many examples (:mod:`rcstat.data`).

    Returns
    -------
    list of AttributionExample
        ``id`` is ``"<file stem>:L<line>"``; ``chunks`` are the passages. ``meta`` holds
        ``line`` (1-based), ``answer_mode``, ``statement`` (the upstream ``chunk``),
        ``statement_start``/``statement_end`` (its offsets in the cleaned summary, ``None`` if
        it does not occur there — only possible with ``answer="summary"``), ``summary`` (the
        cleaned summary) and ``summary_marked``.

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a missing or mistyped key, no passages, an empty summary, statement
        or referenced passage, unbalanced or malformed ``[ N ... ]`` markup, ``N`` outside
        ``1..len(passages)``, or (``answer="statement"``) a statement that is not in the
        summary or does not contain the units.
    """
    if answer not in ("summary", "statement"):
        raise ValueError(f"answer must be 'summary' or 'statement', got {answer!r}")
    return load_limited(path, DATASET, ".jsonl", partial(_iter_verigran, mode=answer), limit)


def _locate_statement(
    summary: str, statement: str, spans: tuple[MarkedSpan, ...]
) -> tuple[int, int] | None:
    """Offsets of the occurrence of `statement` in `summary` that contains all `spans`."""
    first = None
    start = summary.find(statement)
    while start != -1:
        end = start + len(statement)
        if first is None:
            first = (start, end)
        if all(start <= s.start and s.end <= end for s in spans):
            return start, end
        start = summary.find(statement, start + 1)
    return first if not spans else None


def _iter_verigran(path: Path, mode: AnswerMode) -> Iterator[AttributionExample]:
    for line, where, record in iter_jsonl(path):
        question = where.text(record, "question", non_empty=True)
        marked = where.text(record, "summary", non_empty=True)
        statement = where.text(record, "chunk", non_empty=True)
        passages = where.strings(where.get(record, "passages", list), "key 'passages'")
        if not any(p.strip() for p in passages):
            raise where.error("empty context: 'passages' has no text")
        summary, spans = parse_record_markup(where, "summary", marked)
        for span in spans:
            if not 1 <= span.label <= len(passages):
                raise where.error(
                    f"chunk index out of range: span '[ {span.label} "
                    f"{summary[span.start : span.end]} ]' in 'summary' points to passage "
                    f"{span.label} but there are {len(passages)} passages (1-based)"
                )
            if not passages[span.label - 1].strip():
                raise where.error(f"span points to passage {span.label}, which is empty")
        located = _locate_statement(summary, statement, spans)
        shift = 0
        if mode == "statement":
            located = _require_statement(where, located, summary, statement, spans)
            shift = located[0]
        meta: dict[str, Any] = {
            "line": line,
            "answer_mode": mode,
            "statement": statement,
            "statement_start": located[0] if located else None,
            "statement_end": located[1] if located else None,
            "summary": summary,
            "summary_marked": marked,
        }
        units = tuple(AttributedSpan(s.start - shift, s.end - shift, s.label - 1) for s in spans)
        text = statement if mode == "statement" else summary
        yield AttributionExample(
            f"{path.stem}:L{line}", question, tuple(passages), text, units, DATASET, meta
        )


def _require_statement(
    where: Where,
    located: tuple[int, int] | None,
    summary: str,
    statement: str,
    spans: tuple[MarkedSpan, ...],
) -> tuple[int, int]:
    if located is not None:
        return located
    if statement not in summary:
        raise where.error("'chunk' (the statement) does not occur in the cleaned summary")
    raise where.error("the annotated spans do not all lie inside 'chunk' (the statement)")
