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
* **Resumable runs** (:mod:`rcstat.runs`). With ``out``, the run's manifest ``out/run.json``
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from rcstat.analysis import analyze
from rcstat.capture import attention_layout
from rcstat.data import AttributionExample, QAExample
from rcstat.data.records import check_limit, iter_jsonl
from rcstat.report.console import progress as show_progress
from rcstat.runs import (
    MANIFEST_FILE,
    RowFileError,
    RunManifest,
    append_csv_row,
    content_hash,
    drop_cut_last_line,
    open_run,
    read_csv_rows,
    replace_file,
    resume_plan,
    write_csv_rows,
)
from rcstat.runs.parts import RunFiles, merge_if_last, start_part
from rcstat.runs.rows import RowFile
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "COLUMNS",
    "EXAMPLE_COLUMNS",
    "RUN_FILES",
    "JsonlExample",
    "collect",
    "load_jsonl",
    "read_heads",
]

#: Columns of the long table returned by :func:`collect` and stored in ``heads.csv``.
COLUMNS = ("example", "layer", "head", "expected", "upper", "prompt_len", "gen_len")
#: Columns of ``examples.csv`` (one line per attempted example). ``finished``: whether the
#: answer the model generated ended by itself (``False``: cut at ``max_new_tokens``), empty when
#: the answer was given; ``hash``: :func:`rcstat.runs.content_hash` of the example's texts.
EXAMPLE_COLUMNS = ("id", "prompt_len", "gen_len", "finished", "seconds", "error", "hash")
_DTYPES = {
    "example": str,
    "layer": np.int16,
    "head": np.int16,
    "expected": np.float32,
    "upper": np.float32,
    "prompt_len": np.int32,
    "gen_len": np.int32,
}
_HEADS_FILE = "heads.csv"
_EXAMPLES_FILE = "examples.csv"
#: The kind of run recorded in the manifest.
KIND = "heads"
#: The files a run grows example by example.
ROW_FILES = (MANIFEST_FILE, _HEADS_FILE, _EXAMPLES_FILE)
#: The row files of a run as its parts and their merge see them (:mod:`rcstat.merge`).
RUN_FILES = RunFiles(
    KIND,
    (
        RowFile(_HEADS_FILE, "example", COLUMNS),
        RowFile(_EXAMPLES_FILE, "id", EXAMPLE_COLUMNS, commit=True),
    ),
)


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


def _rows(item_id: str, result: Any) -> pd.DataFrame:
    layers, heads = result.shape
    n = layers * heads
    return pd.DataFrame(
        {
            "example": np.full(n, item_id, dtype=object),
            "layer": np.repeat(np.arange(layers, dtype=np.int16), heads),
            "head": np.tile(np.arange(heads, dtype=np.int16), layers),
            "expected": np.asarray(result.expected, dtype=np.float32).reshape(-1),
            "upper": np.asarray(result.upper, dtype=np.float32).reshape(-1),
            "prompt_len": np.full(n, result.prompt_len, dtype=np.int32),
            "gen_len": np.full(n, result.gen_len, dtype=np.int32),
        }
    )


def read_heads(path: str | Path) -> pd.DataFrame:
    """Read a ``heads.csv`` written by :func:`collect` (ids stay strings, compact dtypes).

    Parameters
    ----------
    path : str or Path
        The ``heads.csv`` file, or the run folder holding it.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file lacks a column of :data:`COLUMNS`.
    """
    path = Path(path)
    if path.is_dir():
        path = path / _HEADS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {_HEADS_FILE} at {path}")
    frame = pd.read_csv(path, dtype={"example": str}, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; not a heads.csv of rcstat heads")
    return frame.astype(_DTYPES)[list(COLUMNS)]


class _Run:
    """The files of a resumable run folder (see the module notes)."""

    def __init__(self, out: Path, grid: int, wanted: dict[str, str], *, retry_failed: bool) -> None:
        self.heads = out / _HEADS_FILE
        self.examples = out / _EXAMPLES_FILE
        self.grid = grid  # rows per example: layers × heads
        log = read_csv_rows(self.examples, EXAMPLE_COLUMNS)
        sizes = self._heads_sizes()
        plan = resume_plan(log, wanted, key="id", hash_field="hash", retry_failed=retry_failed)
        # A success line whose rows were cut short by an interruption is dropped too.
        keep = [row for row in plan.keep if row["error"] or sizes.get(row["id"]) == grid]
        self.attempted = {row["id"] for row in keep}
        self.done = {row["id"] for row in keep if not row["error"]}
        if len(keep) != len(log):
            write_csv_rows(self.examples, EXAMPLE_COLUMNS, keep)
        stale = set(sizes) - self.done  # rows of changed, torn or uncommitted examples
        if stale:
            self._drop_heads(stale)

    def _heads_sizes(self) -> dict[str, int]:
        """Rows per example in heads.csv (after dropping a line cut by an interruption)."""
        if not self.heads.is_file() or self.heads.stat().st_size == 0:
            return {}
        drop_cut_last_line(self.heads)
        frame = self._read()
        sizes = frame.groupby("example", sort=False).size()
        return {str(k): int(v) for k, v in sizes.items()}

    def _read(self) -> pd.DataFrame:
        try:
            return read_heads(self.heads)
        except (ValueError, pd.errors.ParserError) as err:
            raise RowFileError(f"{self.heads} cannot be resumed: {err}") from err

    def _drop_heads(self, stale: set[str]) -> None:
        frame = self._read()
        replace_file(self.heads, frame[~frame["example"].isin(stale)].to_csv(index=False))

    def add(self, rows: pd.DataFrame | None, record: dict[str, Any]) -> None:
        """Append an example's rows (one write), then its line in examples.csv (the commit)."""
        if rows is not None:
            header = not self.heads.is_file() or self.heads.stat().st_size == 0
            with self.heads.open("a", encoding="utf-8", newline="") as handle:
                handle.write(rows.to_csv(index=False, header=header))
                handle.flush()
        append_csv_row(self.examples, EXAMPLE_COLUMNS, record)


def collect(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Iterable[Any],
    *,
    out: str | Path | None = None,
    max_new_tokens: int = 32,
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
        Analyse only this process's shard of `examples` (:mod:`rcstat.shards`, e.g.
        :func:`~rcstat.shards.detect_shard` under torchrun). With `out`, the rows go to the
        shard's own resumable part ``out/parts/<i>-of-<N>/`` and, once every part is complete,
        the process that completes last merges them into ``out/heads.csv`` and
        ``out/examples.csv`` — the files of a single-process run (:mod:`rcstat.merge`).
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
    layout = attention_layout(model)
    run = None
    split = shard is not None and shard.split
    if split:
        assert shard is not None
        plan = shard.take(list(enumerate(item.id for item in items)))
        items = shard.take(items)
    root = None if out is None else Path(out)
    if out is not None:
        out = Path(out)
        if split:
            assert shard is not None
            out = start_part(out, RUN_FILES, shard, plan, merge_settings)
        settings = {
            "max_new_tokens": max_new_tokens,
            "question_placement": "generation",
            **(options or {}),
        }
        manifest = RunManifest.build(out, KIND, model, tokenizer, settings, model_name=model_name)
        open_run(out, manifest, rows=ROW_FILES[1:])
        wanted = {item.id: item.hash for item in items}
        grid = layout.num_layers * layout.num_heads
        run = _Run(out, grid, wanted, retry_failed=retry_failed)
    todo = [item for item in items if run is None or item.id not in run.attempted]
    frames: list[pd.DataFrame] = []
    errors: dict[str, str] = {}
    for item in show_progress(todo, desc="heads", unit="example", enabled=progress):
        start = time.perf_counter()
        try:
            result = analyze(
                model,
                tokenizer,
                context=item.context,
                question=item.question,
                answer=item.answer,
                question_placement="generation",
                max_new_tokens=max_new_tokens,
            )
        except (ValueError, torch.OutOfMemoryError) as err:
            if isinstance(err, torch.OutOfMemoryError) and torch.cuda.is_available():
                torch.cuda.empty_cache()
            message = f"{type(err).__name__}: {err}"
            errors[item.id] = message
            failure: dict[str, Any] = dict.fromkeys(EXAMPLE_COLUMNS, "")
            failure.update(
                id=item.id,
                seconds=f"{time.perf_counter() - start:.3f}",
                error=message,
                hash=item.hash,
            )
            if run is not None:
                run.add(None, failure)
            continue
        seconds = time.perf_counter() - start
        rows = _rows(item.id, result)
        finished = result.generation_finished
        record = {
            "id": item.id,
            "prompt_len": result.prompt_len,
            "gen_len": result.gen_len,
            "finished": "" if finished is None else finished,
            "seconds": f"{seconds:.3f}",
            "error": "",
            "hash": item.hash,
        }
        if run is None:
            frames.append(rows)
        else:
            run.add(rows, record)
    if run is not None:
        stored = read_heads(run.heads) if run.heads.is_file() else _empty()
        order = {item.id: i for i, item in enumerate(items)}
        stored = stored[stored["example"].isin(order)]
        rank = stored["example"].map(order)
        frame = stored.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)
    else:
        frame = pd.concat(frames, ignore_index=True) if frames else _empty()
    frame.attrs["errors"] = errors
    frame.attrs["merged"] = False
    if split and root is not None and out is not None:
        frame.attrs["merged"] = merge_if_last(root, out, RUN_FILES)
    return frame


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _DTYPES.items()})[list(COLUMNS)]
