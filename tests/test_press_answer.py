"""rcstat.press.answer: real eviction into the ragged cache, ratio and memory consistent."""

from __future__ import annotations

import pytest

from rcstat.press.answer import compress_and_answer, compress_and_answer_batch
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


PAIRS = (
    ("The dog slept in the garden. " * 6, "Where did the dog sleep?"),
    ("Anna plays the violin and the piano every day. " * 3, "What does Anna play?"),
    ("Rain fell. " * 4, "What fell?"),
)


@pytest.mark.parametrize("ratio", [None, 0.5])
def test_a_batch_answers_and_reports_as_each_pair_alone(ratio: float | None) -> None:
    """Contexts and questions of different lengths in one batch: each row's answer, ratios and
    bytes equal the pair's own :func:`compress_and_answer`."""
    model, tokenizer = tiny_model("llama"), make_tiny_tokenizer()

    def press() -> RCStatPress:
        return RCStatPress(threshold=1.0, compression_ratio=ratio, budget="layer")

    batch = compress_and_answer_batch(
        model,
        tokenizer,
        [c for c, _ in PAIRS],
        [q for _, q in PAIRS],
        press(),
        max_new_tokens=6,
        slack=4,
    )
    assert len({report.context_tokens for report in batch}) == 3
    for (context, question), got in zip(PAIRS, batch, strict=True):
        want = compress_and_answer(
            model, tokenizer, context, question, press(), max_new_tokens=6, slack=4
        )
        assert got.answer == want.answer and got.finished == want.finished
        assert got.context_tokens == want.context_tokens
        assert got.ratio == pytest.approx(want.ratio, abs=1e-12)
        assert got.layer_ratios == pytest.approx(want.layer_ratios, abs=1e-12)
        for got_layer, want_layer in zip(got.head_ratios, want.head_ratios, strict=True):
            assert got_layer == pytest.approx(want_layer, abs=1e-12)
        assert (got.dense_bytes, got.live_bytes) == (want.dense_bytes, want.live_bytes)
        assert got.live_bytes < got.allocated_bytes


def test_a_batch_needs_one_question_per_context() -> None:
    with pytest.raises(ValueError, match="one question per context"):
        compress_and_answer_batch(
            tiny_model("llama"), make_tiny_tokenizer(), ["a b c"], [], RCStatPress()
        )


def test_full_cache_answers_in_a_batch_equal_each_alone() -> None:
    from rcstat.press.answer import answer_full, answer_full_batch

    model, tokenizer = tiny_model("qwen2"), make_tiny_tokenizer()
    contexts, questions = [c for c, _ in PAIRS], [q for _, q in PAIRS]
    batch = answer_full_batch(model, tokenizer, contexts, questions, max_new_tokens=6)
    for context, question, got in zip(contexts, questions, batch, strict=True):
        want = answer_full(model, tokenizer, context, question, max_new_tokens=6)
        assert got == want
