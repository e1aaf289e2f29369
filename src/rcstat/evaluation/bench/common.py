"""What the dataset jobs' library API shares: the options every config holds, its two
builders and its run folder (:class:`JobConfig`), the model loader, notes, dataset names."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from rcstat.runs.devices import Devices
from rcstat.runs.folder import check_output_folder, claim_output_folder
from rcstat.runs.job import Config, Job, JobRun, check_run_folder, run_job
from rcstat.runs.manifest import model_label
from rcstat.runs.shards import Shard

__all__ = [
    "DatasetJob",
    "JobConfig",
    "Loader",
    "Say",
    "dataset_for",
    "load",
    "load_for",
    "resolved",
    "say_default",
]

logger = logging.getLogger("rcstat.evaluation")

#: Where a job's notes go (the command line prints them; the default logs them).
Say = Callable[[str], None]
#: Loads ``(model, tokenizer)`` from a ``--model`` value on a device plan.
Loader = Callable[[str | None, Devices], tuple[Any, Any]]


@dataclass
class JobConfig(Config):
    """The options every dataset job runs with: the model and its devices, the dataset (its
    name, a data file, how many examples: None takes them all), the output folder, whether
    the items recorded with an error run again, and this process's shard.

    Each job's config adds its own fields and gives ``dataset`` and ``out`` its defaults.
    """

    model: str | None = None
    devices: Devices = field(default_factory=Devices)
    dataset: str = ""
    data: str | None = None
    n: int | None = None
    out: Path = Path("runs")
    retry_failed: bool = True
    shard: Shard = field(default_factory=Shard)

    #: The command whose output folder a run of this job is (and the kind of its manifest).
    COMMAND: ClassVar[str]
    #: The registry's task that ``dataset`` must be of (:func:`dataset_for`); None: the job
    #: checks its dataset itself.
    TASK: ClassVar[str | None] = None

    def check_values(self) -> None:
        """``dataset`` as the registry names it, of :attr:`TASK` (``ValueError`` naming the
        datasets of that task otherwise); nothing without a task."""
        if self.TASK is not None:
            self.dataset = dataset_for(self.dataset, self.TASK, self.COMMAND)

    def check_flags(self) -> None:
        """:meth:`check` with the messages naming the flags."""
        self.check(flags=True)

    @abstractmethod
    def check(self, *, flags: bool = False) -> None:
        """The checks that the command line and :meth:`from_dict` both make (``ValueError``
        naming the option: its flag when ``flags``, where the two differ)."""

    @abstractmethod
    def run_options(self) -> dict[str, Any]:
        """The options recorded in the run's manifest that the job's run does not record
        itself (compared on resume)."""

    def run_fields(self) -> dict[str, Any]:
        """What the job's run takes from every config: the folder ``out``, the model's label
        ``model_name`` (:func:`~rcstat.runs.manifest.model_label`), the manifest's
        ``options`` (:meth:`run_options`) and ``retry_failed``."""
        return {
            "out": self.out,
            "model_name": model_label(self.model),
            "options": self.run_options(),
            "retry_failed": self.retry_failed,
        }

    def compared(self) -> dict[str, Any]:
        """The manifest options known before the model loads, which :meth:`check_folder`
        compares with the folder's run: the dataset and :meth:`run_options`."""
        return {"dataset": self.dataset, **self.run_options()}

    def check_folder(self, compared: Mapping[str, Any] | None = None) -> None:
        """Refuse, before the model loads, an output folder of another command or a run made
        with other options than ``compared`` (default :meth:`compared`;
        :func:`~rcstat.runs.job.check_run_folder`)."""
        options = self.compared() if compared is None else compared
        check_run_folder(self.out, self.COMMAND, options, self.shard)

    def run_job(self, job: Job, settings: Mapping[str, Any] | None = None) -> JobRun:
        """:func:`~rcstat.runs.job.run_job` of ``job`` in ``out``: every item not yet done (an
        item recorded with an error again if ``retry_failed``), this process's ``shard`` only;
        ``settings`` are recorded in the shard's part for the summary of the merged run (the
        process that completes the last part merges it: ``JobRun.merged``).

        Raises
        ------
        RunMismatchError
            ``out`` holds a run with other settings (each difference named) or rows without a
            manifest.
        RowFileError
            A row file's line before the last is malformed (a cut last line is dropped with a
            warning naming file and line).
        """
        return run_job(
            job, self.out, shard=self.shard, retry_failed=self.retry_failed, settings=settings
        )

    def load_model(self, loader: Loader | None) -> tuple[Any, Any]:
        """``(model, tokenizer)`` of ``model`` on ``devices``, loaded by ``loader`` (default
        :func:`load`)."""
        return (loader or load)(self.model, self.devices)

    def claim_folder(self) -> None:
        """Mark ``out`` as this command's output folder
        (:func:`~rcstat.runs.folder.claim_output_folder`)."""
        claim_output_folder(self.out, self.COMMAND)

    def require(self, items: Sequence[Any]) -> None:
        """Refuse a run with no example (``ValueError`` naming the dataset and its data)."""
        if not items:
            raise ValueError(f"no examples in {self.dataset} ({self.data or 'default slice'})")


ConfigT = TypeVar("ConfigT", bound=JobConfig)
ExampleT = TypeVar("ExampleT")


@dataclass
class DatasetJob(Job, Generic[ConfigT, ExampleT]):
    """A dataset job as a :class:`~rcstat.runs.job.Job`: its ``config``, the ``model`` and
    ``tokenizer`` it runs and its ``examples``; each benchmark adds its own fields."""

    config: ConfigT
    model: Any
    tokenizer: Any
    examples: Sequence[ExampleT]

    def source(self) -> tuple[Any, Any, str | None]:
        """The model, the tokenizer and the config's model label."""
        return self.model, self.tokenizer, model_label(self.config.model)


def say_default(message: str) -> None:
    """Log ``message`` on the ``rcstat.evaluation`` logger."""
    logger.info(message)


def load(model: str | None, devices: Devices) -> tuple[Any, Any]:
    """:func:`rcstat.load_model` of ``model`` where ``devices`` says."""
    from rcstat.models import load_model

    devices.select()
    return load_model(model, **devices.load_kwargs())


def load_for(config: Any, loader: Loader | None, command: str | None = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of ``config.model`` on ``config.devices``, loaded by ``loader``
    (default :func:`load`): what every command's ``run`` loads (:mod:`rcstat.commands`). With
    ``command``, ``config`` is checked again and its output folder ``config.out``, where set,
    is checked to be ``command``'s before the model loads
    (:func:`~rcstat.runs.folder.check_output_folder`)."""
    if command is not None:
        config.check()
        if config.out is not None:
            check_output_folder(Path(config.out), command)
    return (loader or load)(config.model, config.devices)


def resolved(path: str | Path | None) -> str | None:
    """The absolute path recorded in a manifest for a data file (None: the default slice)."""
    return str(Path(path).resolve()) if path else None


def dataset_for(name: str, task: str, what: str) -> str:
    """The registry's name of dataset ``name``, which must be of ``task``; ``ValueError``
    naming the datasets of that task otherwise."""
    from rcstat.data.registry import DATASETS, canonical_name, dataset_task

    key = canonical_name(name)
    if dataset_task(key) != task:
        names = [n for n in DATASETS if dataset_task(n) == task]
        choices = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        raise ValueError(f"{what} needs {choices}, not {name}")
    return key
