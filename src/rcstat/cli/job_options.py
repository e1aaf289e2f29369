"""The options of a dataset job, a resumable and sharded run (``rcstat heads``, ``rcstat bench
…``): ``--no-retry-failed`` and ``--shard``, and the checked config they make with the flags
(:func:`job_config`), on this process's shard and GPUs."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, TypeVar

from rcstat.runs.devices import Devices

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import JobConfig
    from rcstat.runs.shards import Shard

__all__ = ["add_run_options", "add_shard_option", "job_config", "shard_from_namespace"]

JobConfigT = TypeVar("JobConfigT", bound="JobConfig")


def add_shard_option(parser: argparse.ArgumentParser) -> None:
    """``--shard i/N``: take shard ``i`` of ``N`` of the examples (default: from torchrun,
    accelerate or srun; see :mod:`rcstat.runs.shards`)."""
    parser.add_argument(
        "--shard",
        default=None,
        metavar="i/N",
        help="work on shard i (0-based) of N of the examples, in the run's part "
        "OUT/parts/i-of-N (default: from torchrun / accelerate launch / srun, else the whole "
        "dataset); the last shard to finish merges the parts",
    )


def shard_from_namespace(ns: argparse.Namespace) -> Shard:
    """The shard of ``--shard`` or of the launcher's environment (checked)."""
    from rcstat.runs.shards import detect_shard, parse_shard

    text = getattr(ns, "shard", None)
    return parse_shard(text) if text is not None else detect_shard()


def add_run_options(
    parser: argparse.ArgumentParser, *, items: str = "items", redo: str = "running them again"
) -> None:
    """``--no-retry-failed`` and ``--shard`` (every dataset job is a resumable run)."""
    parser.add_argument(
        "--no-retry-failed",
        dest="retry_failed",
        action="store_false",
        help=f"when resuming, skip the {items} that failed instead of {redo}",
    )
    add_shard_option(parser)


def job_config(config: type[JobConfigT], ns: argparse.Namespace, **given: Any) -> JobConfigT:
    """The checked config of a dataset job from the flags in ``ns`` and the fields ``given``
    (:meth:`~rcstat.runs.job.Config.from_flags`), with this process's shard and device plan
    (its own GPUs), made after the flags are checked (they may ask torch which GPUs it
    sees)."""
    checked = config.from_flags(ns, **given)
    shard = shard_from_namespace(ns)
    checked.devices, checked.shard = Devices.from_namespace(ns).for_shard(shard), shard
    return checked
