"""2WikiMultihopQA loader: one :class:`~rcstat.data.examples.QAExample` per question.

Reads the upstream ``data.zip`` files (``train.json``, ``dev.json``, ``test.json``): one JSON
list of HotpotQA-style records::

    {"_id", "type", "question", "context": [[title, [sentence, ...]], ...],
     "supporting_facts": [[title, sent_id], ...], "evidences": [[subj, rel, obj], ...],
     "answer", "entity_ids"}    (+ "evidences_id", "answer_id" in the data_ids release)

The context is the paragraphs in upstream order, one per line, each rendered as
``"title: sentence sentence ..."`` (sentences stripped and joined by one space). Test records
have no ``answer``/``supporting_facts``/``evidences``; loading them needs
``allow_missing_answer=True`` (then ``answers == ()``). Record locations in errors are 0-based
indices into the JSON list.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rcstat.data.examples import QAExample
from rcstat.data.records import Where, load_limited, read_json

__all__ = ["load_2wiki"]

DATASET = "2wiki"

PARAGRAPH_SEPARATOR = "\n"


def load_2wiki(
    path: str | Path, *, allow_missing_answer: bool = False, limit: int | None = None
) -> list[QAExample]:
    """Load 2WikiMultihopQA questions from an upstream JSON file.

    Parameters
    ----------
    path : str or Path
        ``dev.json`` (or train/test), or a folder holding it (:mod:`rcstat.data`).
    allow_missing_answer : bool, default False
        Accept records without ``answer`` (the test split); they get ``answers == ()``.
    limit : int, optional
        At most this many examples (:mod:`rcstat.data`).

    Returns
    -------
    list of QAExample
        ``id`` is the upstream ``_id``; ``answers`` is ``(answer,)``. ``meta`` holds ``type``,
        ``titles`` (paragraph titles in context order), ``supporting_facts`` (tuple of
        ``(title, sentence index)``, empty when absent), ``evidences`` (tuple of triples, empty
        when absent) and ``entity_ids`` (``""`` when absent); ``evidences_id`` and
        ``answer_id`` are copied when present.

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a document that is not a list, a missing or mistyped key, an empty
        context or question, or a missing answer without `allow_missing_answer`.
    """
    read = partial(_iter_2wiki, allow_missing_answer=allow_missing_answer)
    return load_limited(path, DATASET, ".json", read, limit)


def _paragraphs(where: Where, value: Any) -> tuple[list[str], str]:
    """Titles and the rendered context from upstream ``[[title, [sentences]], ...]``."""
    titles, rendered, has_text = [], [], False
    for j, item in enumerate(where.check(value, list, "key 'context'")):
        if not isinstance(item, list) or len(item) != 2:
            raise where.error(f"context[{j}] must be a [title, [sentences]] pair")
        title = where.check(item[0], str, f"context[{j}] title")
        sentences = where.strings(item[1], f"context[{j}] sentences")
        body = " ".join(s.strip() for s in sentences if s.strip())
        has_text = has_text or bool(body)
        titles.append(title)
        rendered.append(f"{title}: {body}")
    context = PARAGRAPH_SEPARATOR.join(rendered)
    if not has_text:
        raise where.error("empty context: no paragraph has any sentence text")
    return titles, context


def _pairs(where: Where, record: dict[str, Any], key: str, width: int) -> tuple[Any, ...]:
    """A list of fixed-width lists (supporting facts, evidences) as a tuple of tuples."""
    out = []
    for j, item in enumerate(where.get_optional(record, key, list, [])):
        if not isinstance(item, list) or len(item) != width:
            raise where.error(f"{key}[{j}] must be a list of {width} items, got {item!r}")
        out.append(tuple(item))
    return tuple(out)


def _iter_2wiki(path: Path, allow_missing_answer: bool) -> Iterator[QAExample]:
    document = Where(path, "document").check(read_json(path), list, "the document")
    for i, record in enumerate(document):
        where = Where(path, f"record {i}")
        record = where.check(record, dict, "the record")
        qid = where.text(record, "_id", non_empty=True)
        where = Where(path, f"record {i} (_id {qid!r})")
        question = where.text(record, "question", non_empty=True)
        titles, context = _paragraphs(where, where.get(record, "context", list))
        if "answer" in record:
            answers: tuple[str, ...] = (where.text(record, "answer", non_empty=True),)
        elif allow_missing_answer:
            answers = ()
        else:
            raise where.error(
                "missing key 'answer' (test records have none: pass allow_missing_answer=True)"
            )
        supporting = _pairs(where, record, "supporting_facts", 2)
        for j, (title, sent_id) in enumerate(supporting):
            where.check(title, str, f"supporting_facts[{j}] title")
            where.check(sent_id, int, f"supporting_facts[{j}] sentence index")
        meta: dict[str, Any] = {
            "type": where.get_optional(record, "type", str, ""),
            "titles": tuple(titles),
            "supporting_facts": supporting,
            "evidences": _pairs(where, record, "evidences", 3),
            "entity_ids": where.get_optional(record, "entity_ids", str, ""),
        }
        for key in ("evidences_id", "answer_id"):
            if key in record:
                meta[key] = record[key]
        yield QAExample(qid, context, question, answers, DATASET, meta)
