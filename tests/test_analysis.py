"""rcstat.analyze end to end on tiny models, against naive per-head oracles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rcstat.analysis import HeadAnalysis, analyze
from rcstat.generation import stop_token_ids
from rcstat.models import load_model
from tests._reference import algorithm1, eq6_block, naive_expected_rc
from tests._tiny_models import reference_scores, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CONTEXT = "The cat sat on the warm mat near the door. The dog slept in the garden."
QUESTION = "Where did the cat sit?"
ANSWER = "On the warm mat."


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_head_scores_match_naive_oracle(arch: str) -> None:
    model, tok = tiny_model(arch), make_tiny_tokenizer()
    result = analyze(model, tok, context=CONTEXT, question=QUESTION, answer=ANSWER)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": CONTEXT + "\n\n" + QUESTION}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    answer_ids = tok(ANSWER, add_special_tokens=False)["input_ids"]
    m, g = len(ids), len(answer_ids)
    assert (result.prompt_len, result.gen_len) == (m, g)
    scores = reference_scores(model, torch.tensor([ids + answer_ids]))
    for layer, block in enumerate(scores):
        for head in range(block.shape[1]):
            rows = block[0, head, m:].numpy()  # [g, m + g]
            x = rows[:, :m].ravel()
            y = np.concatenate([rows[j, m : m + j + 1] for j in range(g)])
            assert result.expected[layer, head] == pytest.approx(naive_expected_rc(x, y), rel=1e-5)
            assert result.upper[layer, head] == pytest.approx(algorithm1(x, y, "upper"), rel=1e-5)
            assert result.lower[layer, head] == pytest.approx(
                algorithm1(x, y, "lower"), rel=1e-5, abs=1e-6
            )
            reverse = naive_expected_rc(y, x)
            want = naive_expected_rc(x, y) / (naive_expected_rc(x, y) + reverse)
            assert result.normalized[layer, head] == pytest.approx(want, rel=1e-5)


def test_result_api(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    result = analyze(
        model, tok, context=CONTEXT, question=QUESTION, answer=ANSWER, keep_samples=[(1, 3)]
    )
    assert result.shape == (3, 4)
    frame = result.to_frame()
    assert isinstance(frame, pd.DataFrame) and len(frame) == 12
    top = result.top(3)
    assert list(top["expected"]) == sorted(frame["expected"], reverse=True)[:3]
    assert result.count_above(0.0) == 12
    assert result.count_above(1e9) == 0
    assert result.count_above(0.5, "normalized") == int((result.normalized > 0.5).sum())
    (sample,) = result.samples
    assert (sample.layer, sample.head) == (1, 3)
    assert sample.cross.size == result.prompt_len * result.gen_len
    assert sample.self_.size == result.gen_len * (result.gen_len + 1) // 2
    path = tmp_path / "r.json"
    result.save(path)
    back = HeadAnalysis.load(path)
    np.testing.assert_array_equal(back.upper, result.upper)
    assert back.generation_text == result.generation_text == ANSWER
    with pytest.raises(ValueError, match="by must be"):
        result.values("median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be"):
        result.top(0)


def test_question_placement_moves_the_split() -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    in_prompt = analyze(model, tok, context=CONTEXT, question=QUESTION, answer=ANSWER)
    in_gen = analyze(
        model,
        tok,
        context=CONTEXT,
        question=QUESTION,
        answer=ANSWER,
        question_placement="generation",
    )
    assert in_gen.prompt_len < in_prompt.prompt_len
    assert in_gen.prompt_len + in_gen.gen_len == in_prompt.prompt_len + in_prompt.gen_len
    assert QUESTION in in_gen.generation_text


def test_raw_mode_and_generation() -> None:
    model, tok = tiny_model("mistral"), make_tiny_tokenizer()
    given = analyze(model, tok, prompt="Once upon a time", generation=" there was a cat.")
    assert given.generation_text == " there was a cat."
    generated = analyze(model, tok, prompt="Once upon a time", max_new_tokens=4)
    assert 1 <= generated.gen_len <= 4
    assert np.isfinite(generated.expected).all()
    # recomputed: the ids by hand, a cache-free greedy continuation, eq. 6 by loops
    prompt_ids = tok("Once upon a time")["input_ids"]
    given_ids = prompt_ids + tok(" there was a cat.", add_special_tokens=False)["input_ids"]
    stops = stop_token_ids(model, tok)
    greedy_ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(4):
            token = int(model(torch.tensor([greedy_ids])).logits[0, -1].argmax())
            if token in stops:
                break
            greedy_ids.append(token)
    m = len(prompt_ids)
    for result, ids in ((given, given_ids), (generated, greedy_ids)):
        assert (result.prompt_len, result.gen_len) == (m, len(ids) - m)
        blocks = reference_scores(model, torch.tensor([ids]))  # [1, heads, T, T] per layer
        want = [[eq6_block(b[0, h, m:].numpy(), m) for h in range(4)] for b in blocks]
        np.testing.assert_allclose(result.expected, want, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(context="", question=QUESTION, answer=ANSWER), "context"),
        (dict(context=CONTEXT, question=QUESTION, answer=""), "answer"),
        (dict(context=CONTEXT, answer=ANSWER), "both context= and question="),
        (dict(context=CONTEXT, question=QUESTION, prompt="x"), "either"),
        (dict(), "either"),
        (dict(prompt="hello", generation="x", keep_samples=[(9, 0)]), "does not exist"),
    ],
)
def test_bad_input(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=match):
        analyze(tiny_model("llama"), make_tiny_tokenizer(), **kwargs)


def test_too_long_input_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()  # window: 256 positions
    window = r"the input has \d+ tokens but the model's window is 256"
    with pytest.raises(ValueError, match=window):
        analyze(model, tok, prompt="word " * 400, generation=" end")

    def no_generation(*args: object, **kwargs: object) -> None:
        raise AssertionError("generated before refusing the prompt")

    monkeypatch.setattr("rcstat.analysis.generate_answer", no_generation)
    with pytest.raises(ValueError, match=window):  # the prompt alone, before generating
        analyze(model, tok, context="word " * 400, question="Which word?")


def test_without_the_lower_bound(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``lower_bound=False``: no ``lower`` anywhere, the same other statistics, a clear error
    when it is asked for, and a file that loads back without it."""
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    kwargs = dict(context=CONTEXT, question=QUESTION, answer=ANSWER)
    full = analyze(model, tok, **kwargs)
    assert full.lower is not None  # on CPU it is free: computed by default
    result = analyze(model, tok, **kwargs, lower_bound=False)
    assert result.lower is None and result.statistics == ("expected", "upper", "normalized")
    for name in result.statistics:
        np.testing.assert_array_equal(result.values(name), full.values(name))
    assert "lower" not in result.to_frame().columns
    with pytest.raises(ValueError, match="lower_bound=True"):
        result.values("lower")
    path = tmp_path / "r.json"
    result.save(path)
    back = HeadAnalysis.load(path)
    assert back.lower is None
    np.testing.assert_array_equal(back.expected, result.expected)


def test_non_finite_scores_name_the_layer() -> None:
    """A NaN in one layer's scores (folded into the statistics' sums) is reported after the
    pass with the layer, never returned as a number."""
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    attention = model.model.layers[1].self_attn
    handle = attention.q_proj.register_forward_hook(lambda m, i, out: out * float("nan"))
    try:
        with pytest.raises(FloatingPointError, match="layer 1"):
            analyze(model, tok, context=CONTEXT, question=QUESTION, answer=ANSWER)
    finally:
        handle.remove()


def test_analysis_through_accelerate_offload_hooks(model_dir, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model dispatched by accelerate (``device_map`` with layers offloaded to disk: their
    weights live on the meta device and arrive with each forward) gives the statistics of the
    plain model; inputs go where accelerate runs the embedding."""
    plain, tokenizer = load_model(model_dir)
    texts = {"context": "The cat sat on the mat. " * 4, "question": "Where?", "answer": "On it."}
    expected = analyze(plain, tokenizer, **texts)
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.rotary_emb": "cpu"}
    device_map |= {"model.layers.1": "disk", "model.layers.2": "disk", "model.norm": "cpu"}
    device_map |= {"lm_head": "cpu"}
    offloaded, _ = load_model(model_dir, device_map=device_map, offload_folder=str(tmp_path))
    assert offloaded.model.layers[2].self_attn.q_proj.weight.device.type == "meta"
    got = analyze(offloaded, tokenizer, **texts)
    np.testing.assert_array_equal(got.expected, expected.expected)
    np.testing.assert_array_equal(got.upper, expected.upper)


def _saved(**changes: object) -> dict[str, object]:
    """The fields HeadAnalysis.save writes for a 2-layer × 2-head analysis, with changes."""
    grid = [[0.5, 1.5], [2.0, 0.25]]
    data: dict[str, object] = {
        "model": "m",
        "prompt_len": 4,
        "gen_len": 2,
        "prompt_text": "p",
        "generation_text": "g",
        "scaled": False,
        "generation_finished": None,
        "expected": grid,
        "upper": grid,
        "lower": None,
        "normalized": grid,
    }
    return {**data, **changes}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{", "not a JSON file"),
        ("[]", r"not a head analysis written by HeadAnalysis.save \(no expected, upper"),
        (json.dumps(_saved(upper=None)), r"\(no upper\)"),
        (json.dumps({k: v for k, v in _saved().items() if k != "gen_len"}), r"\(no gen_len\)"),
        (json.dumps(_saved(expected="x")), "expected is not an array of numbers"),
        (json.dumps(_saved(normalized=[1.0, 2.0])), r"normalized has shape \(2,\), not \[layers"),
        (json.dumps(_saved(lower=[[1.0]])), "the statistics have different shapes"),
        (json.dumps(_saved(prompt_len="4")), "prompt_len is '4', not a token count"),
        (json.dumps(_saved(gen_len=True)), "gen_len is True, not a token count"),
    ],
)
def test_a_file_that_is_not_a_saved_analysis_is_refused(
    tmp_path: Path, text: str, match: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=match) as refused:
        HeadAnalysis.load(path)
    assert str(refused.value).startswith(f"{path}: ")


def test_a_saved_analysis_with_text_beyond_ascii_loads(tmp_path: Path) -> None:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_saved(generation_text="Zürich — 東京")), encoding="utf-8")
    back = HeadAnalysis.load(path)
    assert back.generation_text == "Zürich — 東京" and back.lower is None
    assert back.shape == (2, 2) and back.upper[1, 0] == 2.0
