"""``rcstat ground --pairs`` as a library call: :class:`PairsConfig` → :func:`run` →
:class:`PairsResult`.

Each line of a JSON-lines file of (context, response[, question]) pairs
(:func:`rcstat.data.load_pairs`) is grounded (:meth:`rcstat.grounding.Grounder.ground`) into
one row of ``grounded.jsonl`` in the output folder: its ``id`` and ``line``, ``verdict``
(``"supported"``, ``"unsupported"``, ``"unverified"``, or ``"error"`` with the reason in
``error``, e.g. a response longer than ``max_response_tokens``), ``score``, ``threshold``,
``probe_score`` (None without a probe), the unsupported ``spans`` (``start``, ``end``,
``text``, ``score``: character offsets in the response), and the ``unsupported`` and the
``unverified``
sentences, each in the schema of ``rcstat ground --json`` and ``Grounding.to_dict``
(:meth:`~rcstat.grounding.Grounding.sentence_dict`: ``start``, ``end``, ``text``, ``score``,
``verdict``, ``support``, ``weakest_word``). The run is a :class:`~rcstat.runs.job.Job` (kind
``"ground pairs"``): resumed on the pair's id and content hash, a folder made with other
settings, a folder that cannot be written, a line longer than ``max_chars`` or a response
without a word refused before the model loads; :func:`summarize_run` counts the verdicts into
``summary.json``.

>>> import json, pathlib, tempfile
>>> data = pathlib.Path(tempfile.mkdtemp()) / "pairs.jsonl"
>>> _ = data.write_text(json.dumps({"context": "The sky is blue.", "response": "Blue."}) + "\\n")
>>> PairsConfig.from_dict({"data": str(data), "options": {"quantile": 0.3}}).options.quantile
0.3
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rcstat.checks import check_file
from rcstat.evaluation.bench.common import JobConfig, resolved
from rcstat.evaluation.bench.results import Outcome
from rcstat.grounding.limits import check_limit, check_texts
from rcstat.grounding.options import GroundingOptions
from rcstat.runs.folder import check_writable, staged_output
from rcstat.runs.job import Item, Job, run_job
from rcstat.runs.manifest import content_hash
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import EXAMPLE_HASH, RowFile, read_jsonl
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from rcstat.data import ResponsePair
    from rcstat.evaluation.bench.common import Loader
    from rcstat.grounding import Grounder, Grounding

__all__ = ["KIND", "PairsConfig", "PairsJob", "PairsResult", "run", "summarize_run"]

#: The kind of run recorded in the manifest (and the owner of its output folder).
KIND = "ground pairs"
#: The row file: one row per input line, keyed on the pair's id.
RUN_FILES = RunFiles(KIND, (RowFile("grounded.jsonl", "id", commit=True),))
VERDICTS = ("supported", "unsupported", "unverified", "error")
#: Pairs given to each batch of passes where a pass takes several (their rows are written
#: after it): enough to sort by length, few to lose on an interruption.
PAIRS_PER_BATCH = 64


@dataclass
class PairsConfig(JobConfig):
    """Everything ``rcstat ground --pairs`` runs with: ``data`` is the pairs file,
    ``options`` the grounder's (:class:`~rcstat.grounding.options.GroundingOptions`, as
    ``rcstat ground``'s flags give them), ``batch_tokens`` the most tokens of one pass."""

    COMMAND = KIND

    dataset: str = "pairs"
    out: Path = Path("runs/ground")
    options: GroundingOptions = field(default_factory=GroundingOptions)
    batch_tokens: int | None = None

    def check(self, *, flags: bool = False) -> None:
        """Every option in its range (``ValueError`` naming the option)."""
        if self.data is None:
            raise ValueError("--pairs: give the JSON-lines file of the pairs")
        check_file("--pairs", self.data)
        self.options = self.options.checked(flags=True)
        if self.batch_tokens is not None:
            check_limit("--batch-tokens", self.batch_tokens)

    def check_pairs(self, pairs: Sequence[ResponsePair]) -> None:
        """Refuse, before the model loads, a line with a text longer than ``--max-chars`` or a
        response without a word (``ValueError`` naming the file and the line)."""
        for pair in pairs:
            texts = {"context": pair.context, "response": pair.response, "question": pair.question}
            try:
                check_texts(texts, self.options.max_chars, option="--max-chars")
            except ValueError as err:
                raise ValueError(f"--pairs {self.data} line {pair.line}: {err}") from None

    def run_options(self) -> dict[str, Any]:
        """Every option that changes a row (compared on resume)."""
        return {"data": resolved(self.data), **self.options.manifest()}


@dataclass
class PairsResult(Outcome):
    """The outcome of :func:`run`: the count of each verdict (None while another shard
    works)."""

    counts: dict[str, int] | None = None

    def summary_lines(self) -> list[str] | None:
        """One line: how many pairs got each verdict, and where the rows are."""
        if self.counts is None:
            return None
        counts = self.counts
        return [
            f"{sum(counts.values())} pairs: {counts['supported']} supported, "
            f"{counts['unsupported']} unsupported, {counts['unverified']} unverified, "
            f"{counts['error']} not scored (see "
            f"{self.out / RUN_FILES.commit.name})"
        ]


@dataclass
class PairsJob(Job):
    """The pairs as a :class:`~rcstat.runs.job.Job`: one item (and one row) per line."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    grounder: Grounder
    pairs: Sequence[ResponsePair]
    options: dict[str, Any]
    model_name: str
    batch_tokens: int | None = None

    def source(self) -> tuple[Any, Any, str | None]:
        measurer = self.grounder.measurer
        return measurer.model, measurer.tokenizer, self.model_name

    def manifest_options(self) -> dict[str, Any]:
        return {**self.options, "method": self.grounder.method}

    def items(self) -> list[Item]:
        return [
            Item(p.id, content_hash([p.context, p.response, p.question]), i, p)
            for i, p in enumerate(self.pairs)
        ]

    def progress_label(self) -> tuple[str, str]:
        return KIND, "pair"

    def batch_size(self) -> int:
        """:data:`PAIRS_PER_BATCH` pairs at a time where passes take several pairs."""
        measurer = self.grounder.measurer
        return 1 if measurer.batch_budget(self.batch_tokens) == 1 else PAIRS_PER_BATCH

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        return self.run_batch([item], folder)[0]

    def run_batch(
        self, items: Sequence[Item], folder: Path | None
    ) -> list[dict[str, list[dict[str, Any]]]]:
        pairs: list[ResponsePair] = [item.data for item in items]
        results = self.grounder.ground_many(
            [(p.context, p.response, p.question) for p in pairs],
            batch_tokens=self.batch_tokens,
            show_progress=True,
        )
        return [
            {RUN_FILES.commit.name: [_row(item, pair, result)]}
            for item, pair, result in zip(items, pairs, results, strict=True)
        ]


def _row(item: Item, pair: ResponsePair, result: Grounding | ValueError) -> dict[str, Any]:
    """The row of one pair: its verdict and evidence, or the reason it was not scored (e.g. a
    response over ``max_response_tokens``)."""
    row: dict[str, Any] = {"id": pair.id, "line": pair.line, EXAMPLE_HASH: item.hash}
    if isinstance(result, ValueError):
        row.update(verdict="error", error=f"{type(result).__name__}: {result}")
        return row
    row["verdict"] = result.verdict
    row["score"], row["threshold"] = _number(result.score), result.threshold
    row["probe_score"] = _number(result.probe_score)
    row["spans"] = [span.to_dict() for span in result.spans]
    row["unsupported"] = [result.sentence_dict(s) for s in result.unsupported]
    row["unverified"] = [result.sentence_dict(s) for s in result.unverified]
    row["error"] = None
    return row


def run(config: PairsConfig, *, loader: Loader | None = None) -> PairsResult:
    """Ground every pair not yet done and count the verdicts; ``loader`` and the
    ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`), a malformed line
    (:class:`~rcstat.data.DatasetFormatError`, naming it) before the model loads."""
    from rcstat.data import load_pairs
    from rcstat.grounding import Grounder
    from rcstat.runs.manifest import model_label

    config.check_folder()
    check_writable(config.out)
    assert config.data is not None  # checked
    pairs = load_pairs(config.data, limit=config.n)
    config.require(pairs)
    config.check_pairs(pairs)
    model, tokenizer = config.load_model(loader)
    grounder = Grounder(model, tokenizer, config.options)
    config.claim_folder()
    job = PairsJob(
        grounder, pairs, config.compared(), model_label(config.model), config.batch_tokens
    )
    done = run_job(job, config.out, shard=config.shard, retry_failed=config.retry_failed)
    result = PairsResult(config.out, config.shard, done.merged)
    return result if result.part_only else summarize_run(config.out, {}, shard=config.shard)


def _number(value: float | None) -> float | None:
    """A score as JSON: None for NaN (a response with no checked sentence) or no value."""
    return None if value is None or value != value else float(value)


def summarize_run(
    out: Path, settings: Mapping[str, Any], *, shard: Shard | None = None
) -> PairsResult:
    """Count the verdicts of the rows in ``out`` into ``summary.json`` (``settings``: none
    needed)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for row in read_jsonl(out / RUN_FILES.commit.name):
        counts[str(row["verdict"])] += 1
    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        (stage / "summary.json").write_text(json.dumps(counts, indent=1), encoding="utf-8")
    return PairsResult(out, shard or Shard(), True, counts)
