"""The per-example KV-compression harness on a tiny model with kvpress baselines."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch
from kvpress import KnormPress, SnapKVPress, StreamingLLMPress, TOVAPress
from transformers import DynamicCache

from rcstat.evaluation.kv import evaluate_example, full_reference
from rcstat.generation import stop_token_ids
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
    context_ids, question_ids = split_context_question(tok, CONTEXT, QUESTION)
    context_len = context_ids.shape[1]
    assert result.realized_ratio == pytest.approx(1 - int(context_len * 0.5) / context_len)
    assert 0.0 < result.ver
    assert 0.0 <= result.rougeL <= 1.0
    # VER and ROUGE recomputed by an independent path (loops, no cache for the reference)
    stops = stop_token_ids(model, tok)
    whole = torch.cat([context_ids, question_ids], dim=1)
    full_ids = _greedy_without_cache(model, whole, 6, stops)
    assert result.full_answer == tok.decode(full_ids, skip_special_tokens=True)
    forced = torch.cat([whole, torch.tensor([full_ids])], dim=1)
    with torch.no_grad(), _last_layer_outputs(model) as recorded:
        model(forced)
    reference = recorded[0][0, whole.shape[1] :]  # [|g|, heads, dim]
    cache = DynamicCache()
    with torch.no_grad(), press(model):
        model(context_ids, past_key_values=cache)
    answering = copy.deepcopy(cache)
    tail = forced[:, context_len:]
    positions = torch.arange(context_len, forced.shape[1]).unsqueeze(0)
    with torch.no_grad(), _last_layer_outputs(model) as recorded:
        model(tail, past_key_values=cache, position_ids=positions)
    compressed = recorded[0][0, question_ids.shape[1] :]
    errors = [
        float(((r - c).double() ** 2).sum() / (r.double() ** 2).sum())
        for r, c in zip(reference.reshape(-1, 16), compressed.reshape(-1, 16), strict=True)
    ]
    assert result.ver_count == len(errors) == len(full_ids) * 4
    # float32 forwards: the reference runs without a cache, the harness with one
    assert result.ver == pytest.approx(sum(errors) / len(errors), rel=1e-5)
    answer_ids = _greedy_on_cache(model, answering, question_ids, context_len, 6, stops)
    answer = tok.decode(answer_ids, skip_special_tokens=True)
    assert result.answer == answer
    for reference_text, rouge1, rouge_l in (
        ("on the mat", result.rouge1, result.rougeL),
        (result.full_answer, result.rouge1_vs_full, result.rougeL_vs_full),
    ):
        assert (rouge1, rouge_l) == pytest.approx(_rouge(answer, reference_text))


@contextlib.contextmanager
def _last_layer_outputs(model):  # type: ignore[no-untyped-def]
    """The last layer's per-head attention outputs (o_proj's input), ``[1, q, 4, 16]``."""
    recorded: list[torch.Tensor] = []
    handle = model.model.layers[-1].self_attn.o_proj.register_forward_pre_hook(
        lambda _, args: recorded.append(args[0].view(*args[0].shape[:2], 4, 16).clone())
    )
    try:
        yield recorded
    finally:
        handle.remove()


def _greedy_without_cache(model, ids: torch.Tensor, steps: int, stops) -> list[int]:  # type: ignore[no-untyped-def]
    out: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            token = int(
                model(torch.cat([ids, torch.tensor([out], dtype=ids.dtype)], 1))
                .logits[0, -1]
                .argmax()
            )
            if token in stops:
                break
            out.append(token)
    return out


def _greedy_on_cache(
    model, cache, question: torch.Tensor, start: int, steps: int, stops
) -> list[int]:  # type: ignore[no-untyped-def]
    out: list[int] = []
    tokens, position = question, start
    with torch.no_grad():
        for _ in range(steps):
            positions = torch.arange(position, position + tokens.shape[1]).unsqueeze(0)
            logits = model(tokens, past_key_values=cache, position_ids=positions).logits
            position += tokens.shape[1]
            token = int(logits[0, -1].argmax())
            if token in stops:
                break
            out.append(token)
            tokens = torch.tensor([[token]])
    return out


def _rouge(prediction: str, reference: str) -> tuple[float, float]:
    """ROUGE-1 F1 (clipped unigram counts) and ROUGE-L F1 (longest common subsequence) of
    rouge-score's (stemmed) tokens, by hand."""
    from collections import Counter

    from rouge_score.tokenizers import DefaultTokenizer

    tokenize = DefaultTokenizer(use_stemmer=True).tokenize
    p, r = tokenize(prediction), tokenize(reference)
    lcs = [[0] * (len(r) + 1) for _ in range(len(p) + 1)]
    for i, a in enumerate(p):
        for j, b in enumerate(r):
            lcs[i + 1][j + 1] = lcs[i][j] + 1 if a == b else max(lcs[i][j + 1], lcs[i + 1][j])

    def f1(common: int) -> float:
        if common == 0:
            return 0.0
        precision, recall = common / len(p), common / len(r)
        return 2 * precision * recall / (precision + recall)

    return f1(sum((Counter(p) & Counter(r)).values())), f1(lcs[-1][-1])


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
