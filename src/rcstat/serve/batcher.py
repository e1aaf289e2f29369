"""A bounded queue of requests drained by one worker thread, in batches.

:class:`Batcher` holds at most ``max_queue`` waiting jobs (:meth:`Batcher.submit` raises
:class:`QueueFullError` at once when full: the caller answers 503, memory stays bounded). One
thread takes a job, waits up to ``max_wait`` seconds for more (up to ``max_batch``), and hands
the batch to ``work`` — the only code that touches the model. Each job carries a
:class:`concurrent.futures.Future` that ``work`` completes; a job that ``work`` leaves
undone gets the exception ``work`` raised. :meth:`Batcher.close` lets the thread finish what
is queued, then stops it (the drain on SIGTERM).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Batcher", "Job", "QueueFullError"]


class QueueFullError(RuntimeError):
    """The queue holds ``max_queue`` jobs already."""


@dataclass
class Job:
    """One request: its ``kind`` (``"ground"``, ``"attribute"``), its ``key`` (requests of one
    kind and key can share a call: the same options) and its ``data``; ``future`` gets the
    answer."""

    kind: str
    key: Any
    data: Any
    future: Future[Any] = field(default_factory=Future)


_STOP = object()


class Batcher:
    """The queue and its worker thread (see the module notes).

    Parameters
    ----------
    work
        ``work(jobs)`` completes the future of every job (called on the worker thread with up
        to ``max_batch`` jobs of one kind and key, in their order of arrival).
    max_queue, max_batch, max_wait
        Waiting jobs at most; jobs of one batch at most; seconds to wait for more.
    start
        Called once on the worker thread before the first batch (e.g. load the model); a
        failure is kept in :attr:`failed` and fails every job.
    """

    def __init__(
        self,
        work: Callable[[Sequence[Job]], None],
        *,
        max_queue: int,
        max_batch: int,
        max_wait: float,
        start: Callable[[], None] | None = None,
    ) -> None:
        self._work = work
        self._start = start
        self.max_batch = max_batch
        self.max_wait = max_wait
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.batches: list[int] = []  # the size of every batch run (for tests and figures)
        self._thread = threading.Thread(target=self._loop, name="rcstat-serve-worker", daemon=True)
        self._thread.start()

    def submit(self, kind: str, key: Any, data: Any) -> Future[Any]:
        """Queue one job; its future. :class:`QueueFullError` at once when the queue is full."""
        job = Job(kind, key, data)
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFullError("the queue is full") from None
        return job.future

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued jobs, then stop the thread (waits ``timeout`` seconds at most)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    @property
    def waiting(self) -> int:
        """Jobs in the queue (not yet taken)."""
        return self._queue.qsize()

    def _loop(self) -> None:
        try:
            if self._start is not None:
                self._start()
        except BaseException as err:  # kept: every job fails with it
            self.failed = err
        self.ready.set()
        held: list[Job] = []
        while True:
            first = held.pop(0) if held else self._queue.get()
            if first is _STOP:
                return
            batch, held, stop = self._gather(first, held)
            self._run(batch)
            if stop:
                for job in held:
                    self._run([job])
                return

    def _gather(self, first: Job, held: list[Job]) -> tuple[list[Job], list[Job], bool]:
        """``first`` and the jobs of its kind and key that arrive within ``max_wait`` (up to
        ``max_batch``); the others are held for the next batches, in order."""
        batch: list[Job] = [first]
        other: list[Job] = []
        for job in held:
            same = job.kind == first.kind and job.key == first.key
            (batch if same and len(batch) < self.max_batch else other).append(job)
        deadline = time.monotonic() + self.max_wait
        while len(batch) < self.max_batch and len(other) < self.max_batch:  # bounded
            left = deadline - time.monotonic()
            try:
                job = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is _STOP:
                return batch, other, True
            same = job.kind == first.kind and job.key == first.key
            (batch if same else other).append(job)
        return batch, other, False

    def _run(self, batch: list[Job]) -> None:
        self.batches.append(len(batch))
        try:
            if self.failed is not None:
                raise self.failed
            self._work(batch)
        except BaseException as err:  # the thread lives on; the jobs get the error
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(err)
        for job in batch:
            if not job.future.done():
                job.future.set_exception(RuntimeError("the worker gave no answer"))
