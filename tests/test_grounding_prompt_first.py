"""One pair with its prompt's pass first (:meth:`Measurer.measure_after_prompt`, what
:meth:`Grounder.ground` runs on a GPU): the same measurement and verdict as one pass over the
whole sequence, the host's text work after the prompt's pass is queued, the limits checked
before any pass."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rcstat.grounding import Grounder, Measurer
from rcstat.grounding.measure import Measurer as MeasurerClass
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_grounding_batch import PAIRS, _assert_same, _profile


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_prompt_first_equals_one_pass(arch: str) -> None:
    """Every statistic (RC of every head, eq. 10 support, copy, the prior pass) as the pass
    over the whole sequence, for pairs of different lengths; the cache is not left longer."""
    model, tok = tiny_model(arch), make_tiny_tokenizer()
    measurer = Measurer(model, tok, support_heads=np.array([0, 3, 5, 9, 11]), prior=True)
    for pair in PAIRS:
        example = measurer.tokenize(*pair)
        prepared, got = measurer.measure_after_prompt(*pair, example)
        _assert_same(got, measurer.measure(*pair))
        assert prepared.example is example


def test_the_text_work_runs_after_the_prompts_pass_is_queued(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The order of the work: the prompt's pass (its tokens only, no capture), then the word
    matches, then the response's pass from the first captured row, then ``meanwhile`` with the
    prepared example, before anything is read back."""
    import rcstat.grounding.measure as measure

    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    measurer = Measurer(model, tok, prior=False)  # the prior pass would follow the two
    steps: list[Any] = []
    original, matches = model.forward, measure.word_matches

    def counting(input_ids=None, **kwargs):  # type: ignore[no-untyped-def]
        steps.append(("pass", int(input_ids.shape[1])))
        return original(input_ids=input_ids, **kwargs)

    def matched(*args: Any) -> Any:
        steps.append("word matches")
        return matches(*args)

    monkeypatch.setattr(model, "forward", counting)
    monkeypatch.setattr(measure, "word_matches", matched)
    example = measurer.tokenize(*PAIRS[0])
    seen: list[Any] = []
    prepared, _ = measurer.measure_after_prompt(*PAIRS[0], example, meanwhile=seen.append)
    split = prepared.passed.rows.first_row
    assert steps == [("pass", split), "word matches", ("pass", example.seq_len - split)]
    assert seen == [prepared]


def test_an_example_past_the_window_is_refused_before_any_pass(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    measurer = Measurer(model, tok)
    example = measurer.tokenize(*PAIRS[2])
    monkeypatch.setattr(model.config, "max_position_embeddings", example.seq_len - 1)

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a pass ran")

    monkeypatch.setattr(model, "forward", never)
    with pytest.raises(ValueError, match=r"window|max_position"):
        measurer.measure_after_prompt(*PAIRS[2], example)


def test_sliding_window_layers_are_measured_in_one_pass() -> None:
    """gemma2's cache keeps only the last keys: no prompt-first pass; the grounder measures
    its pairs in one pass whatever the device."""
    model, tok = tiny_model("gemma2"), make_tiny_tokenizer()
    measurer = Measurer(model, tok)
    assert not measurer.reads_prompt_first
    with pytest.raises(ValueError, match="sliding-window layers"):
        measurer.measure_after_prompt(*PAIRS[0], measurer.tokenize(*PAIRS[0]))


def test_the_grounder_gives_the_same_verdicts_either_way(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``Grounder.ground`` with the prompt's pass first (forced here on the CPU, where it is
    off) against one pass: verdict, score, token scores and spans; and off on a CPU."""
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    grounder = Grounder(model, tok, profile=_profile(), detector=False)
    assert not grounder.measurer.reads_prompt_first  # a CPU: one pass costs less
    want = [grounder.ground(*pair) for pair in PAIRS]
    calls: list[int] = []
    first = MeasurerClass.measure_after_prompt

    def counted(self: Measurer, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return first(self, *args, **kwargs)

    monkeypatch.setattr(MeasurerClass, "reads_prompt_first", property(lambda self: True))
    monkeypatch.setattr(MeasurerClass, "measure_after_prompt", counted)
    for pair, expected in zip(PAIRS, want, strict=True):
        got = grounder.ground(*pair)
        assert got.verdict == expected.verdict
        assert got.score == pytest.approx(expected.score, rel=1e-5, abs=1e-7)
        np.testing.assert_allclose(got.token_scores, expected.token_scores, rtol=1e-5, atol=1e-7)
        assert [(s.start, s.end) for s in got.spans] == [(s.start, s.end) for s in expected.spans]
        assert [s.support for s in got.sentences] == [s.support for s in expected.sentences]
    assert len(calls) == len(PAIRS)
