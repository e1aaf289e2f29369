"""Progress of a long loop that reads well without a terminal (logs, pipes, CI)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TextIO, TypeVar

__all__ = ["Step", "progress"]

T = TypeVar("T")


#: Shows a message while a long step of a library call runs (the command line's spinner or log
#: line); the calls take ``step=contextlib.nullcontext``, silent, by default.
Step = Callable[[str], AbstractContextManager[Any]]


def progress(
    items: Iterable[T],
    total: int | None = None,
    desc: str = "",
    *,
    unit: str = "item",
    enabled: bool = True,
    stream: TextIO | None = None,
    every_s: float = 10.0,
    size: Callable[[T], int] | None = None,
) -> Iterator[T]:
    """Yield ``items`` while showing progress on ``stream`` (standard error by default).

    On a terminal a tqdm bar; elsewhere (logs, pipes, CI) plain lines ``desc: i/n unit (t s)``
    — at the start, after every twentieth of the items or ``every_s`` seconds, and at the end —
    so that progress is readable without a terminal. With ``size``, each item counts
    ``size(item)`` units (e.g. a batch of pairs; ``total`` then counts units), reported once
    the loop has done it.

    >>> import io
    >>> log = io.StringIO()
    >>> list(progress(range(3), desc="demo", unit="example", stream=log))
    [0, 1, 2]
    >>> [line.split(" (")[0] for line in log.getvalue().splitlines()]
    ['demo: 0/3 example', 'demo: 1/3 example', 'demo: 2/3 example', 'demo: 3/3 example']
    """
    if total is None and hasattr(items, "__len__") and size is None:
        total = len(items)  # type: ignore[arg-type]
    sink = sys.stderr if stream is None else stream
    if not enabled:
        yield from items
        return
    weigh = size or (lambda _: 1)
    if getattr(sink, "isatty", lambda: False)():
        from tqdm.auto import tqdm

        with tqdm(total=total, desc=desc, unit=unit, file=sink) as bar:
            for item in items:
                yield item
                bar.update(weigh(item))
        return
    of = "" if total is None else f"/{total}"
    step = max(1, (total or 0) // 20)
    started = last = time.perf_counter()

    def line(done: int) -> None:
        elapsed = time.perf_counter() - started
        print(f"{desc}: {done}{of} {unit} ({elapsed:.0f} s)", file=sink, flush=True)

    line(0)
    done = 0
    for item in items:
        yield item
        before, done = done, done + weigh(item)
        now = time.perf_counter()
        if done // step > before // step or done == total or now - last >= every_s:
            line(done)
            last = now
    if total is not None and done != total:
        line(done)
