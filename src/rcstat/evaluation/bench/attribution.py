"""``rcstat bench attribution`` as a library call: :class:`AttributionConfig` → :func:`run` →
:class:`~rcstat.evaluation.bench.results.AttributionResult` — chunk-level attribution accuracy
on QuoteSum / VERI-GRAN (paper §5.3, Table 1, Fig. 7).

>>> config = AttributionConfig.from_dict({"dataset": "verigran", "ks": ["1", "all"], "n": 3})
>>> config.dataset, config.ks, config.span_score
('verigran', ['1', 'all'], 'sentence')

For every example the annotated answer is teacher-forced once (one forward pass,
:class:`~rcstat.attribution.Attributor`); every annotated span of the answer is a unit with a
gold chunk. From that single pass every method is scored
(:func:`~rcstat.evaluation.attribution_scoring.score_example`):

* ``top`` / ``bottom``: the ``k`` heads with the highest / lowest RC of raw scores;
* ``top_post_softmax`` / ``bottom_post_softmax``: ranked by RC of post-softmax weights
  (supplement Table 2);
* ``all``: RC summed over every head;
* ``attention``: mean post-softmax attention over all heads and layers (the standard
  attention attribution);
* ``top_fixed`` (with ``fixed_heads_from``): one head set for every example, the ``k`` heads of
  lowest mean rank over the head rankings of another run's examples
  (:class:`FixedHeads`, :func:`~rcstat.attribution.consensus_heads`; the ranking reads no gold
  label, so that run may be of the same examples).

The RC methods score a span by its best sentence (the default), its keys' mean (the paper's
eq. 10) or their sum (``span_score``, :meth:`~rcstat.attribution.Attribution.head_totals`); the
question follows the sources unless ``question_first``. Each line keeps the example's head
ranking (``head_scores``, ``[layers, heads]``), which a later run reads as its fixed set. A unit
is correct when its argmax chunk is the gold one (docs/definitions.md); a unit whose scores are
all zero counts as wrong.

**Layout** (:data:`~rcstat.evaluation.choices.LAYOUTS`,
:func:`~rcstat.evaluation.attribution_scoring.render`): every method sees the same prompt.
``numbered`` renders the sources as RAG prompts do, one per paragraph, ``[k] Title: text`` (the
title where the dataset has one, QuoteSum's; VERI-GRAN's passages have none), and a candidate
span is a whole source entry, marker and title included (some QuoteSum units quote a title);
``numbered-text`` is the same prompt with the chunk's own text as the candidate span (marker and
title left out); ``plain`` joins the bare chunks with blank lines (the layout of the first
benchmark runs, kept for comparison). **Lengths**: each line records the prompt's token count
(chat template, context and question).

:func:`run` refuses, before the model loads, an output folder of another command, a run made
with other options or a ``fixed_heads_from`` that holds no head ranking; loads the annotated
examples and the model; skips the prompts longer than ``max_tokens``; runs the
:class:`AttributionJob` (:meth:`~rcstat.evaluation.bench.common.JobConfig.run_job`); and
summarises the folder (:func:`summarize_run`). The run folder holds ``run.json`` (the manifest:
model, tokenizer, rcstat version, dataset, ``k`` values, the attributor's statistic, the
layout; see :mod:`rcstat.runs`) and ``predictions.jsonl`` (one line per example with its
content hash, resumable: a changed example is scored again, a failed one retried unless
``retry_failed=False``), and the summaries rebuilt from every line
(:mod:`rcstat.evaluation.attribution_summary`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from rcstat.checks import int_list, optional_count, split_list
from rcstat.defaults import default_span_score, resolve_span_score
from rcstat.evaluation.attribution_scoring import (
    example_hash,
    parse_ks,
    prompt_tokens,
    render,
    score_example,
)
from rcstat.evaluation.bench.common import DatasetJob, JobConfig, resolved, say_default
from rcstat.evaluation.bench.results import AttributionResult
from rcstat.evaluation.choices import LAYOUTS
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Item
from rcstat.runs.manifest import MANIFEST_FILE, RunManifest, content_hash, model_label
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import EXAMPLE_HASH, RowFile, read_jsonl
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from rcstat.attribution import Attributor
    from rcstat.data import AttributionExample
    from rcstat.evaluation.bench.common import Loader, Say

__all__ = [
    "KIND",
    "AttributionConfig",
    "AttributionJob",
    "FixedHeads",
    "read_head_scores",
    "run",
    "summarize_run",
]

#: The kind of run recorded in the manifest (and the command whose output folder it is).
KIND = "bench attribution"
#: The row file of a run, as its parts and their merge see it (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(KIND, (RowFile("predictions.jsonl", "example", commit=True),))

_STATISTICS = ("expected", "upper")


@dataclass
class AttributionConfig(JobConfig):
    """Everything ``rcstat bench attribution`` runs with (each field is the command's option;
    the shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`): the only home of
    its defaults and checks.

    ``ks`` holds numbers of heads as text, ``"all"`` for every head (resolved against the
    model's head count); ``span_score`` None is the default of ``statistic``.
    """

    COMMAND = KIND
    TASK = "attribution"

    dataset: str = "quotesum"
    out: Path = Path("runs/bench_attribution")
    ks: list[str] = field(default_factory=lambda: "1,2,5,10,20,50,100,all".split(","))
    layout: str = "numbered"
    max_tokens: int | None = None
    statistic: str = "expected"
    span_score: str | None = None
    question_first: bool = False
    fixed_heads_from: Path | None = None

    def __post_init__(self) -> None:
        if self.span_score is None:
            self.span_score = default_span_score(self.statistic)

    PATHS = ("out", "fixed_heads_from")
    #: The command-line flag of each field whose flag is not ``--<field>``.
    FLAGS: ClassVar[dict[str, str]] = {"ks": "--k"}

    @classmethod
    def from_flags(cls, flags: Any, **given: Any) -> Self:
        """The checked config of the command line: ``flags`` has an attribute named as each
        field (an argparse namespace; ``ks`` the text of ``--k``, comma-separated), None
        keeping the field's default, and every message names the flag (``--k``, not ``ks``).
        ``devices`` and ``shard`` are the caller's (several flags and the launcher's
        environment make them).

        >>> from types import SimpleNamespace
        >>> AttributionConfig.from_flags(SimpleNamespace(ks="1,all", layout=None)).ks
        ['1', 'all']
        >>> AttributionConfig.from_flags(SimpleNamespace(ks="1,0"))
        Traceback (most recent call last):
        ...
        ValueError: --k must be an integer in [1, ∞), got 0
        """
        ks = getattr(flags, "ks", None)
        return super().from_flags(flags, ks=split_list(ks) if isinstance(ks, str) else ks)

    def check_values(self) -> None:
        """The ``k`` values as text and the dataset (an attribution set, by its registry
        name)."""
        self.ks = [str(k) for k in self.ks]
        super().check_values()

    def check(self, *, flags: bool = False) -> None:
        """Every option in its range: a ``ValueError`` naming the first bad one (``--k`` with
        ``flags``, else ``ks``)."""

        def name(option: str) -> str:
            return self.FLAGS.get(option, f"--{option.replace('_', '-')}") if flags else option

        if not self.ks:
            raise ValueError(f"{name('ks')} needs at least one value")
        numbers = [k for k in self.ks if k != "all"]
        if numbers:
            int_list(name("ks"), numbers)
        optional_count(name("n"), self.n)
        optional_count(name("max_tokens"), self.max_tokens, low=2)
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"{name('layout')} {self.layout!r}: choose one of {', '.join(LAYOUTS)}"
            )
        if self.statistic not in _STATISTICS:
            raise ValueError(f"{name('statistic')} {self.statistic!r}: choose expected or upper")
        resolve_span_score(
            str(self.span_score), self.statistic, names=(name("span_score"), name("statistic"))
        )
        source = self.fixed_heads_from
        if source is not None:
            if not (source / "predictions.jsonl").is_file():
                raise ValueError(f"{name('fixed_heads_from')} {source}: no {KIND} run there")
            if source.resolve() == self.out.resolve():
                raise ValueError(f"{name('fixed_heads_from')}: give another run than {name('out')}")

    def run_options(self) -> dict[str, Any]:
        """The data options of the manifest (the k values are compared once resolved)."""
        return {"data": resolved(self.data), "max_tokens": self.max_tokens}

    def compared(self) -> dict[str, Any]:
        """The manifest options known before the model loads: the dataset, ``layout``,
        ``statistic``, :meth:`run_options` and the prompt options set."""
        compared: dict[str, Any] = {
            "dataset": self.dataset,
            "layout": self.layout,
            "statistic": self.statistic,
            **self.run_options(),
        }
        compared.update(self.prompt_options())
        return compared

    def prompt_options(self) -> dict[str, Any]:
        """``span_score`` and ``question_first`` as the manifest records them: only when set
        (so that runs made before these options still resume)."""
        options: dict[str, Any] = {}
        if self.span_score != "mean":
            options["span_score"] = self.span_score
        if self.question_first:
            options["question_first"] = True
        return options


def read_head_scores(run: Path) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The per-example head rankings (``[layers, heads]``) of a finished ``bench attribution``
    run, and the model identity of its manifest (a fixed head set must come from the same
    model).

    Raises
    ------
    ValueError
        ``run`` is not an attribution run, or none of its lines holds a ranking (runs of
        rcstat before rankings were kept).
    """
    path = Path(run)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: no readable run manifest ({err})") from err
    if manifest.get("kind") != KIND:
        raise ValueError(f"{path}: a {manifest.get('kind')!r} run, not a {KIND!r} run")
    rankings = [
        np.asarray(line["head_scores"], dtype=np.float64)
        for line in read_jsonl(path / RUN_FILES.commit.name)
        if line.get("head_scores") is not None
    ]
    if not rankings:
        raise ValueError(f"{path}: no example holds a head ranking (run it again to keep them)")
    return rankings, manifest["model"]


@dataclass(frozen=True)
class FixedHeads:
    """The head rankings of another ``bench attribution`` run, folder ``source``, made with
    ``model`` (its manifest's identity): the ``top_fixed`` method's one head set for every
    example."""

    source: Path
    rankings: list[np.ndarray]
    model: dict[str, Any]

    @classmethod
    def read(cls, source: Path) -> FixedHeads:
        """The rankings of the run in ``source`` (:func:`read_head_scores`, its errors)."""
        rankings, model = read_head_scores(source)
        return cls(source, rankings, model)

    def manifest(self) -> dict[str, Any]:
        """What a run's manifest records of them: the folder as given, the rankings' hash."""
        return {
            "from": str(self.source),
            "rankings": content_hash([r.tolist() for r in self.rankings]),
        }

    def heads(
        self, model: Mapping[str, Any], ks: Sequence[int]
    ) -> dict[int, list[tuple[int, int]]]:
        """The fixed head set of every ``k`` in ``ks`` for a run of ``model`` (its manifest's
        identity); ``ValueError`` when the rankings come from another model."""
        from rcstat.attribution import consensus_heads

        if self.model.get("weights") != model["weights"]:
            raise ValueError(
                f"fixed heads: {self.source} was run with another model "
                f"({self.model.get('name')}); a head set only means something for its own model"
            )
        return {k: consensus_heads(self.rankings, k) for k in ks}


@dataclass
class AttributionJob(DatasetJob[AttributionConfig, "AttributionExample"]):
    """The attribution benchmark of ``config`` over ``examples`` as a
    :class:`~rcstat.runs.job.Job`: one item per example (one forward pass of ``model`` scores
    every method and ``k``). ``fixed`` is the head rankings of ``config.fixed_heads_from``
    (read from it when not given); ``ks`` the config's resolved against the model's heads."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    fixed: FixedHeads | None = None
    attributor: Attributor = field(init=False)
    ks: list[int] = field(init=False)
    #: The fixed head set of every ``k``, once the run's model is known (:meth:`check`).
    fixed_heads: dict[int, list[tuple[int, int]]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        from rcstat.attribution import Attributor
        from rcstat.capture import attention_layout

        config = self.config
        self.attributor = Attributor(  # k is set per accuracy row
            self.model,
            self.tokenizer,
            top_k=None,
            head_ranking="all",
            rank_post_softmax=True,
            statistic=config.statistic,  # type: ignore[arg-type]
            span_score=config.span_score,  # type: ignore[arg-type]
            question_first=config.question_first,
        )
        layout = attention_layout(self.model)
        self.ks = parse_ks(",".join(config.ks), layout.num_layers * layout.num_heads)
        if self.fixed is None and config.fixed_heads_from is not None:
            self.fixed = FixedHeads.read(config.fixed_heads_from)

    def manifest_options(self) -> dict[str, Any]:
        """The config's options (the ``k`` values resolved), the attributor's
        ``allow_special_tokens`` and the fixed heads' source."""
        config = self.config
        options: dict[str, Any] = {
            "dataset": config.dataset,
            "ks": list(self.ks),
            "statistic": config.statistic,
            "allow_special_tokens": self.attributor.allow_special_tokens,
            "layout": config.layout,
            **config.run_options(),
            **config.prompt_options(),
        }
        if self.fixed is not None:
            options["fixed_heads"] = self.fixed.manifest()
        return options

    def items(self) -> list[Item]:
        return [Item(e.id, example_hash(e), i, e) for i, e in enumerate(self.examples)]

    def progress_label(self) -> tuple[str, str]:
        return f"{KIND} {self.config.dataset}", "example"

    def check(self, manifest: RunManifest) -> None:
        if self.fixed is not None:
            self.fixed_heads = self.fixed.heads(manifest.model, self.ks)

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        example: AttributionExample = item.data
        layout, attributor = self.config.layout, self.attributor
        line: dict[str, Any] = {
            "example": example.id,
            EXAMPLE_HASH: item.hash,
            "chunks": len(example.chunks),
        }
        try:
            context, spans = render(example, layout)
            result = attributor.attribute(
                context,
                example.question,
                example.answer,
                spans=spans,
                units=[(u.start, u.end) for u in example.units],
            )
            gold = [u.gold_chunk for u in example.units]
            line["prompt_tokens"] = prompt_tokens(
                self.tokenizer, example, layout, question_first=attributor.question_first
            )
            line["rows"] = score_example(result, gold, self.ks, self.fixed_heads)
            line["head_scores"] = result.head_scores.tolist()
            line["error"] = None
        except ValueError as err:  # recorded (e.g. longer than the window)
            line["rows"], line["error"] = [], f"{type(err).__name__}: {err}"
        return {RUN_FILES.commit.name: [line]}


def run(
    config: AttributionConfig, *, loader: Loader | None = None, say: Say | None = None
) -> AttributionResult:
    """Run (or resume) the attribution benchmark of ``config`` and summarise it; ``loader``,
    ``say`` and the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`),
    where an example needs annotated spans, and a ``ValueError`` when every prompt is longer
    than ``max_tokens``."""
    from rcstat.data import AttributionExample, load_dataset

    say = say or say_default
    config.check_folder()
    source = config.fixed_heads_from
    fixed = None if source is None else FixedHeads.read(source)  # refused before the model
    loaded = load_dataset(config.dataset, config.data, limit=config.n)
    examples = [e for e in loaded if isinstance(e, AttributionExample) and e.units]
    if len(examples) != len(loaded):
        say(f"skipping {len(loaded) - len(examples)} examples without annotated spans")
    if not examples:
        raise ValueError(f"no annotated example in {config.dataset} ({config.data or 'slice'})")
    model, tokenizer = config.load_model(loader)
    if config.max_tokens is not None:
        limit, first = config.max_tokens, config.question_first
        fitting = [
            e
            for e in examples
            if prompt_tokens(tokenizer, e, config.layout, question_first=first) <= limit
        ]
        if len(fitting) != len(examples):
            say(
                f"skipping {len(examples) - len(fitting)} examples whose prompt is longer than "
                f"{limit} tokens"
            )
        if not fitting:
            raise ValueError(f"every example's prompt is longer than {limit} tokens")
        examples = fitting
    job = AttributionJob(config, model, tokenizer, examples, fixed)
    config.claim_folder()
    settings = {"dataset": config.dataset, "model_name": model_label(config.model), "ks": job.ks}
    done = config.run_job(job, settings)
    result = AttributionResult(config.out, config.shard, done.merged)
    return result if result.part_only else summarize_run(config.out, settings, shard=config.shard)


def summarize_run(
    out: Path, settings: Mapping[str, Any], *, shard: Shard | None = None
) -> AttributionResult:
    """Rebuild the summaries of a ``bench attribution`` run (or merged run) in ``out`` from
    its rows (``settings``: the run's ``dataset`` and ``ks``, as :func:`run` records them in
    each part; :func:`~rcstat.evaluation.attribution_summary.write_summaries`)."""
    from rcstat.evaluation.attribution_summary import write_summaries  # pandas, scipy

    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        accuracy, comparison = write_summaries(
            out / RUN_FILES.commit.name, stage, ks=settings["ks"], title=settings["dataset"]
        )
    return AttributionResult(out, shard or Shard(), True, accuracy, comparison)
