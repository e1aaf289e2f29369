"""The options of a dataset job, a resumable and sharded run (``rcstat heads``, ``rcstat bench
…``): a benchmark's parser with its dataset (:func:`add_job_command`), ``--no-retry-failed``
and ``--shard``, and the checked config they make with the flags (:func:`job_config`), on this
process's shard and GPUs."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from rcstat.cli._common import add_command, shown_default
from rcstat.cli.options import add_dataset_options
from rcstat.runs.devices import Devices

if TYPE_CHECKING:
    from rcstat.evaluation.bench.common import JobConfig
    from rcstat.runs.shards import Shard

__all__ = [
    "add_job_command",
    "add_run_options",
    "add_shard_option",
    "job_config",
    "shard_from_namespace",
]

JobConfigT = TypeVar("JobConfigT", bound="JobConfig")


def add_job_command(
    sub: Any,
    config: type[JobConfig],
    name: str,
    help: str,
    tasks: Sequence[str],
    *,
    extra: Sequence[str] = (),
    note: str = "",
) -> tuple[argparse.ArgumentParser, Callable[[str], str]]:
    """The parser of the dataset job ``name`` in ``sub`` (the result of ``add_subparsers``)
    with ``--model``, then ``--dataset`` among the datasets of ``tasks`` and the ``extra``
    names (``note`` on them, then ``config``'s default) and ``--data``; and ``shown(field)``,
    ``config``'s default of a field as ``--help`` states it (every flag of a job defaults to
    None: the config holds the default)."""
    parser = add_command(sub, name, help)
    shown = partial(shown_default, config)
    add_dataset_options(
        parser, None, tasks, extra=extra, note=f"{note} (default: {shown('dataset')})"
    )
    return parser, shown


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
