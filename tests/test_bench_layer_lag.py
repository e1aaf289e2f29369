"""``benchmarks/layer_lag.py``'s summary line, from hand-made marks (the marks themselves need
a GPU: tests/test_gpu.py)."""

from __future__ import annotations

from benchmarks.layer_lag import summary


def test_the_call_is_split_into_host_before_the_pass_and_after_it() -> None:
    """Layer 0 entered at 2 ms on the host (2.5 on the device), the last layer left at 47.5 on
    the device, the call returned when the device was at 55: 2.00 before, 45.00 in the pass,
    7.50 after; 55 ms against a 50 ms forward pass is 1.10x."""
    marks = [
        ("in", 0, 2.0, 2.5),
        ("out", 0, 3.0, 4.0),
        ("in", 1, 10.0, 30.0),
        ("out", 1, 11.0, 47.5),
        ("end", -1, 54.0, 55.0),
    ]
    line = summary(marks, forward_ms=50.0)
    assert line == (
        "call 55.00 ms = 1.10 x the forward pass (50.00 ms): host before the pass 2.00, "
        "the pass on the device 45.00, after it 7.50"
    )
