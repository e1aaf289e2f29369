"""Tests of rcstat.grounding.limits and of the limits the library's Grounder applies: a response
without a word is refused (not supported), texts longer than ``max_chars`` are refused before
anything is tokenised, responses longer than ``max_response_tokens`` before any forward pass,
``max_tokens`` above the documented ceiling at construction; the windows of a long context show
progress on request; the one sentence schema of ``Grounding.to_dict``; ``question_given``.

The tiny random Llama (window 256) and a head profile made by hand: none of this depends on the
real model. "Before any forward pass" is checked with a measurer that raises when called.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcstat.defaults import DEFAULT_MAX_CHARS, DEFAULT_MAX_RESPONSE_TOKENS, MAX_PASS_TOKENS
from rcstat.grounding import DEFAULT_INSTRUCTION, Grounder, Grounding, HeadProfile
from rcstat.grounding.limits import check_response_tokens, check_texts, has_word
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CONTEXT = "The bridge was built in 1889 by a team of engineers. Paris is the capital of France."
RESPONSE = "The bridge was built in 1925. It is in Paris."


@pytest.fixture(scope="module")
def grounder() -> Grounder:
    rng = np.random.default_rng(0)
    profile = HeadProfile(
        "tiny", rng.uniform(0.2, 0.9, (3, 4)), 0.05, 0.1, 0.5, copy_values=rng.random((3, 4))
    )
    return Grounder(tiny_model("llama"), make_tiny_tokenizer(), profile=profile, top_k=5)


def _no_pass(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a forward pass ran")


# ------------------------------------------------------------------------ the checks alone


@given(st.text(max_size=40))
def test_has_word_is_any_word_character(text: str) -> None:
    assert has_word(text) is (re.search(r"\w", text) is not None)


@pytest.mark.parametrize(
    ("response", "words"),
    [("?!?! ... !!!", False), ("«—»", False), ("👍", False), ("1889", True), ("東京。", True)],
)
def test_a_response_needs_a_word(response: str, words: bool) -> None:
    if words:
        check_texts({"context": "c", "response": response}, 100)
        return
    with pytest.raises(ValueError, match="the response has no word"):
        check_texts({"context": "c", "response": response}, 100)


def test_check_texts_counts_characters_and_names_the_limit() -> None:
    check_texts({"context": "x" * 10, "response": "ok", "question": None}, 10)  # at the limit
    with pytest.raises(ValueError, match=r"the context has 11 characters, more than max_chars=10"):
        check_texts({"context": "x" * 11, "response": "ok"}, 10)
    with pytest.raises(
        ValueError, match=r"question has 1,200 characters, more than --max-chars 1,"
    ):
        check_texts({"question": "q" * 1200}, 1000, option="--max-chars")
    check_response_tokens(7, 7)
    with pytest.raises(ValueError, match=r"8 tokens, more than max_response_tokens=7 allows"):
        check_response_tokens(8, 7)


def test_the_defaults_are_documented_numbers() -> None:
    assert (DEFAULT_MAX_CHARS, DEFAULT_MAX_RESPONSE_TOKENS, MAX_PASS_TOKENS) == (
        100_000,
        2048,
        131_072,
    )


# ------------------------------------------------------------------------------- Grounder


def test_a_punctuation_response_is_refused_not_supported(grounder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grounder.measurer, "measure_batch", _no_pass)
    for response in ("?!?! ... !!!", " . ", "—"):
        with pytest.raises(ValueError, match="the response has no word"):
            grounder.ground(CONTEXT, response)
    with pytest.raises(ValueError, match="empty or whitespace"):  # an empty one says so
        grounder.ground(CONTEXT, "   ")


def test_grounder_refuses_long_texts_before_tokenising(grounder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grounder.measurer, "tokenize", _no_pass)
    monkeypatch.setattr(grounder, "max_chars", 50)
    with pytest.raises(ValueError, match=r"context has 84 characters, more than max_chars=50"):
        grounder.ground(CONTEXT, RESPONSE)
    with pytest.raises(ValueError, match=r"the question has 51 characters"):
        grounder.ground(CONTEXT[:50], RESPONSE, "q" * 51)


def test_grounder_refuses_a_long_response_before_any_pass(grounder, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(grounder.measurer, "measure_batch", _no_pass)
    first, last = grounder.measurer.tokenize(CONTEXT, RESPONSE).token_span("answer")
    monkeypatch.setattr(grounder, "max_response_tokens", last - first - 1)
    with pytest.raises(ValueError) as err:
        grounder.ground(CONTEXT, RESPONSE)
    message = str(err.value)
    assert f"the response has {last - first} tokens, more than max_response_tokens=" in message
    assert "--max-response-tokens" in message
    monkeypatch.setattr(grounder, "max_response_tokens", last - first)  # at the limit: measured
    with pytest.raises(AssertionError, match="a forward pass ran"):
        grounder.ground(CONTEXT, RESPONSE)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_tokens": 10**12}, r"max_tokens must be an integer in \[128, 131072\]"),
        ({"max_tokens": MAX_PASS_TOKENS + 1}, r"max_tokens must be an integer in \[128, 131072\]"),
        ({"max_tokens": 0}, "max_tokens must be an integer"),
        ({"max_tokens": 127}, r"max_tokens must be an integer in \[128, 131072\]"),
        ({"quantile": 1.0}, r"quantile must be in \(0, 1\)"),
        ({"threshold": 1.5}, r"threshold must be in \[0, 1\]"),
        ({"language": "xx-"}, "language 'xx-' is not a language code"),
        ({"max_chars": 0}, r"max_chars must be an integer in \[1, ∞\)"),
        ({"max_response_tokens": 2.5}, "max_response_tokens must be an integer"),
        ({"max_response_tokens": True}, "max_response_tokens must be an integer"),
    ],
)
def test_grounder_refuses_bad_limits(grounder, options, message) -> None:  # type: ignore[no-untyped-def]
    model, tok = grounder.measurer.model, grounder.measurer.tokenizer
    with pytest.raises(ValueError, match=message):
        Grounder(model, tok, profile=grounder.profile, top_k=5, **options)


def test_max_tokens_above_the_window_is_lowered_to_it(grounder) -> None:  # type: ignore[no-untyped-def]
    model, tok = grounder.measurer.model, grounder.measurer.tokenizer
    lowered = Grounder(model, tok, profile=grounder.profile, top_k=5, max_tokens=MAX_PASS_TOKENS)
    assert lowered.max_tokens == 256 == model.config.max_position_embeddings


def test_windows_show_progress_on_request(grounder, capsys) -> None:  # type: ignore[no-untyped-def]
    context = " ".join(f"The bridge number {i} was built in 1889 by engineers." for i in range(30))
    quiet = grounder.ground(context, RESPONSE)
    assert quiet.windows > 1 and capsys.readouterr().err == ""
    shown = grounder.ground(context, RESPONSE, show_progress=True)
    lines = capsys.readouterr().err.splitlines()
    n = shown.windows
    assert [line.split(" (")[0] for line in lines] == [
        f"reading the context: {k}/{n} window" for k in range(n + 1)
    ]
    np.testing.assert_array_equal(shown.token_scores, quiet.token_scores)
    grounder.ground(CONTEXT, RESPONSE, show_progress=True)  # one pass: no progress line
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- the result's schema


def test_question_given_and_its_round_trip(grounder, tmp_path) -> None:  # type: ignore[no-untyped-def]
    plain = grounder.ground(CONTEXT, RESPONSE)
    asked = grounder.ground(CONTEXT, RESPONSE, "Who built it?")
    assert plain.question == DEFAULT_INSTRUCTION and not plain.question_given
    assert asked.question == "Who built it?" and asked.question_given
    for result in (plain, asked):
        loaded = Grounding.load(result.save(tmp_path / "g.json"))
        assert loaded.question_given is result.question_given
    # a file of an earlier format is refused, saying why and what to do
    data = json.loads(plain.save(tmp_path / "g.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**data, "format": "rcstat-grounding-1"}))
    with pytest.raises(ValueError, match=r"earlier rcstat \(format 'rcstat-grounding-1'.*again"):
        Grounding.load(tmp_path / "old.json")


def test_to_dict_sentences_are_the_one_schema(grounder) -> None:  # type: ignore[no-untyped-def]
    result = grounder.ground(CONTEXT, RESPONSE, "When was it built?")
    saved = result.to_dict()["sentences"]
    assert len(saved) == len(result.sentences)
    for entry, sentence in zip(saved, result.sentences, strict=True):
        assert entry == {**result.sentence_dict(sentence), "tokens": list(sentence.tokens)}
        assert set(entry) == {"start", "end", "text", "score", "verdict", "support"} | {
            "weakest_word",
            "tokens",
        }
        assert entry["verdict"] == sentence.status
        assert result.response[entry["start"] : entry["end"]] == entry["text"]
        word = entry["weakest_word"]
        assert result.response[word["start"] : word["end"]] == word["text"]
        inside = [
            v
            for (a, b), v in zip(result.token_spans, result.token_scores, strict=True)
            if a < word["end"] and b > word["start"]
        ]
        assert word["score"] == pytest.approx(np.nanmin(inside))
        support = entry["support"]
        if support is not None:
            assert result.context[support["start"] : support["end"]] == support["text"]
            assert 0 <= support["share"] <= 1
