"""Data-parallel dataset runs: which share of the examples this process takes, and its GPUs.

A dataset command (``rcstat heads``, ``rcstat bench …``) launched as several processes —
by ``torchrun``, ``accelerate launch``, ``srun`` or by hand with ``--shard i/N`` — splits its
examples into ``N`` disjoint shards and works on shard ``i`` alone. Nothing is exchanged
between the processes: each one writes its own resumable part of the run
(:mod:`rcstat.runs.parts`), and the merge of the parts is the run a single process would have
written.

Rules
-----
* **Where the rank comes from**, first match wins: an explicit ``--shard i/N``; an
  initialised ``torch.distributed`` process group (a user's own script); ``RANK`` /
  ``WORLD_SIZE`` (set by ``torchrun`` and therefore by ``accelerate launch``, also
  ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``); ``SLURM_PROCID`` / ``SLURM_NTASKS`` inside an ``srun``
  step (``SLURM_STEP_ID`` set; an ``salloc`` shell alone does not shard). Otherwise one shard.
* **Deterministic, disjoint, covering, prefix-stable**: shard ``i`` of ``N`` holds the examples
  at positions ``i, i + N, i + 2N, …`` of the dataset order (round robin, as
  lm-evaluation-harness splits documents by rank). Growing a run with a larger ``--n`` only adds
  examples to each shard; no example moves between shards.
* **One GPU per process** (:func:`process_gpus`): the ``k`` processes of one machine share its
  ``G`` GPUs as ``k`` groups of ``G // k`` GPUs; a process loads its model on its group's first
  GPU, or splits it across the group with ``--device-map``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Shard", "detect_shard", "parse_shard", "process_gpus"]

T = TypeVar("T")


@dataclass(frozen=True)
class Shard:
    """This process's share of a dataset run.

    Parameters
    ----------
    index, count : int
        Shard ``index`` (0-based) of ``count``.
    local_index, local_count : int
        This process's rank among the processes of its machine, and their number (GPU
        assignment only).
    source : str
        What set it: ``"single"``, ``"--shard"``, ``"torch.distributed"``, ``"torchrun"`` or
        ``"slurm"``.
    """

    index: int = 0
    count: int = 1
    local_index: int = 0
    local_count: int = 1
    source: str = "single"

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count}: need 0 <= index < count")
        if self.local_count < 1 or not 0 <= self.local_index < self.local_count:
            raise ValueError(
                f"local rank {self.local_index} of {self.local_count}: need 0 <= rank < count"
            )

    @property
    def split(self) -> bool:
        """Whether the run is shared between several processes."""
        return self.count > 1

    @property
    def name(self) -> str:
        """The folder name of this shard's part, e.g. ``"01-of-04"`` (sorts in rank order)."""
        width = len(str(self.count - 1))
        return f"{self.index:0{width}d}-of-{self.count}"

    def take(self, items: Sequence[T]) -> list[T]:
        """The items of this shard: positions ``index, index + count, …``."""
        return list(items[self.index :: self.count])

    def __str__(self) -> str:
        return f"shard {self.index}/{self.count} ({self.source})"


def parse_shard(text: str) -> Shard:
    """``"i/N"`` (0-based ``i``) as a :class:`Shard`.

    >>> parse_shard("1/4").name
    '1-of-4'
    """
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"--shard {text!r}: expected i/N, e.g. 0/4 (0-based i < N)")
    index, count = int(match[1]), int(match[2])
    if count < 1 or index >= count:
        raise ValueError(f"--shard {text}: need 0 <= i < N (shards are numbered from 0)")
    return Shard(index, count, source="--shard")


def _int(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def _slurm_tasks_on_node(environ: Mapping[str, str]) -> int:
    """Tasks of the step on this node, from ``SLURM_STEP_TASKS_PER_NODE`` (``"4(x2),3"``)."""
    spec = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get("SLURM_TASKS_PER_NODE")
    if not spec:
        return 1
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return 1
        counts += [int(match[1])] * int(match[2] or 1)
    node = int(environ.get("SLURM_NODEID", "0") or 0)
    return counts[node] if node < len(counts) else 1


def detect_shard(environ: Mapping[str, str] | None = None) -> Shard:
    """This process's shard from its launcher (see the module notes); one shard otherwise.

    Raises
    ------
    ValueError
        A rank variable that is not an integer, or a rank outside its world size (the message
        names the variables).
    """
    env = os.environ if environ is None else environ
    group = _process_group()
    if group is not None and group[1] > 1:
        local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_count = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else 1
        return _checked(group[0], group[1], local, max(local_count, local + 1), "torch.distributed")
    if "RANK" in env and "WORLD_SIZE" in env:
        local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
        local_count = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else local + 1
        return _checked(_int(env, "RANK"), _int(env, "WORLD_SIZE"), local, local_count, "torchrun")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if step is not None and "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
        local_count = max(_slurm_tasks_on_node(env), local + 1)
        return _checked(
            _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), local, local_count, "slurm"
        )
    return Shard()


def _checked(index: int, count: int, local: int, local_count: int, source: str) -> Shard:
    if count < 1 or not 0 <= index < count:
        names = {
            "torchrun": "RANK / WORLD_SIZE",
            "slurm": "SLURM_PROCID / SLURM_NTASKS",
            "torch.distributed": "the process group's rank / world size",
        }[source]
        raise ValueError(f"{names} = {index} / {count}: the rank must lie in [0, world size)")
    if count == 1:
        return Shard()
    return Shard(index, count, local, local_count, source)


def _process_group() -> tuple[int, int] | None:
    """``(rank, world size)`` of an initialised torch.distributed group (torch imported only
    when the program already imported it)."""
    import sys

    if "torch" not in sys.modules:
        return None
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def process_gpus(shard: Shard, visible: int) -> list[int]:
    """The GPUs (indices among the ``visible`` ones) of this process.

    The ``local_count`` processes of a machine take ``visible // local_count`` GPUs each, in
    local-rank order; with fewer GPUs than processes (a launcher that shows each process one
    GPU, or more processes than GPUs), process ``r`` takes GPU ``r % visible``.

    >>> process_gpus(Shard(3, 4, local_index=1, local_count=2, source="torchrun"), 8)
    [4, 5, 6, 7]
    """
    if visible < 1:
        return []
    per = visible // shard.local_count
    if per < 1:
        return [shard.local_index % visible]
    first = shard.local_index * per
    return list(range(first, first + per))
