"""SQuAD v2.0 loader: one :class:`~rcstat.data.examples.QAExample` per question.

Reads the official ``dev-v2.0.json`` / ``train-v2.0.json`` structure::

    {"version": "v2.0", "data": [{"title": ..., "paragraphs": [{"context": ...,
      "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible",
               "plausible_answers" (unanswerable questions, optional)}]}]}]}

The paragraph is the context. ``answers`` holds the distinct answer texts in upstream order
(the official file repeats a text once per annotator); an unanswerable question has
``answers == ()`` and ``meta["is_impossible"] = True``. Locations in errors are index paths
such as ``data[0].paragraphs[2].qas[1]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from rcstat.data.examples import QAExample
from rcstat.data.records import Where, load_limited, read_json

__all__ = ["load_squad_v2"]

DATASET = "squad_v2"


def load_squad_v2(
    path: str | Path, *, include_unanswerable: bool = True, limit: int | None = None
) -> list[QAExample]:
    """Load SQuAD v2.0 questions from an official-format JSON file.

    Parameters
    ----------
    path : str or Path
        ``dev-v2.0.json`` (or train), or a folder holding it (:mod:`rcstat.data`).
    include_unanswerable : bool, default True
        Keep the questions marked ``is_impossible`` (with ``answers == ()``).
    limit : int, optional
        At most this many examples, counted after filtering (:mod:`rcstat.data`).

    Returns
    -------
    list of QAExample
        In file order. ``meta`` holds ``title``, ``paragraph`` (index in the article),
        ``is_impossible``, ``answer_starts`` (the first ``answer_start`` of each distinct answer
        text) and ``plausible_answers`` (distinct texts, unanswerable questions only).

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a missing or mistyped key, an empty context or question, an
        answerable question without answers, or an unanswerable one with answers.
    """
    read = partial(_iter_squad_v2, include_unanswerable=include_unanswerable)
    return load_limited(path, DATASET, ".json", read, limit)


def _distinct_answers(
    where: Where, items: Any, key: str
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Distinct answer texts (upstream order) and the first ``answer_start`` of each."""
    texts: dict[str, int] = {}
    for k, item in enumerate(where.check(items, list, f"key {key!r}")):
        item_where = where.child(f".{key}[{k}]")
        item = item_where.check(item, dict, "the answer")
        text = item_where.text(item, "text", non_empty=True)
        start = item_where.get(item, "answer_start", int)
        texts.setdefault(text, start)
    return tuple(texts), tuple(texts.values())


def _iter_squad_v2(path: Path, include_unanswerable: bool) -> Iterator[QAExample]:
    root = Where(path, "document")
    document = root.check(read_json(path), dict, "the document")
    articles = root.get(document, "data", list)
    for a, article in enumerate(articles):
        a_where = Where(path, f"data[{a}]")
        article = a_where.check(article, dict, "the article")
        title = a_where.get_optional(article, "title", str, "")
        for p, paragraph in enumerate(a_where.get(article, "paragraphs", list)):
            p_where = a_where.child(f".paragraphs[{p}]")
            paragraph = p_where.check(paragraph, dict, "the paragraph")
            context = p_where.get(paragraph, "context", str)
            if not context.strip():
                raise p_where.error("empty context")
            for q, qa in enumerate(p_where.get(paragraph, "qas", list)):
                q_where = p_where.child(f".qas[{q}]")
                qa = q_where.check(qa, dict, "the question record")
                qid = q_where.text(qa, "id", non_empty=True)
                question = q_where.text(qa, "question", non_empty=True)
                answers, starts = _distinct_answers(
                    q_where, q_where.get(qa, "answers", list), "answers"
                )
                impossible = q_where.get_optional(qa, "is_impossible", bool, False)
                if impossible and answers:
                    raise q_where.error("is_impossible is true but 'answers' is not empty")
                if not impossible and not answers:
                    raise q_where.error("answerable question (is_impossible false) has no answers")
                if impossible and not include_unanswerable:
                    continue
                meta: dict[str, Any] = {
                    "title": title,
                    "paragraph": p,
                    "is_impossible": impossible,
                    "answer_starts": starts,
                }
                if impossible:
                    plausible = q_where.get_optional(qa, "plausible_answers", list, [])
                    meta["plausible_answers"] = _distinct_answers(
                        q_where, plausible, "plausible_answers"
                    )[0]
                yield QAExample(qid, context, question, answers, DATASET, meta)
