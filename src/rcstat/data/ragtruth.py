"""RAGTruth loader: one :class:`~rcstat.data.examples.GroundingExample` per generated response.

RAGTruth (Niu et al., ACL 2024, ``ParticleMedia/RAGTruth``) holds responses of six models
(GPT-3.5/4, Llama-2-7B/13B/70B-chat, Mistral-7B-Instruct) to three retrieval-augmented tasks,
with human-annotated hallucinated spans. Two upstream layouts are read:

* **per-task files** (the test responses as packaged by ``vectara/FaithJudge``):
  ``ragtruth_<task>.jsonl`` (any further suffix before ``.jsonl``, e.g. ``.slice``), one source
  document a line: ``source_id``, ``source`` and ``responses``, a list of ``{"response",
  "model", "labels"}``. ``<task>`` is ``qa``, ``summary`` or ``data2txt``; a folder is read
  file by file in natural name order.
* **the RAGTruth release**: a folder holding ``source_info.jsonl`` (``source_id``,
  ``task_type`` ``QA``/``Summary``/``Data2txt``, ``source_info``) and ``response.jsonl``
  (``id``, ``source_id``, ``model``, ``response``, ``labels``, ``split``); ``split`` chooses
  ``"train"`` or ``"test"`` responses (default: every response).

The task's source becomes the context and its instruction the question, as RAGTruth's prompts
put them:

* ``qa``: ``source`` is ``{"question", "passages"}``; the context is the passages, the question
  is :data:`QA_INSTRUCTION` around the question;
* ``summary``: ``source`` is the news article (a string); the question is
  :data:`SUMMARY_INSTRUCTION`;
* ``data2txt``: ``source`` is a Yelp business as structured data; the context is its JSON text
  (``json.dumps``, keys in upstream order), the question :data:`DATA2TXT_INSTRUCTION`.

Labels: a response is hallucinated when it has any labelled span (``labels == []``: none found).
Each span keeps its ``label_type`` (``Evident Conflict``, ``Subtle Baseless Info``, ...) as its
label; ``implicit_true`` and ``due_to_null`` go to ``meta["span_flags"]``. The offsets are
checked against the stored span ``text`` where the two agree in length (upstream offsets are
character offsets into ``response``). ``group`` is the task and ``source_id``: all responses
to one source stay in one cross-validation fold. ``meta`` holds ``task``, ``model`` (the
generator), ``source_id`` and ``question``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rcstat.data.examples import GroundingExample, LabeledSpan
from rcstat.data.records import Where, check_limit, data_files, iter_jsonl

__all__ = [
    "DATA2TXT_INSTRUCTION",
    "QA_INSTRUCTION",
    "SUMMARY_INSTRUCTION",
    "TASKS",
    "load_ragtruth",
    "ragtruth_context",
]

DATASET = "ragtruth"
#: RAGTruth's tasks, as this loader names them.
TASKS = ("qa", "summary", "data2txt")
#: ``task_type`` of the RAGTruth release → task.
_RELEASE_TASKS = {"QA": "qa", "Summary": "summary", "Data2txt": "data2txt"}
_FILE = re.compile(r"ragtruth_(qa|summary|data2txt)\b.*\.jsonl$")
#: The question of a QA response (``{question}`` is RAGTruth's question).
QA_INSTRUCTION = (
    "Briefly answer the following question: {question}\n"
    "Bear in mind that your response should be strictly based on the passages above."
)
SUMMARY_INSTRUCTION = "Summarize the news above."
DATA2TXT_INSTRUCTION = (
    "Write an objective overview about the local business above based only on the provided "
    "structured data in the JSON format."
)


def load_ragtruth(
    path: str | Path,
    *,
    task: str | None = None,
    split: str | None = None,
    limit: int | None = None,
) -> list[GroundingExample]:
    """Load RAGTruth responses from per-task files or the RAGTruth release folder.

    Parameters
    ----------
    path : str or Path
        A ``ragtruth_<task>*.jsonl`` file, a folder of them, or the release folder holding
        ``response.jsonl`` and ``source_info.jsonl``.
    task : {"qa", "summary", "data2txt"}, optional
        Only this task's responses (default: all three).
    split : {"train", "test"}, optional
        Only this split of the release (default: every response). The per-task files hold
        test responses only: ``"test"`` reads them all, ``"train"`` is an error.
    limit : int, optional
        At most this many responses, in file order.

    Returns
    -------
    list of GroundingExample
        One per response, ``id`` ``"<task>:<source_id>:<k>"`` (``k``: the response's index
        for its source in the file; the release's own ``id`` there).

    Raises
    ------
    DatasetFormatError
        A malformed record (missing or mistyped key, a span outside the response, an unknown
        task).
    FileNotFoundError
        No such file, or a folder with neither layout.
    ValueError
        An unknown ``task`` or ``split``.
    """
    if task is not None and task not in TASKS:
        raise ValueError(f"ragtruth: task must be one of {', '.join(TASKS)}, not {task!r}")
    if split is not None and split not in ("train", "test"):
        raise ValueError(f"ragtruth: split must be 'train' or 'test', not {split!r}")
    limit = check_limit(limit)
    root = Path(path)
    if root.is_dir() and (root / "response.jsonl").is_file():
        examples: Iterator[GroundingExample] = _release(root, task, split)
    else:
        if split == "train":
            raise ValueError(
                "ragtruth: the per-task files hold the test responses only; --split train "
                "needs the RAGTruth release folder (response.jsonl, source_info.jsonl)"
            )
        files = [f for f in data_files(root, DATASET, ".jsonl") if _file_task(f) is not None]
        if not files:
            raise FileNotFoundError(
                f"ragtruth: no ragtruth_<task>.jsonl file (task qa, summary or data2txt) and no "
                f"response.jsonl in {root}"
            )
        examples = (e for f in files if task in (None, _file_task(f)) for e in _task_file(f))
    out: list[GroundingExample] = []
    for example in examples:
        if limit is not None and len(out) >= limit:
            break
        out.append(example)
    return out


def ragtruth_context(task: str, source: Any, where: Where) -> tuple[str, str]:
    """The context and question of a RAGTruth source of ``task`` (see the module notes)."""
    if task == "qa":
        record = where.check(source, dict, "the QA source")
        question = where.text(record, "question", non_empty=True)
        return where.text(record, "passages", non_empty=True), QA_INSTRUCTION.format(
            question=question.strip()
        )
    if task == "summary":
        text = where.check(source, str, "the summary source")
        if not text.strip():
            raise where.error("the summary source is empty")
        return text, SUMMARY_INSTRUCTION
    record = where.check(source, dict, "the data-to-text source")
    if not record:
        raise where.error("the data-to-text source is empty")
    return json.dumps(record, ensure_ascii=False), DATA2TXT_INSTRUCTION


def _file_task(path: Path) -> str | None:
    found = _FILE.match(path.name)
    return None if found is None else found.group(1)


def _task_file(path: Path) -> Iterator[GroundingExample]:
    task = _file_task(path)
    assert task is not None
    for _, where, record in iter_jsonl(path):
        source_id = _source_id(where, record, "source_id")
        context, question = ragtruth_context(task, record.get("source"), where.child(" source"))
        responses = where.get(record, "responses", list)
        for k, entry in enumerate(responses):
            at = where.child(f" responses[{k}]")
            yield _example(f"{task}:{source_id}:{k}", task, source_id, context, question, at, entry)


def _release(root: Path, task: str | None, split: str | None) -> Iterator[GroundingExample]:
    sources: dict[str, tuple[str, str, str]] = {}
    for _, where, record in iter_jsonl(root / "source_info.jsonl"):
        source_id = _source_id(where, record, "source_id")
        kind = where.text(record, "task_type")
        if kind not in _RELEASE_TASKS:
            raise where.error(f"unknown task_type {kind!r} (expected QA, Summary or Data2txt)")
        context, question = ragtruth_context(
            _RELEASE_TASKS[kind], record.get("source_info"), where.child(" source_info")
        )
        sources[source_id] = (_RELEASE_TASKS[kind], context, question)
    for _, where, record in iter_jsonl(root / "response.jsonl"):
        if split is not None and where.get_optional(record, "split", str, "") != split:
            continue
        source_id = _source_id(where, record, "source_id")
        if source_id not in sources:
            raise where.error(f"source_id {source_id!r} is not in source_info.jsonl")
        kind, context, question = sources[source_id]
        if task not in (None, kind):
            continue
        name = f"{kind}:{source_id}:{_source_id(where, record, 'id')}"
        yield _example(name, kind, source_id, context, question, where, record)


def _source_id(where: Where, record: dict[str, Any], key: str) -> str:
    value = where.get(record, key, object)
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip():
        raise where.error(f"key {key!r} must be an integer or a non-empty string")
    return str(value)


def _example(
    name: str,
    task: str,
    source_id: str,
    context: str,
    question: str,
    where: Where,
    entry: Any,
) -> GroundingExample:
    entry = where.check(entry, dict, "the response")
    response = where.text(entry, "response", non_empty=True)
    labels = where.get(entry, "labels", list)
    spans, flags = [], []
    for j, label in enumerate(labels):
        at = where.child(f" labels[{j}]")
        label = at.check(label, dict, "the label")
        start, end = at.get(label, "start", int), at.get(label, "end", int)
        if not 0 <= start < end <= len(response):
            raise at.error(
                f"span [{start}, {end}) is not inside the response ({len(response)} characters)"
            )
        stored = label.get("text")
        if isinstance(stored, str) and len(stored) == end - start and response[start:end] != stored:
            raise at.error(
                f"span [{start}, {end}) is {response[start:end]!r} in the response, not its "
                f"text {stored!r}"
            )
        kind = at.get_optional(label, "label_type", str, "")
        spans.append(LabeledSpan(start, end, (kind,) if kind else ()))
        flags.append(
            {
                "implicit_true": bool(label.get("implicit_true", False)),
                "due_to_null": bool(label.get("due_to_null", False)),
            }
        )
    meta = {
        "task": task,
        "model": where.get_optional(entry, "model", str, ""),
        "source_id": source_id,
        "question": question,
        "span_flags": tuple(flags),
    }
    return GroundingExample(
        name, context, response, bool(spans), f"{task}:{source_id}", DATASET, tuple(spans), meta
    )
