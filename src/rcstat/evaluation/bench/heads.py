"""``rcstat heads`` as a library call: :class:`HeadsConfig` → :func:`run` → :class:`HeadsResult`.

>>> config = HeadsConfig.from_dict({"dataset": "squad", "n": 2, "tau": 1.5})
>>> config.dataset, config.n, config.tau
('squad_v2', 2, 1.5)

:func:`run` refuses, before the model loads, an output folder of another command or a run
made with other options; loads the examples and the model; collects the per-head statistics
(:func:`~rcstat.heads.collection.collect`, a :class:`~rcstat.heads.collection.HeadsJob` run by
:func:`~rcstat.runs.job.run_job`); then rebuilds the summary and the figures from the whole
``heads.csv`` (:func:`summarize_run`). :func:`compare_runs` compares two earlier runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rcstat.checks import check_count, check_tau, optional_count
from rcstat.data.registry import DATASETS, canonical_name
from rcstat.defaults import DATASET_MAX_NEW_TOKENS, DEFAULT_TAU
from rcstat.evaluation.bench.common import JobConfig, resolved

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import Loader
    from rcstat.evaluation.bench.heads_results import HeadsResult

__all__ = [
    "DATASET_CHOICES",
    "HeadsConfig",
    "run",
]

#: The registry's datasets with a question (QA and attribution), plus the user's own JSONL.
DATASET_CHOICES = (*(n for n, i in DATASETS.items() if i.task in ("qa", "attribution")), "jsonl")
_STATISTICS = ("upper", "expected")


@dataclass
class HeadsConfig(JobConfig):
    """Everything ``rcstat heads`` (collect mode) runs with (each field is the command's
    option; the shared ones in :class:`~rcstat.evaluation.bench.common.JobConfig`). ``tau``,
    ``statistic`` and ``top`` shape the summary only."""

    COMMAND = "heads"

    dataset: str = "squad_v2"
    out: Path = Path("runs/heads")
    context: str | None = None
    tau: float = DEFAULT_TAU
    statistic: str = "upper"
    max_new_tokens: int = DATASET_MAX_NEW_TOKENS
    top: int = 10

    def check(self, *, flags: bool = False) -> None:
        """Every option in its range and the dataset's canonical name (``ValueError`` naming
        the option)."""
        optional_count("--n", self.n)
        check_count("--max-new-tokens", self.max_new_tokens)
        check_count("--top", self.top)
        check_tau("--tau", self.tau)
        if self.statistic not in _STATISTICS:
            raise ValueError(f"--statistic {self.statistic!r}: choose upper or expected")
        dataset = self.dataset.strip().lower()
        if dataset != "jsonl":
            dataset = canonical_name(dataset)
            if dataset not in DATASET_CHOICES:
                raise ValueError(
                    f"heads analyses examples with a question; {dataset} has none "
                    f"(choose one of {', '.join(DATASET_CHOICES)})"
                )
        self.dataset = dataset
        if dataset == "jsonl" and self.data is None:
            raise ValueError(
                '--dataset jsonl needs --data FILE (one {"context", "question", '
                '"answer"?, "id"?} object per line)'
            )
        if self.context is not None and dataset != "qmsum":
            raise ValueError("--context applies to --dataset qmsum only")

    def run_options(self) -> dict[str, Any]:
        """The options recorded in the manifest besides ``max_new_tokens`` (not ``n``: a run
        grows by resuming with a larger ``n``; not ``tau``, ``statistic``, ``top``: they shape
        the summary, rewritten from every row each time)."""
        return {
            "dataset": self.dataset,
            "data": resolved(self.data),
            "context": self.context,
        }

    def compared(self) -> dict[str, Any]:
        """:meth:`run_options` (which hold the dataset) and ``max_new_tokens``."""
        return {**self.run_options(), "max_new_tokens": self.max_new_tokens}

    def summary_settings(self) -> dict[str, Any]:
        """The options that shape the summary (kept in each part for ``rcstat merge``)."""
        return {"statistic": self.statistic, "tau": self.tau, "top": self.top}


def _examples(config: HeadsConfig) -> list[Any]:
    from rcstat.data import load_dataset
    from rcstat.heads.collection import load_jsonl

    if config.dataset == "jsonl":
        assert config.data is not None  # checked by HeadsConfig.check
        return list(load_jsonl(config.data, limit=config.n))
    options = {} if config.context is None else {"context": config.context}
    return list(load_dataset(config.dataset, config.data, limit=config.n, **options))


def run(config: HeadsConfig, *, loader: Loader | None = None) -> HeadsResult:
    """Collect (or resume) the per-head statistics of ``config`` and summarise the folder;
    ``loader`` and the ``ValueError`` raised as for every job (:mod:`rcstat.evaluation.bench`)."""
    from rcstat.evaluation.bench.heads_results import HeadsResult, summarize_run
    from rcstat.heads.collection import collect

    out = config.out
    config.check_folder()
    examples = _examples(config)
    config.require(examples)
    model, tokenizer = config.load_model(loader)
    config.claim_folder()
    frame = collect(
        model,
        tokenizer,
        examples,
        max_new_tokens=config.max_new_tokens,
        shard=config.shard,
        merge_settings=config.summary_settings(),
        **config.run_fields(),
    )
    errors = dict(frame.attrs.get("errors", {}))
    if config.shard.split and not frame.attrs["merged"]:
        return HeadsResult(out, config.shard, None, config.top, errors)
    result = summarize_run(out, config.summary_settings(), heads=frame)
    result.shard, result.errors = config.shard, errors
    return result
