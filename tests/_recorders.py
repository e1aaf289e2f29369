"""Recorders that stand in for CUDA graphs on the CPU (for rcstat.press.decoding's tests).

A CUDA graph replays a step's device work without running its host code: the packed layers'
host fields (logical length, room, bounds) are not advanced by a replay, and every host value
the step read was fixed when it was recorded. These recorders run the step again at every
replay, then put the host fields back, so that only the device work counts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcstat.press.cache import RaggedCache
from rcstat.press.layout import PackedKV


def _packed(cache: Any) -> list[PackedKV]:
    if not isinstance(cache, RaggedCache):
        return []
    layers = [cache.layer(i).packed for i in range(len(cache.layers))]
    return [p for p in layers if p is not None]


def host_fields(cache: Any) -> list[tuple[int, ...]]:
    """Each packed layer's host fields, in layer order (empty for other caches)."""
    return [p.host_fields() for p in _packed(cache)]


def _set_host_fields(cache: Any, values: list[Any]) -> None:
    for packed, fields in zip(_packed(cache), values, strict=True):
        packed.set_host_fields(fields)


class ReplayRecorder:
    """Replays run the step's device work; its host effects are undone.

    ``stale=True`` also runs it with the host fields of the moment it was recorded, as a
    graph's kernels keep the host values they were launched with (the step must then read
    nothing from the host that changes between replays: the split-KV kernel's row bound
    ``max_len + room`` does not, the padded reference's ``max_len`` does)."""

    def __init__(self, cache: Any, *, stale: bool = False) -> None:
        self.cache = cache
        self.stale = stale
        self.recordings = 0
        self.replays = 0

    def __call__(self, step: Callable[[], None]) -> Callable[[], None]:
        self.recordings += 1
        recorded = host_fields(self.cache)

        def replay() -> None:
            now = host_fields(self.cache)
            if self.stale:
                _set_host_fields(self.cache, recorded)
            step()
            _set_host_fields(self.cache, now)
            self.replays += 1

        return replay
