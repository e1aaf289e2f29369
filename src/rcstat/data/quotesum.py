"""QuoteSum loader: one :class:`~rcstat.data.examples.AttributionExample` per summary.

Reads the upstream JSON-lines files (``v1/{train,dev,test}.jsonl``), one record per line with
string values: ``qid``, ``unique_id``, ``question``, ``summary``, ``covered_short_answers``,
``title1..title8``, ``source1..source8`` (unused sources are ``""``), ``short_ans_1..8``,
``disambig_questions``. The summary marks text copied from ``source{k}`` as ``[ k text ]``.

Mapping to :class:`AttributionExample`
--------------------------------------
* ``chunks`` are the non-empty sources in order ``source1, source2, ...``; unused (empty or
  blank) sources are dropped and ``meta["source_numbers"]`` keeps the upstream ``k`` of every
  chunk, so ``chunks[i] == record[f"source{meta['source_numbers'][i]}"]``.
* ``answer`` is the summary with the markers removed exactly like the upstream scorer's
  ``strip_attribution_tokens`` (``"[ 2 Denitrification ] is"`` → ``"Denitrification is"``;
  the spacing around markers is kept as written, e.g. ``"called Denitrification ."``).
* Each ``[ k text ]`` is one unit; its offsets exclude surrounding whitespace and its
  ``gold_chunk`` is the index of ``source{k}`` in ``chunks``. A marker pointing to an empty or
  absent source is an error. Some units quote a source's *title* rather than its text (e.g. a
  film name), so a unit is not always a substring of its gold chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

from rcstat.data.examples import AttributedSpan, AttributionExample
from rcstat.data.markup import parse_record_markup
from rcstat.data.records import iter_jsonl, load_limited

__all__ = ["load_quotesum"]

DATASET = "quotesum"


def load_quotesum(path: str | Path, *, limit: int | None = None) -> list[AttributionExample]:
    """Load QuoteSum summaries from an upstream JSON-lines file.

    Parameters
    ----------
    path : str or Path
        ``dev.jsonl`` (or train/test), or a folder holding it (:mod:`rcstat.data`).
    limit : int, optional
        At most this many examples (:mod:`rcstat.data`).

    Returns
    -------
    list of AttributionExample
        ``id`` is the upstream ``unique_id``. ``meta`` holds ``qid``, ``line`` (1-based),
        ``source_numbers`` (upstream ``k`` of each chunk), ``titles`` and ``short_answers``
        (aligned with ``chunks``), ``summary_marked`` (the summary with markup),
        ``covered_short_answers`` (raw, with markup) and ``disambig_questions`` (split on
        ``" | "``).

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a missing or mistyped key, all sources empty, an empty summary,
        unbalanced or malformed ``[ k ... ]`` markup, or a marker whose source is empty or
        absent.
    """
    return load_limited(path, DATASET, ".jsonl", _iter_quotesum, limit)


def _iter_quotesum(path: Path) -> Iterator[AttributionExample]:
    for line, where, record in iter_jsonl(path):
        uid = where.text(record, "unique_id", non_empty=True)
        qid = where.text(record, "qid", non_empty=True)
        question = where.text(record, "question", non_empty=True)
        marked = where.text(record, "summary", non_empty=True)
        where.text(record, "source1")  # every upstream record has at least source1
        chunks, numbers, titles, shorts = [], [], [], []
        for k in count(1):
            if f"source{k}" not in record:
                break
            source = where.text(record, f"source{k}")
            if not source.strip():
                continue
            chunks.append(source)
            numbers.append(k)
            titles.append(where.get_optional(record, f"title{k}", str, ""))
            shorts.append(where.get_optional(record, f"short_ans_{k}", str, ""))
        if not chunks:
            raise where.error("empty context: every 'source<k>' is empty")
        answer, spans = parse_record_markup(where, "summary", marked)
        chunk_of = {k: i for i, k in enumerate(numbers)}
        units = []
        for span in spans:
            if span.label not in chunk_of:
                raise where.error(
                    f"chunk index out of range: span '[ {span.label} "
                    f"{answer[span.start : span.end]} ]' in 'summary' points to "
                    f"source{span.label}, which is empty or absent (non-empty sources: {numbers})"
                )
            units.append(AttributedSpan(span.start, span.end, chunk_of[span.label]))
        disambig = where.get_optional(record, "disambig_questions", str, "")
        meta: dict[str, Any] = {
            "qid": qid,
            "line": line,
            "source_numbers": tuple(numbers),
            "titles": tuple(titles),
            "short_answers": tuple(shorts),
            "summary_marked": marked,
            "covered_short_answers": where.get_optional(record, "covered_short_answers", str, ""),
            "disambig_questions": tuple(q.strip() for q in disambig.split(" | ") if q.strip()),
        }
        yield AttributionExample(uid, question, tuple(chunks), answer, tuple(units), DATASET, meta)
