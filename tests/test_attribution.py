"""rcstat.attribution against sample sets rebuilt from q·k of the layers' own projections,
eager attention weights and hand-checked properties of eq. (10)."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
import torch

import rcstat.generation as generation_module
from rcstat.analysis import analyze_segmented
from rcstat.attribution import Attribution, Attributor
from rcstat.attribution.spans import join_chunks
from rcstat.report.attribution_html import attribution_page
from rcstat.segments import segment_chat
from rcstat.stats import rc_upper_bound
from tests._reference import naive_expected_rc
from tests._tiny_models import reference_scores, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CHUNKS = [
    "The cat sat on the warm mat near the door.",
    "The dog slept in the garden all day long.",
    "A bird sang in the old tree by the river.",
]
QUESTION = "Where did the dog sleep?"
ANSWER = "The dog slept in the garden. The cat sat on the mat."


@pytest.fixture(scope="module")
def setup() -> tuple:  # type: ignore[type-arg]
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    # the paper's span score, whose formula these tests rebuild (the best sentence: below)
    return model, tok, Attributor(model, tok, top_k=5, rank_post_softmax=True, span_score="mean")


def _samples(block: torch.Tensor, m: int, unit: tuple[int, int], span: tuple[int, int]):  # type: ignore[no-untyped-def]
    """X(p_i, g') and Y(g, g') of one head by explicit loops (block [T, T] = f(i, j) at [j, i])."""
    a, b = unit
    x = [float(block[m + j, i]) for j in range(a, b) for i in range(*span)]
    y = [float(block[m + j, m + k]) for j in range(a, b) for k in range(j + 1)]
    return np.array(x), np.array(y)


def test_span_scores_equal_sample_sets_rebuilt_from_projections(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, attributor = setup
    result = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    assert [u.text for u in result.units] == [
        "The dog slept in the garden.",
        "The cat sat on the mat.",
    ]
    assert [s.text for s in result.spans] == CHUNKS
    text, _ = join_chunks(CHUNKS)
    example = segment_chat(tok, text, QUESTION, ANSWER)
    ref = reference_scores(model, example.input_ids)  # per layer [1, H, T, T]
    m = example.prompt_len
    layers, heads, units, spans = result.per_head.shape
    assert (units, spans) == (2, 3)
    for layer in range(layers):
        for head in range(heads):
            for u, unit in enumerate(result.unit_tokens):
                for s, span in enumerate(result.span_tokens):
                    x, y = _samples(ref[layer][0, head], m, unit, span)
                    want = naive_expected_rc(x, y)
                    got = result.per_head[layer, head, u, s]
                    assert got == pytest.approx(want, rel=1e-4, abs=1e-4)
    # step 1: the ranking is the per-head E(X(p, g), Y(g, g)) of the analysis
    analysis = analyze_segmented(model, example)
    np.testing.assert_allclose(result.ranking[0], analysis.expected, rtol=1e-6)
    assert np.isnan(result.ranking[1]).all()  # A is computed for statistic="upper" only


def test_upper_statistic_scores_spans_with_the_bound(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = setup
    result = Attributor(model, tok, top_k=3, statistic="upper").attribute(CHUNKS, QUESTION, ANSWER)
    text, _ = join_chunks(CHUNKS)
    example = segment_chat(tok, text, QUESTION, ANSWER)
    ref = reference_scores(model, example.input_ids)
    for layer, head in [(0, 0), (2, 3)]:
        for u, unit in enumerate(result.unit_tokens):
            for s, span in enumerate(result.span_tokens):
                x, y = _samples(ref[layer][0, head], example.prompt_len, unit, span)
                want = float(rc_upper_bound(torch.tensor(x), torch.tensor(y)))
                assert result.per_head[layer, head, u, s] == pytest.approx(want, rel=1e-4)
                assert result.per_head[layer, head, u, s] >= naive_expected_rc(x, y) - 1e-4
    # the ranking uses the bound too
    analysis = analyze_segmented(model, example)
    np.testing.assert_allclose(result.ranking[0], analysis.expected, rtol=1e-6)
    np.testing.assert_allclose(result.ranking[1], analysis.upper, rtol=1e-6)
    order = np.argsort(-result.ranking[1].reshape(-1), kind="stable")[:3]
    assert result.heads == [divmod(int(i), 4) for i in order]


def test_eq10_normalisation_and_head_selections(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    result = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    flat = result.ranking[0].reshape(-1)
    top = result.heads_for("top", 5)
    bottom = result.heads_for("bottom", 5)
    assert [flat[la * 4 + h] for la, h in top] == sorted(flat, reverse=True)[:5]
    assert [flat[la * 4 + h] for la, h in bottom] == sorted(flat)[:5]
    post = result.ranking[2].reshape(-1)
    assert [post[la * 4 + h] for la, h in result.heads_for("top_post_softmax", 2)] == sorted(
        post, reverse=True
    )[:2]
    assert len(result.heads_for("all", None)) == 12
    for ranking, k in [("top", 5), ("bottom", 5), ("all", None)]:
        scores, attributed = result.scores_for(ranking, k)  # type: ignore[arg-type]
        chosen = result.heads_for(ranking, k)  # type: ignore[arg-type]
        totals = sum(result.per_head[la, h] for la, h in chosen)
        np.testing.assert_allclose(scores, totals / totals.sum(axis=1, keepdims=True))
        np.testing.assert_allclose(scores.sum(axis=1), 1.0)
        assert attributed == [int(np.argmax(r)) for r in scores]
    assert result.scores.shape == (2, 3) and result.heads == top
    assert result.method == "top-5 RC heads"


def test_token_granularity_and_chunk_means(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    chunks = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    tokens = attributor.attribute(" ".join(CHUNKS), QUESTION, ANSWER, granularity="token")
    assert "".join(tokens.context_tokens) == " ".join(CHUNKS)
    assert len(tokens.spans) == len(tokens.context_tokens) == tokens.token_scores.shape[-1]
    np.testing.assert_allclose(tokens.per_head, tokens.token_scores, rtol=1e-5, atol=1e-6)
    # a chunk's score is the mean of its keys' parts (every key meets the same queries)
    first = chunks.span_tokens[0][0]
    for s, (start, end) in enumerate(chunks.span_tokens):
        np.testing.assert_allclose(
            chunks.per_head[..., s],
            chunks.token_scores[..., start - first : end - first].mean(axis=-1),
            rtol=1e-5,
        )
    sentences = attributor.attribute(" ".join(CHUNKS), QUESTION, ANSWER)
    assert [s.text for s in sentences.spans] == CHUNKS


def test_attention_baseline_equals_eager_weights() -> None:
    model, tok = tiny_model("llama", "eager"), make_tiny_tokenizer()
    result = Attributor(model, tok, top_k=2, rank_post_softmax=True).attribute(
        CHUNKS, QUESTION, ANSWER
    )
    text, _ = join_chunks(CHUNKS)
    example = segment_chat(tok, text, QUESTION, ANSWER)
    with torch.no_grad():
        eager = model(example.input_ids, output_attentions=True).attentions
    weights = torch.stack(eager)[:, 0].double()  # [L, H, T, T]
    m, first = example.prompt_len, result.span_tokens[0][0]
    g = weights.shape[-1] - m
    for layer, head in [(0, 1), (2, 2)]:  # post-softmax ranking: E over the eager weights
        w = weights[layer, head].numpy()
        x = w[m:, :m].ravel()
        y = np.array([w[m + j, m + k] for j in range(g) for k in range(j + 1)])
        assert result.ranking[2, layer, head] == pytest.approx(naive_expected_rc(x, y), rel=1e-4)
    for u, (a, b) in enumerate(result.unit_tokens):
        want = weights[:, :, m + a : m + b, first : first + result.attention.shape[1]]
        np.testing.assert_allclose(result.attention[u], want.mean(dim=(0, 1, 2)), rtol=1e-4)
    scores, _ = result.attention_scores()
    for u in range(2):
        mass = [result.attention[u, s - first : e - first].sum() for s, e in result.span_tokens]
        np.testing.assert_allclose(scores[u], np.array(mass) / sum(mass), rtol=1e-6)


def test_generated_answer_and_explicit_units(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    spans = ["cat sat on the warm mat", (45, 60)]
    result = attributor.attribute(
        " ".join(CHUNKS), QUESTION, ANSWER, spans=spans, units=["garden", (0, 7)]
    )
    assert [s.text for s in result.spans] == ["cat sat on the warm mat", " ".join(CHUNKS)[45:60]]
    assert [u.text for u in result.units] == ["garden", "The dog"]
    frame = result.to_frame()
    assert len(frame) == 4 and frame.groupby("unit")["score"].sum().round(6).tolist() == [1, 1]
    payload = json.loads(result.to_json())
    assert payload["units"][0]["text"] == "garden" and len(payload["heads"]) == 5
    generated = Attributor(*setup[:2], top_k=2, max_new_tokens=6).attribute(CHUNKS, QUESTION)
    assert generated.answer and generated.scores.shape[1] == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"answer": "  "}, "answer is empty"),
        ({"context": ["ok chunk", " "]}, "chunk 1 is empty"),
        ({"context": []}, "no chunk"),
        ({"context": "   "}, "context is empty"),
        ({"spans": ["not in the context"]}, "does not occur"),
        ({"spans": [(0, 999)]}, "outside the text"),
        ({"units": [(0, 400)]}, "outside the text"),
        ({"units": ["zebra"]}, "does not occur"),
        ({"context": "One text.", "granularity": "chunk"}, "list of chunks"),
        ({"granularity": "paragraph"}, "granularity must be"),
        ({"spans": ["cat"], "granularity": "token"}, "either spans or a granularity"),
        ({"context": "word " * 300}, "model's window"),
    ],
)
def test_bad_input_is_refused(setup, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    args = {"context": CHUNKS, "question": QUESTION, "answer": ANSWER, **kwargs}
    with pytest.raises(ValueError, match=message):
        attributor.attribute(**args)


def test_bad_configuration_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, attributor = setup
    with pytest.raises(ValueError, match=r"top_k must be an integer in \[1, 12\]"):
        Attributor(model, tok, top_k=13)
    with pytest.raises(ValueError, match="top_k must be an integer in"):
        Attributor(model, tok, top_k=0)
    with pytest.raises(ValueError, match="head_ranking must be"):
        Attributor(model, tok, head_ranking="best")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="statistic must be"):
        Attributor(model, tok, statistic="median")  # type: ignore[arg-type]
    Attributor(model, tok, top_k=None, head_ranking="all")  # k is not used by "all"
    plain = Attributor(model, tok, top_k=2).attribute(CHUNKS, QUESTION, ANSWER)
    assert np.isnan(plain.ranking[1:]).all() and not np.isnan(plain.ranking[0]).any()
    with pytest.raises(ValueError, match="rank_post_softmax=True"):
        plain.heads_for("top_post_softmax", 2)
    result = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    with pytest.raises(ValueError, match="top_k must be an integer in"):
        result.scores_for("top", 50)


def test_explicit_spans_read_the_context_columns_of_their_own_tokens(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    text, _ = join_chunks(CHUNKS)
    chunks = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    later = attributor.attribute(text, QUESTION, ANSWER, spans=CHUNKS[1:])  # not at the start
    assert later.context_start == chunks.context_start < later.span_tokens[0][0]
    mass = chunks.attention_scores()[0][:, 1:]
    np.testing.assert_allclose(
        later.attention_scores()[0], mass / mass.sum(axis=1, keepdims=True), rtol=1e-5
    )
    np.testing.assert_allclose(later.per_head, chunks.per_head[..., 1:], rtol=1e-6)


# ----------------------------------------------------------------------- span scores, order

TWO_SENTENCE_CHUNKS = [
    "The cat sat on the warm mat. It purred near the door.",
    "The dog slept in the garden. It dreamt all day long.",
    "A bird sang in the old tree. The river ran by it.",
]


def test_span_scores_sum_and_best_sentence_against_sentence_spans(setup) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    chunks = attributor.attribute(TWO_SENTENCE_CHUNKS, QUESTION, ANSWER)
    text, _ = join_chunks(TWO_SENTENCE_CHUNKS)
    # an independent pass with the sentences as candidate spans, scored by the paper's mean
    sentences = attributor.attribute(text, QUESTION, ANSWER, granularity="sentence")
    assert len(sentences.spans) == 6
    for heads in (chunks.heads_for("top", 5), chunks.heads_for("all", None), [(1, 2)]):
        per_sentence = sentences.head_totals(heads)  # [U, 6], float64 per-head path
        want = per_sentence.reshape(2, 3, 2).max(axis=-1)  # each chunk: its best sentence
        np.testing.assert_allclose(chunks.head_totals(heads, "sentence"), want, rtol=1e-5)
        lengths = np.array([b - a for a, b in chunks.span_tokens])
        np.testing.assert_allclose(
            chunks.head_totals(heads, "sum"), chunks.head_totals(heads) * lengths, rtol=1e-12
        )
        keys = sum(chunks.token_scores[la, h].astype(np.float64) for la, h in heads)  # [U, C]
        first = chunks.context_start
        summed = [keys[:, a - first : b - first].sum(axis=1) for a, b in chunks.span_tokens]
        np.testing.assert_allclose(chunks.head_totals(heads, "sum"), np.stack(summed, 1), rtol=1e-5)
    # a configured span score drives scores / attributed / method
    rescored = Attributor(*setup[:2], top_k=5, span_score="sentence").attribute(
        TWO_SENTENCE_CHUNKS, QUESTION, ANSWER
    )
    np.testing.assert_allclose(
        rescored.scores, chunks.scores_for("top", 5, "sentence")[0], rtol=1e-12
    )
    assert rescored.method == "top-5 RC heads, best sentence"
    # with one sentence per chunk, the best sentence is the chunk itself
    single = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    np.testing.assert_allclose(
        single.head_totals(single.heads, "sentence"), single.head_totals(single.heads), rtol=1e-5
    )


def test_span_score_errors(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, attributor = setup
    with pytest.raises(ValueError, match="span_score must be one of"):
        Attributor(model, tok, top_k=2, span_score="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="upper bound does not split over keys"):
        Attributor(model, tok, top_k=2, statistic="upper", span_score="sum")
    result = attributor.attribute(CHUNKS, QUESTION, ANSWER)
    with pytest.raises(ValueError, match="outside the model's 3 layers × 4 heads"):
        result.scores_for_heads([(3, 0)])
    with pytest.raises(ValueError, match="at least one"):
        result.scores_for_heads([])
    upper = Attributor(model, tok, top_k=2, statistic="upper").attribute(CHUNKS, QUESTION, ANSWER)
    with pytest.raises(ValueError, match="upper bound does not split"):
        upper.scores_for("top", 2, "sentence")
    with pytest.raises(TypeError, match="question_first"):
        Attributor(model, tok, top_k=2, question_first=1)  # type: ignore[arg-type]


def test_question_first_prompt_against_projections(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = setup
    result = Attributor(model, tok, top_k=5, question_first=True).attribute(
        CHUNKS, QUESTION, ANSWER
    )
    text, _ = join_chunks(CHUNKS)
    example = segment_chat(tok, text, QUESTION, ANSWER, question_first=True)
    assert example.token_span("question")[1] <= result.context_start
    assert "".join(result.context_tokens) == text
    ref = reference_scores(model, example.input_ids)
    m = example.prompt_len
    for layer, head in [(0, 3), (2, 1)]:
        for u, unit in enumerate(result.unit_tokens):
            for s, span in enumerate(result.span_tokens):
                x, y = _samples(ref[layer][0, head], m, unit, span)
                want = naive_expected_rc(x, y)
                assert result.per_head[layer, head, u, s] == pytest.approx(want, rel=1e-4, abs=1e-4)


# ----------------------------------------------------------------------- result: files, cut


def test_save_load_round_trip(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, attributor = setup
    result = attributor.attribute(["The cat sat on the mat.", "Dogs bark."], "Who sat?", "The cat.")
    result.gold = [0]
    result.span_score = "sum"
    path = result.save(tmp_path / "a.npz")
    back = Attribution.load(path)
    for name in ("ranking", "per_head", "token_scores", "attention"):
        np.testing.assert_array_equal(getattr(back, name), getattr(result, name))
    for name in (
        "question",
        "answer",
        "context",
        "spans",
        "units",
        "span_tokens",
        "unit_tokens",
        "context_tokens",
        "context_start",
        "statistic",
        "head_ranking",
        "top_k",
        "gold",
        "finished",
        "span_score",
    ):
        assert getattr(back, name) == getattr(result, name), name
    assert back.to_json() == result.to_json()
    # a file written before span scores existed reads as the paper's mean
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: np.array(data[k]) for k in data.files}
    header = json.loads(str(arrays.pop("header")))
    del header["span_score"]
    np.savez(tmp_path / "old.npz", header=np.array(json.dumps(header)), **arrays)
    assert Attribution.load(tmp_path / "old.npz").span_score == "mean"
    with pytest.raises(ValueError, match=r"\.npz"):
        result.save(tmp_path / "a.pkl")
    np.savez(tmp_path / "other.npz", header=np.array("{}"))
    with pytest.raises(ValueError, match=r"other\.npz: not an rcstat attribution file \(no rank"):
        Attribution.load(tmp_path / "other.npz")
    header["format"] = "something-else"
    np.savez(tmp_path / "fmt.npz", header=np.array(json.dumps(header)), **arrays)
    with pytest.raises(ValueError, match=r"fmt\.npz: .* \(format 'something-else'\)"):
        Attribution.load(tmp_path / "fmt.npz")
    np.savez(tmp_path / "bare.npz", **arrays)
    with pytest.raises(ValueError, match=r"bare\.npz: .* \(no header\)"):
        Attribution.load(tmp_path / "bare.npz")
    (tmp_path / "text.npz").write_text("not an archive")
    (tmp_path / "empty.npz").write_bytes(b"")
    (tmp_path / "cut.npz").write_bytes(path.read_bytes()[:100])
    for name in ("text.npz", "empty.npz", "cut.npz"):
        with pytest.raises(ValueError, match=rf"{name}: .* \(not an \.npz archive\)"):
            Attribution.load(tmp_path / name)


def test_a_cut_answer_is_marked_everywhere(setup) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = setup
    attributor = Attributor(model, tok, top_k=5, max_new_tokens=3)
    with patch.object(generation_module, "stop_token_ids", return_value=frozenset()):
        result = attributor.attribute("The cat sat on the mat. Dogs bark.", "Who sat?")
    assert result.finished is False
    frame = result.to_frame()
    last = len(result.units) - 1
    assert not frame[frame["unit"] == last]["unit_complete"].any()
    assert frame[frame["unit"] < last]["unit_complete"].all()
    payload = json.loads(result.to_json())
    assert payload["answer_finished"] is False and payload["units"][-1]["complete"] is False
    assert "Answer cut at the token" in attribution_page(result)

    given = attributor.attribute("The cat sat on the mat.", "Who sat?", "The cat.")
    assert given.finished is True and "Answer cut at the token" not in attribution_page(given)
