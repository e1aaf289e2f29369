"""``rcstat bench grounding`` as a library call: :class:`GroundingConfig` → :func:`run` →
:class:`~rcstat.evaluation.bench.results.GroundingResult`.

>>> GroundingConfig.from_dict({"dataset": "squad_contrast", "n": 4}).dataset
'squad-contrast'

The benchmark scores every (context, response) item of FaithBench, SummEdits, RAGTruth, the
user's labelled pairs (``jsonl``) or two SQuAD v2 constructions (supporting vs unrelated
context, the answer's sentence copied vs its answer changed; built in
:mod:`rcstat.evaluation.grounding_items`) by every method of
:mod:`rcstat.evaluation.grounding_methods`, from one measurement each.

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; builds the items; loads the model; runs the :class:`GroundingJob`
(the grounder made from the config, one row per item in ``predictions.jsonl``, a per-token file
``tokens/<hash>.npz`` for the datasets with annotated spans) with
:meth:`~rcstat.evaluation.bench.common.JobConfig.run_job`; and summarises the folder
(:func:`summarize_run`: the tables and the ROC curves of
:mod:`rcstat.evaluation.grounding_summary`, and ``report.json``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rcstat.checks import check_count, optional_count
from rcstat.defaults import MAX_RESAMPLES
from rcstat.evaluation.bench.common import DatasetJob, JobConfig, resolved
from rcstat.evaluation.bench.results import GroundingResult
from rcstat.evaluation.choices import GROUNDING_DATASETS, PAIR_DATASETS, SPAN_DATASETS
from rcstat.evaluation.grounding_methods import PREDICTIONS, TOKENS, item_scores, token_file_name
from rcstat.grounding.options import GroundingOptions
from rcstat.runs.folder import staged_output
from rcstat.runs.job import Item
from rcstat.runs.manifest import model_label
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import EXAMPLE_HASH, RowFile
from rcstat.runs.shards import Shard

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.grounding_items import GroundingItem
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.measurement import Prepared

__all__ = [
    "ITEMS_PER_BATCH",
    "KIND",
    "RUN_FILES",
    "GroundingConfig",
    "GroundingJob",
    "run",
    "summarize_run",
]

#: The kind of run recorded in the manifest (and the owner of its output folder).
KIND = "bench grounding"
#: The row file of a run and its folder of per-item files, as its parts and their merge see
#: them (:mod:`rcstat.runs.parts`).
RUN_FILES = RunFiles(
    KIND,
    (RowFile(PREDICTIONS, "item", commit=True),),
    folder=TOKENS,
    key_file=token_file_name,
)
#: Items given to each batch of passes where a pass takes several (their rows are written
#: after it).
ITEMS_PER_BATCH = 64


@dataclass
class GroundingConfig(JobConfig):
    """Everything ``rcstat bench grounding`` runs with (each field is the command's option;
    the shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`): ``questionable``
    (FaithBench: a 'Questionable' annotation also makes a response hallucinated), the bootstrap
    ``resamples``, RAGTruth's ``task`` (None: all three), the grounder's ``options``
    (:class:`~rcstat.grounding.options.GroundingOptions`) and ``batch_tokens``, the most tokens
    of one pass."""

    COMMAND = KIND

    dataset: str = "faithbench"
    out: Path = Path("runs/bench_grounding")
    questionable: bool = False
    resamples: int = 1000
    task: str | None = None
    options: GroundingOptions = field(default_factory=GroundingOptions)
    batch_tokens: int | None = None

    def check(self, *, flags: bool = False) -> None:
        """Every option in its range (``ValueError`` naming the option); the dataset's name
        is folded to its canonical spelling."""
        dataset = self.dataset.strip().lower().replace("_", "-")
        if dataset not in GROUNDING_DATASETS:
            raise ValueError(
                f"bench grounding needs --dataset {' or '.join(GROUNDING_DATASETS)}, "
                f"not {self.dataset}"
            )
        self.dataset = dataset
        if self.questionable and dataset != "faithbench":
            raise ValueError("--questionable applies to --dataset faithbench only")
        self.options = self.options.checked(flags=True)
        if self.task is not None:
            from rcstat.data.ragtruth import TASKS

            if dataset != "ragtruth":
                raise ValueError("--task applies to --dataset ragtruth only")
            if self.task not in TASKS:
                raise ValueError(f"--task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if dataset == "jsonl" and self.data is None:
            raise ValueError("--dataset jsonl needs --data FILE (your labelled pairs)")
        optional_count("--n", self.n)
        optional_count("--batch-tokens", self.batch_tokens)
        check_count("--resamples", self.resamples, high=MAX_RESAMPLES)

    def run_options(self) -> dict[str, Any]:
        """The options of the manifest besides the dataset and the grounder's method."""
        detector = self.options.detector
        return {
            "data": resolved(self.data),
            "questionable": self.questionable,
            "task": self.task,
            **self.options.manifest(),
            "zero_shot": detector is False,
        }


@dataclass
class GroundingJob(DatasetJob[GroundingConfig, "GroundingItem"]):
    """The grounding benchmark as a :class:`~rcstat.runs.job.Job`: one item (and one row of
    ``predictions.jsonl``) per (context, response) of ``examples``, measured several a pass
    (:meth:`~rcstat.grounding.Measurer.measure_many`) and scored by every method
    (:func:`~rcstat.evaluation.grounding_methods.item_scores`) with the grounder that the
    ``config``'s options make of ``model`` and ``tokenizer`` (every head and the prior pass
    measured; its zero-shot twin gives the zero-shot verdict); the datasets with annotated
    spans also keep each item's per-token file ``tokens/<hash>.npz``."""

    kind: ClassVar[str] = KIND
    files: ClassVar[RunFiles] = RUN_FILES

    #: The grounder of the default verdict and its zero-shot twin (made from the config).
    grounder: Grounder = field(init=False, repr=False)
    zero_shot: Grounder = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from rcstat.grounding import Grounder

        self.grounder = Grounder(
            self.model, self.tokenizer, self.config.options, all_heads=True, prior=True
        )
        no_detector = self.grounder.detector is None
        self.zero_shot = self.grounder if no_detector else self.grounder.zero_shot()

    def source(self) -> tuple[Any, Any, str | None]:
        measurer = self.grounder.measurer
        return measurer.model, measurer.tokenizer, model_label(self.config.model)

    def manifest_options(self) -> dict[str, Any]:
        """The dataset, the grounder's method and the config's
        :meth:`~GroundingConfig.run_options`."""
        config = self.config
        return {"dataset": config.dataset, "method": self.grounder.method, **config.run_options()}

    def summary_settings(self) -> dict[str, Any]:
        """What :func:`summarize_run` needs of the run (kept in each part for ``rcstat
        merge``): the dataset, the model's label, the resamples and the model's layers and
        heads."""
        from rcstat.capture import attention_layout

        layout = attention_layout(self.model)
        return {
            "dataset": self.config.dataset,
            "model_name": model_label(self.config.model),
            "resamples": self.config.resamples,
            "layers": layout.num_layers,
            "heads": layout.num_heads,
        }

    def items(self) -> list[Item]:
        return [Item(it.id, it.hash(), i, it) for i, it in enumerate(self.examples)]

    def progress_label(self) -> tuple[str, str]:
        return f"{KIND} {self.config.dataset}", "item"

    def batch_size(self) -> int:
        """:data:`ITEMS_PER_BATCH` items at a time where passes take several."""
        budget = self.grounder.measurer.batch_budget(self.config.batch_tokens)
        return 1 if budget == 1 else ITEMS_PER_BATCH

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        return self.run_batch([item], folder)[0]

    def run_batch(
        self, items: Sequence[Item], folder: Path | None
    ) -> list[dict[str, list[dict[str, Any]]]]:
        """Measure the items, several in each pass (:meth:`Measurer.measure_many`), then
        score each with every method; an item that cannot be measured or scored has its
        ``error`` recorded."""
        measurer = self.grounder.measurer
        tokens = None
        if self.config.dataset in SPAN_DATASETS and folder is not None:
            tokens = folder / TOKENS
        lines: list[dict[str, Any]] = []
        ready: list[tuple[dict[str, Any], GroundingItem, Prepared]] = []
        for item in items:
            entry: GroundingItem = item.data
            line: dict[str, Any] = {
                "item": entry.id,
                EXAMPLE_HASH: item.hash,
                "label": entry.label,
                "group": entry.group,
                "by": entry.by,
                "pair": entry.pair,
                "detectors": entry.detectors,
            }
            lines.append(line)
            try:
                ready.append(
                    (line, entry, measurer.prepare(entry.context, entry.response, entry.question))
                )
            except ValueError as err:  # recorded (e.g. longer than the window)
                line["error"] = f"{type(err).__name__}: {err}"
        measured = measurer.measure_many(
            [p for _, _, p in ready], batch_tokens=self.config.batch_tokens
        )
        for (line, entry, _), one in zip(ready, measured, strict=True):
            try:
                line.update(item_scores(self.grounder, self.zero_shot, entry, one, tokens))
            except ValueError as err:
                line["error"] = f"{type(err).__name__}: {err}"
        return [{RUN_FILES.commit.name: [line]} for line in lines]


def grounding_examples(config: GroundingConfig) -> list[GroundingItem]:
    """The items of ``config``'s dataset (its ``data`` file or the shared slice, the first
    ``n``): SQuAD v2's pairs for :data:`~rcstat.evaluation.choices.PAIR_DATASETS`, else every
    response (FaithBench's ``questionable`` annotations and RAGTruth's ``task`` as asked)."""
    from rcstat.data import load_dataset
    from rcstat.evaluation.grounding_items import contrast_items, grounding_items, swap_items

    if config.dataset in PAIR_DATASETS:
        loaded = load_dataset("squad_v2", config.data, limit=config.n)
        pairs = contrast_items if config.dataset == "squad-contrast" else swap_items
        return pairs(loaded)  # type: ignore[arg-type]
    options: dict[str, Any] = {"questionable": True} if config.questionable else {}
    if config.task is not None:
        options["task"] = config.task
    loaded = load_dataset(config.dataset, config.data, limit=config.n, **options)
    return grounding_items(loaded)  # type: ignore[arg-type]


def run(config: GroundingConfig, *, loader: Loader | None = None) -> GroundingResult:
    """Run (or resume) the grounding benchmark of ``config`` and summarise it; ``loader`` and
    the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`)."""
    config.check_folder()
    items = grounding_examples(config)
    config.require(items)
    model, tokenizer = config.load_model(loader)
    job = GroundingJob(config, model, tokenizer, items)
    settings = job.summary_settings()
    config.claim_folder()
    done = config.run_job(job, settings)  # measure every item not yet done
    result = GroundingResult(config.out, config.shard, done.merged)
    return result if result.part_only else summarize_run(config.out, settings, shard=config.shard)


def summarize_run(
    out: Path, settings: Mapping[str, Any], *, shard: Shard | None = None
) -> GroundingResult:
    """Rebuild the summaries of a ``bench grounding`` run (or merged run) in ``out`` from its
    rows, ``report.json`` included (:func:`~rcstat.evaluation.grounding_summary.summarize`;
    ``settings``: :meth:`GroundingJob.summary_settings`)."""
    from rcstat.evaluation.grounding_summary import summarize

    with staged_output(out, KIND, keep=RUN_FILES.row_names()) as stage:
        report = summarize(
            out,
            stage,
            settings["dataset"],
            layers=settings["layers"],
            heads=settings["heads"],
            n_resamples=settings["resamples"],
        )
        (stage / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return GroundingResult(out, shard or Shard(), True, report)
