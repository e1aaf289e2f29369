"""``bench_gpu``'s timeline of a profiled call, from hand-made profiler events."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from benchmarks.bench_gpu import CallTimeline

_DEVICE = torch.autograd.DeviceType


def _event(device: object, start: int, end: int) -> SimpleNamespace:
    span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start)
    return SimpleNamespace(device_type=device, time_range=span)


def test_busy_is_the_union_of_kernels_and_the_host_time_lies_around_them() -> None:
    """Kernels over [2, 5], [4, 6] and [7, 8] ms in a call over [0, 10]: busy 3 + 1 + 1,
    idle 1 (6 to 7), 2 ms of host time before the first kernel and after the last."""
    events = [
        _event(_DEVICE.CPU, 0, 10_000),
        _event(_DEVICE.CUDA, 2_000, 5_000),
        _event(_DEVICE.CUDA, 4_000, 6_000),
        _event(_DEVICE.CUDA, 7_000, 8_000),
        _event(_DEVICE.CUDA, 9_000, 9_000),  # an empty kernel record does not count
    ]
    assert CallTimeline.of(events) == CallTimeline(3, 5.0, 1.0, 2.0, 2.0)


def test_a_call_without_kernels_has_an_empty_timeline() -> None:
    assert CallTimeline.of([_event(_DEVICE.CPU, 0, 5)]) == CallTimeline(0, 0.0, 0.0, 0.0, 0.0)
