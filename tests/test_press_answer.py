"""rcstat.press.answer: real eviction into the ragged cache, ratio and memory consistent."""

from __future__ import annotations

import pytest

from rcstat.press.answer import compress_and_answer
from rcstat.press.rcstat_press import RCStatPress
from rcstat.report.console import format_bytes
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

pytestmark = pytest.mark.press


def test_memory_follows_the_realized_ratio() -> None:
    report = compress_and_answer(
        tiny_model("qwen2"),
        make_tiny_tokenizer(),
        "The dog slept in the garden. " * 6,
        "Where did the dog sleep?",
        RCStatPress(threshold=1.0),
        max_new_tokens=4,
        slack=8,
    )
    assert 0 < report.ratio < 1
    assert report.live_bytes / report.dense_bytes == pytest.approx(1 - report.ratio, abs=1e-9)
    assert report.live_bytes < report.allocated_bytes
    assert len(report.head_ratios) == 3 and len(report.head_ratios[0]) == 2
    assert sum(report.layer_ratios.values()) / 3 == pytest.approx(report.ratio)


def test_format_bytes() -> None:
    assert format_bytes(10) == "10 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**30) == "3.0 GiB"
