"""Per-head RC statistics of every example of a dataset, as one long table (paper §5.1).

:func:`collect` runs :func:`rcstat.analysis.analyze` once per example — the context is the
prompt, the question and the answer are the generation (``question_placement="generation"``,
as in the paper's head analysis) — and stacks the per-head statistics into a long table with
one row per ``(example, layer, head)``.

Design
------
* **Any example type.** :class:`~rcstat.data.QAExample` (first reference answer; none, e.g. an
  unanswerable SQuAD v2 question, lets the model generate), :class:`~rcstat.data.AttributionExample`
  (the chunks joined by blank lines are the context, its ``answer`` the answer), and plain
  records (a mapping or :class:`JsonlExample`, see :func:`load_jsonl`) are reduced to one
  private ``(id, context, question, answer)`` form first.
* **Resumable runs** (:mod:`rcstat.runs`, a :class:`HeadsJob` run by
  :func:`~rcstat.runs.job.run_job`). With ``out``, the run's manifest ``out/run.json``
  records the model, the tokenizer, the rcstat version and the options; a later call with any
  difference is refused. Each finished example's rows are appended to ``out/heads.csv`` in
  one write (header once), then its line — content hash, token counts, whether a generated
  answer finished, time, error — to ``out/examples.csv``, which commits the rows. A later call
  skips every example done with the same content, recomputes one whose content changed under
  the same id (its old rows are dropped) and retries failed ones (unless
  ``retry_failed=False``). An example that raises ``ValueError`` (e.g. longer than the
  model's window) is recorded with its error, never aborting the run.
* **Compact.** Statistics are float32, indices small integers; the example's token counts are
  repeated on its rows so that the table stands alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pandas as pd
import torch

from rcstat.analysis import analyze
from rcstat.capture import attention_layout
from rcstat.data import AttributionExample, QAExample
from rcstat.data.records import check_limit, iter_jsonl
from rcstat.defaults import DATASET_MAX_NEW_TOKENS
from rcstat.heads.table import (
    COLUMNS,
    DTYPES,
    EXAMPLE_COLUMNS,
    EXAMPLES_FILE,
    HEADS_FILE,
    KIND,
    RUN_FILES,
    empty_heads,
    read_heads,
)
from rcstat.runs.job import Item, Job, run_job
from rcstat.runs.manifest import content_hash
from rcstat.runs.parts import RunFiles
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "HeadsJob",
    "JsonlExample",
    "collect",
    "load_jsonl",
]


@dataclass(frozen=True)
class JsonlExample:
    """One record of a user JSONL file: ``{"context", "question", "answer"?, "id"?}``.

    Parameters
    ----------
    id : str
        The record's ``id`` (a string or an integer), else ``"line-<n>"`` (1-based line).
    context, question : str
        Non-blank texts.
    answer : str or None
        The answer to teacher-force; ``None`` (absent or ``null``) lets the model generate.
    """

    id: str
    context: str
    question: str
    answer: str | None = None


def load_jsonl(path: str | Path, *, limit: int | None = None) -> list[JsonlExample]:
    """Read a JSONL file of ``{"context", "question", "answer"?, "id"?}`` records.

    Parameters
    ----------
    path : str or Path
        The file; blank lines are skipped.
    limit : int, optional
        Return at most this many records.

    Returns
    -------
    list of JsonlExample
        In file order.

    Raises
    ------
    FileNotFoundError
        If `path` does not exist.
    DatasetFormatError
        (a ``ValueError``) naming the 1-based line of a record that is not a JSON object, lacks
        ``context`` or ``question``, has a blank or non-string one, an ``answer`` that is not a
        string or null, an ``id`` that is not a string or integer, or repeats an ``id``.

    Examples
    --------
    >>> import json, tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write(json.dumps({"context": "Paris is in France.", "question": "Where?"}))
    >>> load_jsonl(f.name)
    [JsonlExample(id='line-1', context='Paris is in France.', question='Where?', answer=None)]
    >>> os.unlink(f.name)
    """
    path = Path(path)
    limit = check_limit(limit)
    if not path.is_file():
        raise FileNotFoundError(f"jsonl: no such file: {path}")
    examples: list[JsonlExample] = []
    seen: dict[str, int] = {}
    for number, where, record in iter_jsonl(path):
        if limit is not None and len(examples) >= limit:
            break
        context = where.text(record, "context", non_empty=True)
        question = where.text(record, "question", non_empty=True)
        answer = record.get("answer")
        if answer is not None:
            answer = where.check(answer, str, "key 'answer'")
            if not answer.strip():
                raise where.error("key 'answer' is empty (leave it out to let the model answer)")
        raw_id = record.get("id", f"line-{number}")
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise where.error(f"key 'id' must be a string or an integer, got {raw_id!r}")
        key = str(raw_id)
        if key in seen:
            raise where.error(f"duplicate id {key!r} (first on line {seen[key]})")
        seen[key] = number
        examples.append(JsonlExample(key, context, question, answer))
    return examples


@dataclass(frozen=True)
class _Item:
    id: str
    context: str
    question: str
    answer: str | None

    @property
    def hash(self) -> str:
        """The content hash of the texts that determine the example's rows."""
        return content_hash(
            {"context": self.context, "question": self.question, "answer": self.answer}
        )


def _as_item(example: Any, index: int) -> _Item:
    """Reduce any supported example to ``(id, context, question, answer)``."""
    if isinstance(example, QAExample):
        answer = example.answers[0] if example.answers else None
        return _Item(example.id, example.context, example.question, answer)
    if isinstance(example, AttributionExample):
        return _Item(example.id, "\n\n".join(example.chunks), example.question, example.answer)
    if isinstance(example, JsonlExample):
        return _Item(example.id, example.context, example.question, example.answer)
    if isinstance(example, Mapping):
        missing = [k for k in ("context", "question") if k not in example]
        if missing:
            raise ValueError(f"examples[{index}]: missing key(s) {missing}")
        return _Item(
            str(example.get("id", index)),
            example["context"],
            example["question"],
            example.get("answer"),
        )
    raise TypeError(
        f"examples[{index}]: expected a QAExample, AttributionExample, JsonlExample or a "
        f"mapping with 'context' and 'question', got {type(example).__name__}"
    )


def _items(examples: Iterable[Any]) -> list[_Item]:
    items = [_as_item(e, i) for i, e in enumerate(examples)]
    seen: set[str] = set()
    for item in items:
        if item.id in seen:  # resuming keys on the id: it must be unique
            raise ValueError(f"duplicate example id {item.id!r}; ids must be unique")
        seen.add(item.id)
    return items


def _number(value: Any) -> str:
    """A value as pandas writes it in a CSV file: float32 by its shortest repr, NaN empty."""
    return "" if value != value else str(value)


def _rows(item_id: str, result: Any) -> list[dict[str, str]]:
    """The ``heads.csv`` rows of one analysed example, as text (one per layer and head)."""
    layers, heads = result.shape
    expected = np.asarray(result.expected, dtype=np.float32).reshape(layers, heads)
    upper = np.asarray(result.upper, dtype=np.float32).reshape(layers, heads)
    lengths = {"prompt_len": str(result.prompt_len), "gen_len": str(result.gen_len)}
    return [
        {
            "example": item_id,
            "layer": str(layer),
            "head": str(head),
            "expected": _number(expected[layer, head]),
            "upper": _number(upper[layer, head]),
            **lengths,
        }
        for layer in range(layers)
        for head in range(heads)
    ]


@dataclass
class HeadsJob(Job):
    """:func:`collect` as a :class:`~rcstat.runs.job.Job`: one item per example; its rows go
    to ``heads.csv``, then its line to ``examples.csv`` (the commit). An example whose rows
    are fewer than ``layers × heads`` was cut by an interruption and is analysed again."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    model: Any
    tokenizer: Any
    examples: list[_Item]
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS
    model_name: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def source(self) -> tuple[Any, Any, str | None]:
        return self.model, self.tokenizer, self.model_name

    def manifest_options(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "question_placement": "generation",
            **self.options,
        }

    def items(self) -> list[Item]:
        return [Item(e.id, e.hash, i, e) for i, e in enumerate(self.examples)]

    def progress_label(self) -> tuple[str, str]:
        return "heads", "example"

    def expected_rows(self) -> dict[str, int]:
        layout = attention_layout(self.model)
        return {HEADS_FILE: layout.num_layers * layout.num_heads}

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        example: _Item = item.data
        start = time.perf_counter()
        try:
            result = analyze(
                self.model,
                self.tokenizer,
                context=example.context,
                question=example.question,
                answer=example.answer,
                question_placement="generation",
                max_new_tokens=self.max_new_tokens,
            )
        except (ValueError, torch.OutOfMemoryError) as err:
            if isinstance(err, torch.OutOfMemoryError) and torch.cuda.is_available():
                torch.cuda.empty_cache()
            failure: dict[str, Any] = dict.fromkeys(EXAMPLE_COLUMNS, "")
            failure.update(
                id=example.id,
                seconds=f"{time.perf_counter() - start:.3f}",
                error=f"{type(err).__name__}: {err}",
                hash=item.hash,
            )
            return {EXAMPLES_FILE: [failure]}
        finished = result.generation_finished
        record = {
            "id": example.id,
            "prompt_len": result.prompt_len,
            "gen_len": result.gen_len,
            "finished": "" if finished is None else finished,
            "seconds": f"{time.perf_counter() - start:.3f}",
            "error": "",
            "hash": item.hash,
        }
        return {HEADS_FILE: _rows(example.id, result), EXAMPLES_FILE: [record]}


def collect(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Iterable[Any],
    *,
    out: str | Path | None = None,
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS,
    progress: bool = True,
    retry_failed: bool = True,
    model_name: str | None = None,
    options: Mapping[str, Any] | None = None,
    shard: Shard | None = None,
    merge_settings: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Per-(example, layer, head) expected RC and upper bound over a dataset.

    Parameters
    ----------
    model, tokenizer
        A causal LM and its (chat-template) tokenizer, e.g. from :func:`rcstat.load_model`.
    examples : iterable
        :class:`~rcstat.data.QAExample` (context, question, first reference answer),
        :class:`~rcstat.data.AttributionExample` (chunks joined with ``"\\n\\n"``, question,
        answer), :class:`JsonlExample` or mappings with ``context``, ``question`` and optional
        ``answer`` / ``id`` (default id: the position in `examples`). Ids must be unique.
    out : str or Path, optional
        Run folder (resumable, see :mod:`rcstat.runs`). ``out/run.json`` records the model,
        the tokenizer, the rcstat version, `max_new_tokens` and `options`; a folder written
        with any other value is refused. Each finished example's rows are appended to
        ``out/heads.csv`` and one line (:data:`EXAMPLE_COLUMNS`) to ``out/examples.csv``.
        Examples already there with the same content are skipped; one whose content changed
        under the same id is analysed again and its old rows dropped; an example whose rows
        were cut short by an interruption is analysed again.
    max_new_tokens : int, default 32
        Length of the greedy answer generated for an example without an answer.
    progress : bool, default True
        Show progress on standard error (a bar on a terminal, plain lines otherwise).
    retry_failed : bool, default True
        With `out`, analyse again the examples recorded as failed; ``False`` skips them.
    model_name : str, optional
        The model's name in the manifest (default: ``model.name_or_path``).
    options : mapping, optional
        More settings to record in the manifest and compare on resume (e.g. the dataset).
    shard : Shard, optional
        Analyse only this process's shard of `examples` (:mod:`rcstat.runs.shards`, e.g.
        :func:`~rcstat.runs.shards.detect_shard` under torchrun). With `out`, the rows go to the
        shard's own resumable part ``out/parts/<i>-of-<N>/`` and, once every part is complete,
        the process that completes last merges them into ``out/heads.csv`` and
        ``out/examples.csv`` — the files of a single-process run (:mod:`rcstat.runs.parts`).
    merge_settings : mapping, optional
        With a `shard`, recorded in the part for whoever summarises the merged run.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS` — ``example`` (id), ``layer``, ``head``, ``expected``
        (``E_h``), ``upper`` (``A_h``), ``prompt_len`` (``|p|``) and ``gen_len`` (``|g|``) —
        one row per (example, layer, head), examples in input order. With `out`, the rows of
        every requested example found in ``heads.csv`` (computed now or by an earlier call).
        Examples that failed are left out (see ``examples.csv``); ``frame.attrs["errors"]``
        maps their ids to the error messages of this call. With a `shard`, the rows of the
        shard's examples; ``frame.attrs["merged"]`` says whether this call merged the run.

    Raises
    ------
    ValueError
        Duplicate ids; a :class:`~rcstat.runs.RunMismatchError` when ``out`` holds a run with
        other settings (the message names each difference) or rows without a manifest; a
        :class:`~rcstat.runs.RowFileError` for a malformed row that is not the last one (a cut
        last row is dropped with a warning). A ``ValueError`` raised by one example (too long
        for the model's window, an empty generated answer, a blank text) is recorded and the
        example skipped.

    Notes
    -----
    Each example is one :func:`rcstat.analysis.analyze` call with
    ``question_placement="generation"``: the prompt ``p`` is the context (with the chat
    template's opening), the generation ``g`` the question, the rest of the template and the
    answer — the paper's §5.1 set-up. ``E_h = E(X(p, g), Y(g, g))`` and ``A_h`` the overlap
    area (Theorem 3.6), per docs/definitions.md. ``seconds`` in ``examples.csv`` is the wall time
    of the call (generation included when the example has no answer).
    """
    items = _items(examples)
    job = HeadsJob(model, tokenizer, items, max_new_tokens, model_name, dict(options or {}))
    done = run_job(
        job,
        out,
        shard=shard,
        retry_failed=retry_failed,
        settings=merge_settings,
        progress=progress,
    )
    if done.folder is None:
        rows = done.rows.get(HEADS_FILE, [])
        frame = pd.DataFrame(rows, columns=list(COLUMNS)).astype(DTYPES) if rows else empty_heads()
    else:
        heads_csv = done.folder / HEADS_FILE
        stored = read_heads(heads_csv) if heads_csv.is_file() else empty_heads()
        order = {item.key: i for i, item in enumerate(done.items)}
        stored = stored[stored["example"].isin(order)]
        rank = stored["example"].map(order)
        frame = stored.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)
    frame.attrs["errors"] = done.errors
    frame.attrs["merged"] = done.merged
    return frame
