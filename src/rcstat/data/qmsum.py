"""QMSum loader: one :class:`~rcstat.data.examples.QAExample` per query of a meeting.

Reads the upstream JSON-lines files (``data/ALL/jsonl/{train,val,test}.jsonl``), one meeting per
line::

    {"topic_list": [{"topic", "relevant_text_span"}],
     "general_query_list": [{"query", "answer"}],
     "specific_query_list": [{"query", "answer", "relevant_text_span"}],
     "meeting_transcripts": [{"speaker", "content"}]}

``relevant_text_span`` is a list of ``[start, end]`` pairs of *inclusive* turn indices into
``meeting_transcripts``, written as strings upstream (integers are accepted too).

The context is the transcript rendered one turn per line as ``"Speaker: content"`` (every turn,
also those with empty content, so turn ``i`` is line ``i``). With ``context="relevant"`` a
specific query gets only the turns of its spans (their union, in transcript order); a general
query has no span and keeps the whole transcript. Queries come general first, then specific,
meeting by meeting. :func:`fit_turns` cuts a whole transcript to the contiguous turns around a
query's relevant span that fit a token budget (meetings are longer than small models' windows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

from rcstat.data.examples import QAExample
from rcstat.data.records import Where, iter_jsonl, load_limited

__all__ = ["fit_turns", "load_qmsum"]

DATASET = "qmsum"

ContextMode = Literal["full", "relevant"]


def load_qmsum(
    path: str | Path, *, context: ContextMode = "full", limit: int | None = None
) -> list[QAExample]:
    """Load QMSum queries from an upstream JSON-lines file.

    Parameters
    ----------
    path : str or Path
        ``val.jsonl`` (or train/test), or a folder holding it (:mod:`rcstat.data`).
    context : {"full", "relevant"}, default "full"
        ``"full"``: the whole transcript. ``"relevant"``: for specific queries, only the turns
        of ``relevant_text_span``; general queries keep the whole transcript.
    limit : int, optional
        At most this many queries (:mod:`rcstat.data`).

    Returns
    -------
    list of QAExample
        ``id`` is ``"<file stem>:L<line>:<general|specific>:<index>"``; ``answers`` is the one
        reference answer. ``meta`` holds ``line`` (1-based), ``query_type``, ``query_index``,
        ``topics`` (topic names of the meeting), ``n_turns``, ``context_mode`` (``"full"`` or
        ``"relevant"``, what this example's context is) and, for specific queries,
        ``relevant_text_span`` (tuple of inclusive ``(start, end)`` int pairs).

    Raises
    ------
    DatasetFormatError
        On invalid JSON, a missing or mistyped key, an empty transcript, an empty query or
        answer, or a span that is malformed or outside the transcript.
    """
    if context not in ("full", "relevant"):
        raise ValueError(f"context must be 'full' or 'relevant', got {context!r}")
    return load_limited(path, DATASET, ".jsonl", partial(_iter_qmsum, mode=context), limit)


def _parse_spans(where: Where, value: Any, n_turns: int) -> tuple[tuple[int, int], ...]:
    """Inclusive ``(start, end)`` turn ranges from upstream ``[["5", "27"], ...]``."""
    spans = []
    for j, pair in enumerate(where.check(value, list, "relevant_text_span")):
        if not isinstance(pair, list) or len(pair) != 2:
            raise where.error(f"relevant_text_span[{j}] must be a [start, end] pair, got {pair!r}")
        bounds = []
        for item in pair:
            if isinstance(item, str) and item.strip().isdigit():
                bounds.append(int(item))
            elif isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                bounds.append(item)
            else:
                raise where.error(f"relevant_text_span[{j}] must hold turn indices, got {pair!r}")
        start, end = bounds
        if start > end or end >= n_turns:
            raise where.error(
                f"relevant_text_span[{j}] = {pair!r} is not a range of turns 0..{n_turns - 1}"
            )
        spans.append((start, end))
    if not spans:
        raise where.error("relevant_text_span is empty")
    return tuple(spans)


def _iter_qmsum(path: Path, mode: ContextMode) -> Iterator[QAExample]:
    for line, where, record in iter_jsonl(path):
        turns = where.get(record, "meeting_transcripts", list)
        if not turns:
            raise where.error("empty context: 'meeting_transcripts' is empty")
        lines = []
        for t, turn in enumerate(turns):
            t_where = where.child(f": meeting_transcripts[{t}]")
            turn = t_where.check(turn, dict, "the turn")
            lines.append(f"{t_where.text(turn, 'speaker')}: {t_where.text(turn, 'content')}")
        transcript = "\n".join(lines)
        topics = []
        for t, topic in enumerate(where.get_optional(record, "topic_list", list, [])):
            t_where = where.child(f": topic_list[{t}]")
            topics.append(t_where.text(t_where.check(topic, dict, "the topic"), "topic"))
        for kind in ("general", "specific"):
            for j, item in enumerate(where.get(record, f"{kind}_query_list", list)):
                q_where = where.child(f": {kind}_query_list[{j}]")
                item = q_where.check(item, dict, "the query")
                query = q_where.text(item, "query", non_empty=True)
                answer = q_where.text(item, "answer", non_empty=True)
                meta: dict[str, Any] = {
                    "line": line,
                    "query_type": kind,
                    "query_index": j,
                    "topics": tuple(topics),
                    "n_turns": len(turns),
                    "context_mode": "full",
                }
                context = transcript
                if kind == "specific":
                    if "relevant_text_span" not in item:
                        raise q_where.error("missing key 'relevant_text_span'")
                    spans = _parse_spans(q_where, item["relevant_text_span"], len(turns))
                    meta["relevant_text_span"] = spans
                    if mode == "relevant":
                        keep = sorted({i for s, e in spans for i in range(s, e + 1)})
                        context = "\n".join(lines[i] for i in keep)
                        meta["context_mode"] = "relevant"
                yield QAExample(
                    f"{path.stem}:L{line}:{kind}:{j}", context, query, (answer,), DATASET, meta
                )


def fit_turns(example: QAExample, tokens: Callable[[str], int], budget: int) -> QAExample | None:
    """The query with its transcript cut to the most turns around its relevant span that fit.

    The window starts at the turns of the span (from its first to its last turn; a general
    query, which has none, starts at the meeting's first turn) and grows one turn at a time,
    after it then before it, while the context stays within ``budget`` tokens (``tokens``
    counts a text's tokens; the lines are counted one by one, then the whole window is counted
    and shrunk from its far side until it fits).

    Parameters
    ----------
    example
        A query loaded with ``context="full"``.
    tokens
        Counts the tokens of a text (e.g. ``lambda t: len(tokenizer(t).input_ids)``).
    budget
        Tokens the context may take.

    Returns
    -------
    QAExample or None
        ``meta["context_mode"]`` ``"window"`` and ``meta["window_turns"]`` the inclusive
        ``(first, last)`` turns kept; None when the span's own turns do not fit.

    Raises
    ------
    ValueError
        Not a whole-transcript QMSum query, or a budget below 1.
    """
    meta = dict(example.meta or {})
    if example.dataset != DATASET or meta.get("context_mode") != "full":
        raise ValueError("fit_turns needs a QMSum query loaded with context='full'")
    if budget < 1:
        raise ValueError(f"budget must be positive, got {budget}")
    lines = example.context.split("\n")
    if len(lines) != meta["n_turns"]:
        raise ValueError(f"{example.id}: {len(lines)} lines for {meta['n_turns']} turns")
    spans = meta.get("relevant_text_span")
    lo, hi = (min(a for a, _ in spans), max(b for _, b in spans) + 1) if spans else (0, 1)
    first_lo, first_hi = lo, hi
    sizes = [tokens(line) + 1 for line in lines]  # + the line break
    used = sum(sizes[lo:hi])
    grow = True
    while grow:
        grow = False
        for side in ("after", "before"):
            index = hi if side == "after" else lo - 1
            if 0 <= index < len(lines) and used + sizes[index] <= budget:
                used += sizes[index]
                hi, lo = (hi + 1, lo) if side == "after" else (hi, lo - 1)
                grow = True
    while tokens("\n".join(lines[lo:hi])) > budget:  # the line counts were an estimate
        after, before = hi > first_hi, lo < first_lo  # turns beyond the span on each side
        if not (after or before):
            return None  # the span alone is too long
        if after and (not before or hi - first_hi >= first_lo - lo):
            hi -= 1
        else:
            lo += 1
    meta.update(context_mode="window", window_turns=(lo, hi - 1))
    return replace(example, context="\n".join(lines[lo:hi]), meta=meta)
