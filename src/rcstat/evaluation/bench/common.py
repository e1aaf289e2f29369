"""What the dataset jobs' library API shares: the model loader, notes, dataset names."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rcstat.runs.devices import Devices

__all__ = ["Loader", "Say", "dataset_for", "load", "resolved", "say_default"]

logger = logging.getLogger("rcstat.evaluation")

#: Where a job's notes go (the command line prints them; the default logs them).
Say = Callable[[str], None]
#: Loads ``(model, tokenizer)`` from a ``--model`` value on a device plan.
Loader = Callable[[str | None, Devices], tuple[Any, Any]]


def say_default(message: str) -> None:
    """Log ``message`` on the ``rcstat.evaluation`` logger."""
    logger.info(message)


def load(model: str | None, devices: Devices) -> tuple[Any, Any]:
    """:func:`rcstat.load_model` of ``model`` where ``devices`` says."""
    from rcstat.models import load_model

    devices.select()
    return load_model(model, **devices.load_kwargs())


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
