"""``rcstat bench grounding`` as a library call: :class:`GroundingConfig` → :func:`run` →
:class:`GroundingResult`.

>>> GroundingConfig.from_dict({"dataset": "squad_contrast", "n": 4}).dataset
'squad-contrast'

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; builds the items (FaithBench / SummEdits / labelled-pairs responses,
or SQuAD v2 supporting-vs-unrelated or copied-vs-changed pairs); loads the model and the
grounder; runs the :class:`~rcstat.evaluation.grounding_job.GroundingJob` through
:func:`~rcstat.runs.job.run_job`; and summarises the folder (:func:`summarize_run`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rcstat.checks import check_count, optional_count
from rcstat.defaults import MAX_RESAMPLES
from rcstat.evaluation.bench.common import JobConfig, Loader, resolved, summarized
from rcstat.evaluation.bench.results import GroundingResult
from rcstat.evaluation.choices import GROUNDING_DATASETS
from rcstat.grounding.options import GroundingOptions

__all__ = ["GroundingConfig", "run"]


@dataclass
class GroundingConfig(JobConfig):
    """Everything ``rcstat bench grounding`` runs with (each field is the command's option;
    the shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`)."""

    COMMAND = "bench grounding"

    dataset: str = "faithbench"
    out: Path = Path("runs/bench_grounding")
    questionable: bool = False
    resamples: int = 1000
    task: str | None = None
    options: GroundingOptions = field(default_factory=GroundingOptions)
    batch_tokens: int | None = None

    def check(self) -> None:
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


def run(config: GroundingConfig, *, loader: Loader | None = None) -> GroundingResult:
    """Run (or resume) the grounding benchmark of ``config`` and summarise it; ``loader`` and
    the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`)."""
    from rcstat.capture import attention_layout
    from rcstat.data import load_dataset
    from rcstat.evaluation.grounding_bench import GroundingBench, summarize_run
    from rcstat.evaluation.grounding_items import contrast_items, grounding_items, swap_items
    from rcstat.evaluation.grounding_job import GroundingJob
    from rcstat.grounding import Grounder

    out = config.out
    config.check_folder()
    if config.dataset in ("squad-contrast", "squad-swaps"):
        loaded = load_dataset("squad_v2", config.data, limit=config.n)
        pairs = contrast_items if config.dataset == "squad-contrast" else swap_items
        items = pairs(loaded)  # type: ignore[arg-type]
    else:
        options: dict[str, Any] = {"questionable": True} if config.questionable else {}
        if config.task is not None:
            options["task"] = config.task
        loaded = load_dataset(config.dataset, config.data, limit=config.n, **options)
        items = grounding_items(loaded)  # type: ignore[arg-type]
    config.require(items)
    model, tokenizer = config.load_model(loader)
    layout = attention_layout(model)
    grounder = Grounder(model, tokenizer, config.options, all_heads=True, prior=True)
    bench = GroundingBench(
        dataset=config.dataset, n_resamples=config.resamples, **config.run_fields()
    )
    config.claim_folder()
    settings = {
        "dataset": config.dataset,
        "model_name": bench.model_name,
        "resamples": config.resamples,
        "layers": layout.num_layers,
        "heads": layout.num_heads,
    }
    zero_shot = grounder if grounder.detector is None else grounder.zero_shot()
    job = GroundingJob(bench, grounder, items, zero_shot, config.batch_tokens)
    bench.run_job(job, config.shard, settings)  # measure every item not yet done
    summary = partial(summarize_run, out, settings, shard=config.shard)
    return summarized(bench, GroundingResult, config.shard, summary)
