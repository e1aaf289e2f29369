"""Every kind of resumable dataset job, beside the jobs: :data:`JOBS` names, for each kind
recorded in a run manifest, its :class:`~rcstat.runs.job.Job` class and the function that
rebuilds a run folder's summaries from its rows (both as ``"module:name"``, imported when asked
for, so that the CLI's ``--help`` imports no torch). ``rcstat merge`` looks a run's kind up
here; :mod:`rcstat.runs` knows no job by name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcstat.runs.job import Job

__all__ = ["JOBS", "JobKind", "job_kind", "run_summary"]


@dataclass(frozen=True)
class JobKind:
    """Where a kind of job lives: its :class:`~rcstat.runs.job.Job` class and its summary
    function ``(out, settings) -> result`` (a result with ``lines()``, what the command
    prints), each as ``"module:name"``."""

    job: str
    summary: str


#: Every kind of job: its class and the function that summarises a run folder of it.
JOBS: dict[str, JobKind] = {
    "heads": JobKind(
        "rcstat.heads.collection:HeadsJob", "rcstat.evaluation.bench.heads_results:summarize_run"
    ),
    "bench kv": JobKind(
        "rcstat.evaluation.bench.kv:KVJob", "rcstat.evaluation.bench.kv:summarize_run"
    ),
    "bench attribution": JobKind(
        "rcstat.evaluation.bench.attribution:AttributionJob",
        "rcstat.evaluation.bench.attribution:summarize_run",
    ),
    "bench grounding": JobKind(
        "rcstat.evaluation.bench.grounding:GroundingJob",
        "rcstat.evaluation.bench.grounding:summarize_run",
    ),
    "ground pairs": JobKind(
        "rcstat.evaluation.bench.ground_pairs:PairsJob",
        "rcstat.evaluation.bench.ground_pairs:summarize_run",
    ),
}


def _registered(kind: str) -> JobKind:
    if kind not in JOBS:
        raise ValueError(f"a `{kind}` run is not a job of rcstat (known: {', '.join(JOBS)})")
    return JOBS[kind]


def _named(where: str) -> Any:
    module, name = where.split(":")
    return getattr(importlib.import_module(module), name)


def job_kind(kind: str) -> type[Job]:
    """The job class of ``kind`` (see :data:`JOBS`).

    Raises
    ------
    ValueError
        An unknown kind (the message lists the known ones).
    """
    found: type[Job] = _named(_registered(kind).job)
    return found


def run_summary(kind: str) -> Callable[[Path, Mapping[str, Any]], Any]:
    """The function that rebuilds the summaries of a run folder of ``kind`` from its rows
    (see :data:`JOBS`); ``ValueError`` for an unknown kind."""
    found: Callable[[Path, Mapping[str, Any]], Any] = _named(_registered(kind).summary)
    return found
