"""Branches of work beside the current CUDA stream: side streams eagerly, parallel branches
inside a CUDA graph's capture (``torch.cuda.graph`` records what a side stream queues after
waiting on the capturing stream as a branch of the graph).

:func:`fork` starts a branch that waits for the work queued so far, :func:`on` queues a
block's work on it and :func:`join` makes the current stream wait for it. Off CUDA (the CPU
under Triton's interpreter) a branch is None and the work runs in order.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

__all__ = ["fork", "join", "on"]

_SIDE: dict[tuple[torch.device, int], torch.cuda.Stream] = {}


def fork(device: torch.device, branch: int) -> torch.cuda.Stream | None:
    """Stream ``branch`` of ``device`` beside the current one (None off CUDA), waiting for
    the work queued so far: what is queued on it runs beside what is queued next on the
    current stream and on other branches (inside a CUDA graph: parallel branches) until
    :func:`join`."""
    if device.type != "cuda":
        return None
    if (device, branch) not in _SIDE:
        _SIDE[device, branch] = torch.cuda.Stream(device)
    side = _SIDE[device, branch]
    side.wait_stream(torch.cuda.current_stream(device))
    return side


def on(side: torch.cuda.Stream | None) -> contextlib.AbstractContextManager[Any]:
    """Queue the block's work on ``side`` (the current stream for None)."""
    return contextlib.nullcontext() if side is None else torch.cuda.stream(side)


def join(device: torch.device, *sides: torch.cuda.Stream | None) -> None:
    """The current stream of ``device`` waits for the work queued on ``sides``. What was
    allocated there is freed on the host after later work is queued on the current stream,
    and a side stream's next use (:func:`fork`) waits on that work first, so its memory
    is not reused while it is read."""
    for side in sides:
        if side is not None:
            torch.cuda.current_stream(device).wait_stream(side)
