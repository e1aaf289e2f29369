"""The per-example KV-compression harness on a tiny model with kvpress baselines."""

from __future__ import annotations

import pytest
import torch
from kvpress import KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress

from rcstat.evaluation.kv import evaluate_example, full_reference
from rcstat.press.answer import split_context_question, split_prompt
from rcstat.segments import segment_chat
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

pytestmark = pytest.mark.press  # needs the rcstat[press] extra (kvpress)

CONTEXT = "The cat sat on the warm mat near the door while the dog slept in the garden. " * 3
QUESTION = "Where did the cat sit?"


def test_split_keeps_every_token_and_cuts_at_the_question() -> None:
    tok = make_tiny_tokenizer()
    context_ids, question_ids = split_context_question(tok, CONTEXT, QUESTION)
    whole = segment_chat(tok, CONTEXT, QUESTION).input_ids
    assert torch.equal(torch.cat([context_ids, question_ids], dim=1), whole)
    assert tok.decode(question_ids[0]).startswith(QUESTION)


def test_query_aware_split_compresses_the_question_too() -> None:
    tok = make_tiny_tokenizer()
    plain = split_prompt(tok, CONTEXT, QUESTION)
    aware = split_prompt(tok, CONTEXT, QUESTION, placement="question")
    whole = segment_chat(tok, CONTEXT, QUESTION).input_ids
    for split in (plain, aware):
        assert torch.equal(torch.cat([split.compressed, split.rest], dim=1), whole)
    q = aware.question_tokens
    assert (
        plain.question_tokens == 0
        and q == whole.shape[1] - plain.compressed.shape[1] - (aware.rest.shape[1])
    )
    assert tok.decode(aware.compressed[0, -q:]).strip() == QUESTION
    assert torch.equal(aware.compressed[:, : plain.compressed.shape[1]], plain.compressed)
    with pytest.raises(ValueError, match="placement must be one of context, question"):
        split_prompt(tok, CONTEXT, QUESTION, placement="answer")


def test_no_compression_is_exact() -> None:
    result = evaluate_example(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        CONTEXT,
        QUESTION,
        ["on the mat"],
        KnormPress(compression_ratio=0.0),
        max_new_tokens=6,
    )
    assert result.realized_ratio == 0.0
    assert result.ver == 0.0 and result.ver_count == 6 * 4  # positions × heads
    assert result.answer == result.full_answer
    assert result.rougeL_vs_full == 1.0


@pytest.mark.parametrize(
    "press",
    [KnormPress(0.5), SnapKVPress(0.5, window_size=8), StreamingLLMPress(0.5), TOVAPress(0.5)],
)
def test_baselines_compress_and_lose_fidelity(press) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    result = evaluate_example(
        model, tok, CONTEXT, QUESTION, ["on the mat"], press, max_new_tokens=6
    )
    context_len = split_context_question(tok, CONTEXT, QUESTION)[0].shape[1]
    assert result.realized_ratio == pytest.approx(1 - int(context_len * 0.5) / context_len)
    assert 0.0 < result.ver
    assert 0.0 <= result.rougeL <= 1.0


def test_shared_full_reference_gives_the_same_result() -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    full = full_reference(model, tok, CONTEXT, QUESTION, max_new_tokens=6)
    assert len(full.answer_ids) == full.outputs.shape[0]
    for press in (TOVAPress(0.5), KnormPress(0.3)):
        shared = evaluate_example(
            model, tok, CONTEXT, QUESTION, ["x"], press, max_new_tokens=6, full=full
        )
        alone = evaluate_example(model, tok, CONTEXT, QUESTION, ["x"], press, max_new_tokens=6)
        assert shared == alone
