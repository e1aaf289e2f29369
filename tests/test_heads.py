"""Tests of rcstat.heads: dataset-scale collection, summaries, comparison, figures, CLI.

Oracles: collected values against :func:`rcstat.analyze` run directly on each example;
percentiles, counts and thresholds against numpy on hand-built frames; the Mann–Whitney test
and the Spearman correlations against scipy on counts computed here by loops; resuming by
counting the analyses and comparing file bytes. Everything runs on the tiny random Llama
(3 layers × 4 heads, window 256) — no downloads.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import mannwhitneyu, spearmanr

import rcstat.generation
import rcstat.heads
from rcstat import cli
from rcstat.analysis import analyze
from rcstat.data import AttributedSpan, AttributionExample, DatasetFormatError, QAExample
from rcstat.defaults import DEFAULT_TAU
from rcstat.heads import (
    Comparison,
    HeadSummary,
    JsonlExample,
    collect,
    compare,
    load_jsonl,
    read_heads,
    summarize,
)
from rcstat.report.heads_plots import (
    plot_comparison,
    plot_head_distributions,
    plot_median_heatmap,
    plot_percentile_bands,
)
from rcstat.report.plots import save_figure
from rcstat.runs import RunMismatchError
from tests._console import console_width
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_data import _qmsum_record, _squad_doc, _write_json, _write_jsonl

LAYERS, HEADS = 3, 4  # tests/_tiny_models.py
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOO_LONG = "word " * 400  # > 256 tokens: beyond the tiny model's window
collect_module = importlib.import_module("rcstat.heads.collection")


@pytest.fixture(scope="module")
def model_tok() -> tuple[Any, Any]:
    return tiny_model("llama"), make_tiny_tokenizer()


def _examples() -> list[Any]:
    """One example of every supported kind (the unanswerable one makes the model generate)."""
    return [
        QAExample(
            "qa", "The cat sat on the warm mat.", "Where did the cat sit?", ("On the mat.",), "x"
        ),
        QAExample("unanswerable", "The dog slept in the garden.", "Who painted it?", (), "x"),
        AttributionExample(
            "attr",
            "What is red?",
            ("Apples are red.", "The sky is blue."),
            "Apples are.",
            (AttributedSpan(0, 6, 0),),
            "x",
        ),
        JsonlExample("jsonl", "Paris is in France.", "Where is Paris?", "In France."),
        {"context": "Ice is cold.", "question": "Is ice hot?", "answer": "No."},  # id "4"
    ]


def _direct(model: Any, tok: Any, example: Any) -> Any:
    """The oracle: analyze() called by hand with the inputs the brief prescribes."""
    if isinstance(example, QAExample):
        context, question = example.context, example.question
        answer = example.answers[0] if example.answers else None
    elif isinstance(example, AttributionExample):
        context, question, answer = "\n\n".join(example.chunks), example.question, example.answer
    elif isinstance(example, JsonlExample):
        context, question, answer = example.context, example.question, example.answer
    else:
        context, question, answer = example["context"], example["question"], example["answer"]
    return analyze(
        model,
        tok,
        context=context,
        question=question,
        answer=answer,
        question_placement="generation",
        max_new_tokens=4,
    )


# ----------------------------------------------------------------------------- collect


def test_collect_equals_analyze_per_example(model_tok: tuple[Any, Any]) -> None:
    model, tok = model_tok
    examples = _examples()
    frame = collect(model, tok, examples, max_new_tokens=4, progress=False)
    assert list(frame.columns) == [
        "example", "layer", "head", "expected", "upper", "prompt_len", "gen_len",
    ]  # fmt: skip
    assert frame["expected"].dtype == np.float32 and frame["layer"].dtype == np.int16
    ids = ["qa", "unanswerable", "attr", "jsonl", "4"]
    assert list(pd.unique(frame["example"])) == ids
    assert len(frame) == len(ids) * LAYERS * HEADS
    oracle = {i: _direct(model, tok, e) for i, e in zip(ids, examples, strict=True)}
    for example_id, result in oracle.items():
        part = frame[frame["example"] == example_id]
        grid = part.set_index(["layer", "head"]).sort_index()
        np.testing.assert_allclose(
            grid["expected"].to_numpy().reshape(LAYERS, HEADS), result.expected, rtol=1e-6
        )
        np.testing.assert_allclose(
            grid["upper"].to_numpy().reshape(LAYERS, HEADS), result.upper, rtol=1e-6
        )
        assert set(part["prompt_len"]) == {result.prompt_len}
        assert set(part["gen_len"]) == {result.gen_len}
    # The unanswerable example's generation is question + template + a generated answer.
    generated = oracle["unanswerable"].generation_text
    assert generated.startswith("Who painted it?") and generated.split("assistant\n", 1)[1]

    # ... and so the summary statistics equal numpy / HeadAnalysis on the direct results.
    tau = 5.0
    summary = summarize(frame, tau=tau)
    stacked = np.stack([oracle[i].upper for i in ids])  # [example, layer, head]
    assert summary.counts["above_tau"].tolist() == [oracle[i].count_above(tau) for i in ids]
    np.testing.assert_allclose(summary.median, np.median(stacked, axis=0), rtol=1e-6)
    p95 = np.percentile(stacked, 95)
    assert summary.p95 == pytest.approx(p95, rel=1e-6)
    assert summary.counts["above_p95"].tolist() == [int((oracle[i].upper > p95).sum()) for i in ids]


def test_collect_rejects_duplicate_ids_and_unknown_types(model_tok: tuple[Any, Any]) -> None:
    model, tok = model_tok
    twice = [
        JsonlExample("a", "Ice is cold.", "Hot?", "No."),
        {"id": "a", "context": "c", "question": "q"},
    ]
    with pytest.raises(ValueError, match="duplicate example id 'a'"):
        collect(model, tok, twice, progress=False)
    with pytest.raises(TypeError, match="examples\\[0\\]"):
        collect(model, tok, ["just a string"], progress=False)
    with pytest.raises(ValueError, match="missing key"):
        collect(model, tok, [{"context": "c"}], progress=False)


def _counting(monkeypatch: pytest.MonkeyPatch, fail: set[str] | None = None) -> list[str]:
    """Record the question of every analysis; raise ``ValueError`` once for each question in
    ``fail`` (a transient failure)."""
    calls: list[str] = []
    real = collect_module.analyze
    pending = set(fail or ())

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["question"])
        if kwargs["question"] in pending:
            pending.discard(kwargs["question"])
            raise ValueError("transient failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(collect_module, "analyze", counting)
    return calls


def _fact(i: int, text: str = "true") -> JsonlExample:
    return JsonlExample(f"e{i}", f"Fact number {i} is {text}.", f"Is fact {i} true?", "Yes.")


def _log(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "examples.csv", dtype=str, keep_default_na=False)


def test_collect_resumes_and_records_failures(
    model_tok: tuple[Any, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model, tok = model_tok
    calls = _counting(monkeypatch)
    make = _fact
    long = JsonlExample("long", TOO_LONG, "Is it long?", "Yes.")
    first = collect(model, tok, [make(0), long, make(1)], out=tmp_path, progress=False)
    assert len(calls) == 3
    assert list(pd.unique(first["example"])) == ["e0", "e1"]
    assert set(first.attrs["errors"]) == {"long"}
    log = _log(tmp_path)
    assert list(log.columns) == [
        "id", "prompt_len", "gen_len", "finished", "seconds", "error", "hash",
    ]  # fmt: skip
    assert log["id"].tolist() == ["e0", "long", "e1"]
    assert "ValueError" in log.loc[1, "error"] and "256" in log.loc[1, "error"]
    assert log.loc[0, "error"] == "" and float(log.loc[0, "seconds"]) > 0
    assert log.loc[0, "finished"] == ""  # the answer was given, not generated
    assert log["hash"].str.len().eq(64).all()
    manifest = json.loads((tmp_path / "run.json").read_text())
    assert manifest["kind"] == "heads" and manifest["options"]["max_new_tokens"] == 32
    before = (tmp_path / "heads.csv").read_bytes()
    assert before.count(b"example,layer") == 1  # one header

    # Second run without retries: only the new example is analysed.
    calls.clear()
    second = collect(
        model, tok, [make(0), long, make(1), make(2)], out=tmp_path, progress=False,
        retry_failed=False,
    )  # fmt: skip
    assert calls == ["Is fact 2 true?"]
    after = (tmp_path / "heads.csv").read_bytes()
    assert after.startswith(before) and after.count(b"example,layer") == 1
    assert list(pd.unique(second["example"])) == ["e0", "e1", "e2"]
    pd.testing.assert_frame_equal(second[second["example"] != "e2"], first)
    direct = _direct(
        model, tok, {"context": make(2).context, "question": make(2).question, "answer": "Yes."}
    )
    np.testing.assert_allclose(
        second[second["example"] == "e2"]["upper"].to_numpy().reshape(LAYERS, HEADS),
        direct.upper,
        rtol=1e-6,
    )
    # CSV round trip keeps float32 exactly and ids as strings.
    pd.testing.assert_frame_equal(read_heads(tmp_path), second)

    # A torn last example (write interrupted mid-line) is dropped and recomputed, nothing else.
    (tmp_path / "heads.csv").write_bytes(after[:-100])  # cut in the middle of a line
    calls.clear()
    with caplog.at_level(logging.WARNING):
        third = collect(model, tok, [make(0), make(1), make(2)], out=tmp_path, progress=False)
    assert calls == ["Is fact 2 true?"]
    lines = after[:-100].count(b"\n") + 1
    assert f"{tmp_path / 'heads.csv'}, line {lines}: cut-off last line" in caplog.text
    pd.testing.assert_frame_equal(third, second)
    assert _log(tmp_path)["id"].tolist() == ["e0", "long", "e1", "e2"]  # e2's line replaced

    # The failed example is retried by default (and fails again: one line, replaced).
    calls.clear()
    collect(model, tok, [make(0), long], out=tmp_path, progress=False)
    assert calls == ["Is it long?"]
    assert _log(tmp_path)["id"].tolist() == ["e0", "e1", "e2", "long"]


def test_collect_retries_a_failed_example(
    model_tok: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = model_tok
    calls = _counting(monkeypatch, fail={"Is fact 1 true?"})
    examples = [_fact(0), _fact(1), _fact(2)]
    first = collect(model, tok, examples, out=tmp_path, progress=False)
    assert first.attrs["errors"] == {"e1": "ValueError: transient failure"}
    assert first["example"].nunique() == 2
    calls.clear()
    second = collect(model, tok, examples, out=tmp_path, progress=False)
    assert calls == ["Is fact 1 true?"] and second.attrs["errors"] == {}
    assert list(pd.unique(second["example"])) == ["e0", "e1", "e2"]
    log = _log(tmp_path)
    assert sorted(log["id"]) == ["e0", "e1", "e2"] and (log["error"] == "").all()
    uninterrupted = collect(model, tok, examples, progress=False)
    pd.testing.assert_frame_equal(second, uninterrupted)


def test_collect_recomputes_a_changed_example(
    model_tok: tuple[Any, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    model, tok = model_tok
    calls = _counting(monkeypatch)
    collect(model, tok, [_fact(0), _fact(1)], out=tmp_path, progress=False)
    old_hash = _log(tmp_path).set_index("id").loc["e1", "hash"]
    calls.clear()
    changed = [_fact(0), _fact(1, "false")]  # same id, new text
    with caplog.at_level(logging.WARNING):
        frame = collect(model, tok, changed, out=tmp_path, progress=False)
    assert calls == ["Is fact 1 true?"]
    assert "1 item(s) whose example changed" in caplog.text and "e1" in caplog.text
    heads = read_heads(tmp_path)
    assert (heads.groupby("example").size() == LAYERS * HEADS).all()  # replaced, not added
    log = _log(tmp_path)
    assert log["id"].tolist() == ["e0", "e1"] and log.loc[1, "hash"] != old_hash
    direct = _direct(model, tok, {"context": changed[1].context, "question": changed[1].question,
                                  "answer": "Yes."})  # fmt: skip
    np.testing.assert_allclose(
        frame[frame["example"] == "e1"]["upper"].to_numpy().reshape(LAYERS, HEADS),
        direct.upper,
        rtol=1e-6,
    )


def test_collect_records_whether_a_generated_answer_finished(
    model_tok: tuple[Any, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, tok = model_tok
    example = JsonlExample("gen", "The dog slept in the garden.", "Where did it sleep?")
    collect(model, tok, [example], out=tmp_path, progress=False, max_new_tokens=2)
    direct = analyze(model, tok, context=example.context, question=example.question,
                     question_placement="generation", max_new_tokens=2)  # fmt: skip
    assert direct.generation_finished is not None
    assert _log(tmp_path).loc[0, "finished"] == str(direct.generation_finished)
    # recomputed: a cache-free greedy loop over the chat prompt; the tiny model's first two
    # tokens end nothing (cut at the limit), and with its second token made the stop token
    # the answer finishes after one token
    message = [{"role": "user", "content": f"{example.context}\n\n{example.question}"}]
    ids = tok.apply_chat_template(message, add_generation_prompt=True, return_tensors="pt")
    ids = ids if isinstance(ids, torch.Tensor) else ids["input_ids"]
    greedy = []
    with torch.no_grad():
        for _ in range(2):
            greedy.append(int(model(ids).logits[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([greedy[-1:]])], dim=1)
    stops = rcstat.generation.stop_token_ids(model, tok)
    assert not stops & set(greedy) and direct.generation_finished is False
    log = _log(tmp_path).loc[0]
    assert (log["finished"], int(log["gen_len"])) == ("False", direct.gen_len)
    monkeypatch.setattr(rcstat.generation, "stop_token_ids", lambda *_: frozenset(greedy[1:]))
    collect(model, tok, [example], out=tmp_path / "stopped", progress=False, max_new_tokens=2)
    stopped = _log(tmp_path / "stopped").loc[0]
    assert (stopped["finished"], int(stopped["gen_len"])) == ("True", direct.gen_len - 1)


def test_collect_refuses_a_folder_of_another_model_or_setting(
    model_tok: tuple[Any, Any], tmp_path: Path
) -> None:
    model, tok = model_tok
    example = [JsonlExample("a", "Ice is cold.", "Is ice hot?", "No.")]
    collect(model, tok, example, out=tmp_path / "run", progress=False, max_new_tokens=3)
    before = {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()}
    with pytest.raises(RunMismatchError, match="max_new_tokens: 3 in the run, 4 now"):
        collect(model, tok, example, out=tmp_path / "run", progress=False, max_new_tokens=4)
    with pytest.raises(RunMismatchError, match=r"model\.weights: params:\w+… in the run"):
        collect(tiny_model("qwen2"), tok, example, out=tmp_path / "run", progress=False,
                max_new_tokens=3)  # fmt: skip
    with pytest.raises(RunMismatchError, match='dataset: \\(absent\\) in the run, "x" now'):
        collect(model, tok, example, out=tmp_path / "run", progress=False, max_new_tokens=3,
                options={"dataset": "x"})  # fmt: skip
    assert {p.name: p.read_bytes() for p in (tmp_path / "run").iterdir()} == before
    # Rows of an earlier rcstat, without a manifest, are not resumed.
    frame = pd.DataFrame(
        {"example": "x", "layer": [0, 0], "head": [0, 1], "expected": 1.0, "upper": 2.0,
         "prompt_len": 5, "gen_len": 3}
    )  # fmt: skip
    frame.to_csv(tmp_path / "heads.csv", index=False)
    with pytest.raises(RunMismatchError, match=r"heads\.csv but no run\.json"):
        collect(model, tok, example, out=tmp_path, progress=False)


# -------------------------------------------------------------------------------- jsonl


def test_load_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(
        json.dumps({"context": "C1", "question": "Q1", "answer": "A1", "id": 7})
        + "\n\n"
        + json.dumps({"context": "C2", "question": "Q2", "answer": None})
        + "\n"
        + json.dumps({"context": "C3", "question": "Q3"})
        + "\n"
    )
    assert load_jsonl(path) == [
        JsonlExample("7", "C1", "Q1", "A1"),
        JsonlExample("line-3", "C2", "Q2", None),
        JsonlExample("line-4", "C3", "Q3", None),
    ]
    assert len(load_jsonl(path, limit=1)) == 1


@pytest.mark.parametrize(
    ("second_line", "problem"),
    [
        ("{not json", "invalid JSON"),
        ("[1, 2]", "the record must be an object"),
        ('{"context": "c"}', "missing key 'question'"),
        ('{"context": "  ", "question": "q"}', "key 'context' is empty"),
        ('{"context": 3, "question": "q"}', "key 'context' must be a string"),
        ('{"context": "c", "question": "q", "answer": 5}', "key 'answer' must be a string"),
        ('{"context": "c", "question": "q", "answer": ""}', "key 'answer' is empty"),
        ('{"context": "c", "question": "q", "id": [1]}', "key 'id' must be a string or an integer"),
        ('{"context": "c", "question": "q", "id": "a"}', "duplicate id 'a' \\(first on line 1\\)"),
    ],
)
def test_load_jsonl_errors_name_the_line(tmp_path: Path, second_line: str, problem: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"context": "c", "question": "q", "id": "a"}\n' + second_line + "\n")
    with pytest.raises(DatasetFormatError, match=f"line 2: {problem}"):
        load_jsonl(path)


def test_load_jsonl_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_jsonl(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------------------ summary


def _frame(values: np.ndarray, prefix: str = "e") -> pd.DataFrame:
    """Long table from a hand-made ``[example, layer, head]`` array."""
    n, layers, heads = values.shape
    return pd.DataFrame(
        {
            "example": np.repeat([f"{prefix}{i}" for i in range(n)], layers * heads),
            "layer": np.tile(np.repeat(np.arange(layers), heads), n),
            "head": np.tile(np.arange(heads), n * layers),
            "upper": values.reshape(-1),
            "expected": values.reshape(-1) / 2,
        }
    )


def test_percentiles_counts_and_thresholds_match_numpy() -> None:
    rng = np.random.default_rng(1)
    values = rng.gamma(2.0, 1.0, size=(7, 2, 3))  # 7 examples, 2 layers × 3 heads
    frame = _frame(values).sample(frac=1.0, random_state=0)  # row order must not matter
    summary = summarize(frame, tau=1.5)
    assert isinstance(summary, HeadSummary)
    assert (summary.n_examples, summary.n_layers, summary.n_heads) == (7, 2, 3)
    table = summary.percentiles
    assert list(table.columns[:10]) == [
        "rank", "layer", "head", "min", "p5", "p25", "p50", "p75", "p95", "max",
    ]  # fmt: skip
    assert table["p50"].is_monotonic_decreasing and table["rank"].tolist() == list(range(1, 7))
    for row in table.itertuples(index=False):
        column = values[:, row.layer, row.head]
        want = np.percentile(column, [0, 5, 25, 50, 75, 95, 100])
        got = [row.min, row.p5, row.p25, row.p50, row.p75, row.p95, row.max]
        np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(summary.median, np.median(values, axis=0))
    # Counts by hand, examples in order of first appearance in the (shuffled) frame.
    order = [int(e[1:]) for e in pd.unique(frame["example"])]
    assert summary.counts["example"].tolist() == [f"e{i}" for i in order]
    by_hand = [sum(v > 1.5 for v in values[i].ravel()) for i in order]
    assert summary.counts["above_tau"].tolist() == by_hand
    p95 = np.percentile(values, 95)
    assert summary.p95 == pytest.approx(p95)
    assert summary.counts["above_p95"].tolist() == [
        sum(v > p95 for v in values[i].ravel()) for i in order
    ]
    # The expected-RC column is a separate statistic.
    assert summarize(frame, statistic="expected").p95 == pytest.approx(p95 / 2)


def test_layer_profile_and_depth() -> None:
    values = np.zeros((3, 4, 2))  # 4 layers × 2 heads
    values[:, 2, :] = 5.0  # the two best heads sit in layer 2
    values[:, 3, 0] = 4.0  # the third best in layer 3
    summary = summarize(_frame(values), top_n=3)
    assert summary.layer_counts.tolist() == [0, 0, 2, 1]
    assert summary.mean_depth == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert summary.layer_profile()["count"].tolist() == [0, 0, 2, 1]
    assert summary.top(2)[["layer", "head"]].values.tolist() == [[2, 0], [2, 1]]


@pytest.mark.parametrize("tau", [-1.0, float("nan"), float("inf")])
def test_summarize_refuses_a_tau_no_rc_can_be_compared_with(tau: float) -> None:
    """RC and its bounds are never negative: a negative τ would count every head."""
    with pytest.raises(ValueError, match="tau must be"):
        summarize(_frame(np.ones((2, 2, 2))), tau=tau)
    assert summarize(_frame(np.ones((2, 2, 2))), tau=0.0).counts["above_tau"].tolist() == [4, 4]


def test_stability_identities() -> None:
    rng = np.random.default_rng(2)
    one = rng.normal(size=(1, 3, 4))
    same = summarize(_frame(np.repeat(one, 4, axis=0)))
    assert same.stability_mean == pytest.approx(1.0) and same.stability_median == pytest.approx(1.0)
    assert same.stability_pairs == 6
    flipped = summarize(_frame(np.concatenate([one, -one])))
    assert flipped.stability_mean == pytest.approx(-1.0)
    # Against scipy on three random examples (3 pairs).
    values = rng.normal(size=(3, 3, 4))
    rhos = [
        spearmanr(values[i].ravel(), values[j].ravel()).statistic
        for i, j in [(0, 1), (0, 2), (1, 2)]
    ]
    got = summarize(_frame(values))
    assert got.stability_mean == pytest.approx(np.mean(rhos))
    assert got.stability_median == pytest.approx(np.median(rhos))
    assert summarize(_frame(one)).stability_mean is None  # one example: no pair
    constant = np.concatenate([one, np.ones((1, 3, 4)), one])
    assert summarize(_frame(constant)).stability_pairs == 1  # the constant example has no ranks


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda f: f.iloc[1:], "lack some of the 3×4 heads"),
        (lambda f: pd.concat([f, f.iloc[:1]]), "appears more than once"),
        (lambda f: f.iloc[:0], "no rows"),
        (lambda f: f.drop(columns="upper"), "missing column"),
        (lambda f: f.assign(upper=np.inf), "infinite"),
    ],
)
def test_summarize_rejects_bad_frames(mutate: Any, message: str) -> None:
    frame = _frame(np.ones((2, LAYERS, HEADS)))
    with pytest.raises(ValueError, match=message):
        summarize(mutate(frame))


def test_summarize_rejects_bad_options() -> None:
    frame = _frame(np.ones((2, LAYERS, HEADS)))
    with pytest.raises(ValueError, match="statistic"):
        summarize(frame, statistic="lower")
    with pytest.raises(ValueError, match="top_n"):
        summarize(frame, top_n=0)


def test_summary_serialises() -> None:
    summary = summarize(_frame(np.random.default_rng(3).gamma(2.0, size=(4, LAYERS, HEADS))))
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["n_examples"] == 4 and len(data["percentiles"]) == LAYERS * HEADS
    assert data["counts"]["above_tau"]["max"] <= LAYERS * HEADS
    text = summary.to_markdown(k=3)
    assert "| rank | layer | head |" in text and text.count("\n| ") == 4  # header + 3 rows


# ------------------------------------------------------------------------------ compare


def test_compare_matches_scipy_and_signs_the_effect() -> None:
    rng = np.random.default_rng(4)
    a = rng.uniform(0.0, 2.0, size=(6, LAYERS, HEADS))
    b = rng.uniform(1.0, 4.0, size=(9, LAYERS, HEADS))  # B clearly has more heads above τ
    result = compare(_frame(a, "a"), _frame(b, "b"), labels=("A", "B"), tau=1.5)
    assert isinstance(result, Comparison)
    common = np.percentile(np.concatenate([a.ravel(), b.ravel()]), 95)
    assert result.common_threshold == pytest.approx(common)
    count = lambda v, t: [int(sum(x > t for x in e.ravel())) for e in v]  # noqa: E731
    for name, threshold in (("tau", 1.5), ("common", common)):
        ca, cb = count(a, threshold), count(b, threshold)
        column = "above_tau" if name == "tau" else "above_common"
        assert result.counts.loc[result.counts["dataset"] == "A", column].tolist() == ca
        assert result.counts.loc[result.counts["dataset"] == "B", column].tolist() == cb
        want = mannwhitneyu(ca, cb, alternative="two-sided")
        assert result.tests[name].u == pytest.approx(want.statistic)
        assert result.tests[name].p_value == pytest.approx(want.pvalue)
        assert result.tests[name].effect == pytest.approx(1 - 2 * want.statistic / (6 * 9))
    assert result.tests["tau"].effect > 0.8 and result.tests["tau"].p_value < 0.01
    stats = result.count_stats().set_index("dataset")
    assert stats.loc["B", "mean_above_tau"] > stats.loc["A", "mean_above_tau"]
    assert stats.loc["A", "median_above_tau"] == np.median(count(a, 1.5))
    rho = spearmanr(np.median(a, axis=0).ravel(), np.median(b, axis=0).ravel()).statistic
    assert result.rank_correlation == pytest.approx(rho)
    # Swapping the datasets flips the sign of the effect.
    swapped = compare(_frame(b, "b"), _frame(a, "a"), labels=("B", "A"), tau=1.5)
    assert swapped.tests["tau"].effect == pytest.approx(-result.tests["tau"].effect)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["counts"]["B"]["n"] == 9 and "second dataset" in data["effect_sign"]
    assert "Mann–Whitney" in result.to_markdown()


def test_compare_all_b_above_all_a_gives_effect_one() -> None:
    a = np.zeros((3, LAYERS, HEADS))
    b = np.zeros((4, LAYERS, HEADS))
    for i in range(3):
        a[i].flat[:i] = 2.0  # 0, 1, 2 heads above τ
    for i in range(4):
        b[i].flat[: 5 + i] = 2.0  # 5..8 heads above τ
    result = compare(_frame(a, "a"), _frame(b, "b"), tau=1.5)
    assert result.tests["tau"].u == 0.0
    assert result.tests["tau"].effect == pytest.approx(1.0)


def test_compare_rejects_different_models_and_labels() -> None:
    with pytest.raises(ValueError, match="different models"):
        compare(_frame(np.ones((2, 3, 4))), _frame(np.ones((2, 2, 4))))
    with pytest.raises(ValueError, match="distinct"):
        compare(_frame(np.ones((2, 3, 4))), _frame(np.ones((2, 3, 4))), labels=("x", "x"))


# -------------------------------------------------------------------------------- plots


def test_plots_return_figures_and_save_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    frame_a = _frame(rng.gamma(2.0, size=(5, LAYERS, HEADS)), "a")
    frame_b = _frame(rng.gamma(3.0, size=(4, LAYERS, HEADS)), "b")
    summary = summarize(frame_a)
    figures = {
        "dist": plot_head_distributions(frame_a, tau=1.5),
        "bands": plot_percentile_bands(summary),
        "heat": plot_median_heatmap(summary),
        "cmp": plot_comparison(compare(frame_a, frame_b)),
    }
    assert len(figures["cmp"].axes) == 3
    labels = [t.get_text() for t in figures["bands"].axes[0].get_xticklabels()]
    top = summary.percentiles.iloc[0]
    assert labels[0] == f"{int(top['layer'])}.{int(top['head'])}"
    for name, fig in figures.items():
        path = save_figure(fig, tmp_path / f"{name}.png")
        assert path.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="missing column 'upper'"):
        plot_head_distributions(frame_a.drop(columns="upper"))


# ----------------------------------------------------------------------------- imports


def test_lazy_imports_and_collect_is_the_function() -> None:
    assert callable(rcstat.heads.collect) and rcstat.heads.collect is collect
    assert collect.__module__ == "rcstat.heads.collection"
    code = (
        "import sys, rcstat.heads, rcstat.cli.heads; "
        "heavy = {'torch', 'transformers', 'matplotlib', 'scipy'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------- CLI


def _cli(console_file: io.StringIO, *argv: str) -> int:
    """``rcstat heads`` with its output in ``console_file``, 200 columns wide."""
    with (
        console_width(200),
        contextlib.redirect_stdout(console_file),
        contextlib.redirect_stderr(console_file),
    ):
        return cli.main(["heads", *argv])


def _check_summary_from_rows(out: Path, statistic: str, tau: float) -> None:
    """percentiles.csv, counts.csv and summary.json recomputed from the row file heads.csv by
    pandas' own quantiles: per head the percentiles and mean over examples, ranked by median
    (ties by layer and head); per example the heads above ``tau`` and above the pooled p95."""
    rows = pd.read_csv(out / "heads.csv")
    quantiles = {"min": 0, "p5": 0.05, "p25": 0.25, "p50": 0.5, "p75": 0.75, "p95": 0.95, "max": 1}
    by_head = rows.groupby(["layer", "head"])[statistic]
    want = pd.DataFrame({name: by_head.quantile(q) for name, q in quantiles.items()})
    want["mean"] = by_head.mean()
    want = want.reset_index().sort_values(["p50", "layer", "head"], ascending=[False, True, True])
    got = pd.read_csv(out / "percentiles.csv")
    assert got["rank"].tolist() == list(range(1, len(want) + 1))
    assert got[["layer", "head"]].values.tolist() == want[["layer", "head"]].values.tolist()
    for column in [*quantiles, "mean"]:
        np.testing.assert_allclose(got[column], want[column], rtol=1e-6, err_msg=column)  # float32
    p95 = rows[statistic].quantile(0.95)
    counts = pd.read_csv(out / "counts.csv").set_index("example")
    for example, part in rows.groupby("example"):
        assert counts.loc[example, "above_tau"] == int((part[statistic] > tau).sum())
        assert counts.loc[example, "above_p95"] == int((part[statistic] > p95).sum())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_examples"] == rows["example"].nunique() == len(counts)
    assert summary["p95"] == pytest.approx(p95, rel=1e-6)


def test_cli_collect_and_compare_write_all_files(model_dir: Path, tmp_path: Path) -> None:
    data = _write_jsonl(
        tmp_path / "mine.jsonl",
        [
            {
                "id": "a",
                "context": "The cat sat on the mat.",
                "question": "Where?",
                "answer": "On the mat.",
            },
            {"id": "b", "context": TOO_LONG, "question": "Long?", "answer": "Yes."},
            {"context": "Ice is cold.", "question": "Is ice hot?", "answer": "No."},
        ],
    )
    run_a, run_b, both = tmp_path / "A", tmp_path / "B", tmp_path / "cmp"
    printed = io.StringIO()
    common = ["--model", str(model_dir), "--max-new-tokens", "4"]
    assert (
        _cli(printed, "--dataset", "jsonl", "--data", str(data), "--out", str(run_a), *common) == 0
    )
    text = " ".join(printed.getvalue().split())
    assert "1 example(s) failed" in text and "ranking stability" in text and "top 10 heads" in text
    for name in ("heads.csv", "examples.csv", "summary.json", "summary.md", "percentiles.csv",
                 "counts.csv", "run.json"):  # fmt: skip
        assert (run_a / name).is_file(), name
    for name in ("distributions.png", "percentile_bands.png", "median_heatmap.png"):
        assert (run_a / name).read_bytes()[:8] == PNG_MAGIC, name
    summary = json.loads((run_a / "summary.json").read_text())
    assert summary["n_examples"] == 2 and len(summary["percentiles"]) == LAYERS * HEADS
    assert pd.read_csv(run_a / "percentiles.csv").shape[0] == LAYERS * HEADS
    _check_summary_from_rows(run_a, statistic="upper", tau=DEFAULT_TAU)
    # Resuming retries the failed example "b" unless --no-retry-failed (it fails again).
    log = (run_a / "examples.csv").read_bytes()
    again = ["--dataset", "jsonl", "--data", str(data), "--out", str(run_a), *common]
    assert _cli(io.StringIO(), *again, "--no-retry-failed") == 0
    assert (run_a / "examples.csv").read_bytes() == log
    assert _cli(io.StringIO(), *again) == 0
    assert _log(run_a)["id"].tolist() == ["a", "line-3", "b"]  # b's line replaced

    qmsum = _write_jsonl(tmp_path / "val.jsonl", [_qmsum_record()])
    assert _cli(io.StringIO(), "--dataset", "qmsum", "--data", str(qmsum), "--context", "relevant",
                "--out", str(run_b), *common) == 0  # fmt: skip
    assert read_heads(run_b)["example"].nunique() == 3  # 1 general + 2 specific queries
    _check_summary_from_rows(run_b, statistic="upper", tau=DEFAULT_TAU)

    printed = io.StringIO()
    assert _cli(printed, "--compare", str(run_a), str(run_b), "--labels", "mine,qmsum",
                "--out", str(both)) == 0  # fmt: skip
    assert "Mann–Whitney U" in printed.getvalue()
    for name in ("comparison.json", "comparison.md", "counts.csv"):
        assert (both / name).is_file(), name
    assert (both / "comparison.png").read_bytes()[:8] == PNG_MAGIC
    result = json.loads((both / "comparison.json").read_text())
    assert result["labels"] == ["mine", "qmsum"] and set(result["mann_whitney"]) == {
        "tau",
        "common",
    }
    assert pd.read_csv(both / "counts.csv")["dataset"].tolist() == ["mine"] * 2 + ["qmsum"] * 3


def test_cli_shards_and_rcstat_merge(model_dir: Path, tmp_path: Path) -> None:
    """Shards run one after the other (``--shard``): the first says where its part is, an
    incomplete run merges only with --partial (and says so), the last shard merges by itself,
    and ``rcstat merge`` rebuilds the same files."""
    records = [
        {
            "id": f"e{i}",
            "context": f"Cat {i} sat on the mat.",
            "question": "Where?",
            "answer": "On it.",
        }
        for i in range(5)
    ]
    data = _write_jsonl(tmp_path / "data.jsonl", records)
    common = ["--model", str(model_dir), "--dataset", "jsonl", "--data", str(data)]
    single, out = tmp_path / "one", tmp_path / "dp"
    assert _cli(io.StringIO(), *common, "--out", str(single)) == 0
    printed = io.StringIO()
    assert _cli(printed, *common, "--out", str(out), "--shard", "1/2") == 0
    assert "shard 1/2 (--shard): part done" in " ".join(printed.getvalue().split())
    assert not (out / "heads.csv").exists()
    merge = io.StringIO()
    with contextlib.redirect_stdout(merge), contextlib.redirect_stderr(merge):
        assert cli.main(["merge", str(out)]) == 2
        assert cli.main(["merge", str(out), "--partial"]) == 0
    text = " ".join(merge.getvalue().split())
    assert "shard 0/2: no part yet" in text and "partial merge: shard 0: no part" in text
    assert read_heads(out)["example"].unique().tolist() == ["e1", "e3"]
    printed = io.StringIO()
    assert _cli(printed, *common, "--out", str(out), "--shard", "0/2", "--tau", "2") == 0
    assert "results written to" in printed.getvalue()  # the last shard merged and summarised
    # it did 3 of the 5 examples: the count of the merged run says whose they are
    assert "5 examples analysed by the 2 shards (0 failed)" in " ".join(printed.getvalue().split())
    assert (out / "heads.csv").read_bytes() == (single / "heads.csv").read_bytes()
    summary = (out / "summary.json").read_bytes()
    assert json.loads(summary)["tau"] == 2
    (out / "summary.json").unlink()
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["merge", str(out)]) == 0
    assert (out / "summary.json").read_bytes() == summary  # the settings the shard recorded


def test_cli_squad_run_resumes(model_dir: Path, tmp_path: Path) -> None:
    squad = _write_json(tmp_path / "dev-v2.0.json", _squad_doc())
    out = tmp_path / "squad"
    args = ["--dataset", "squad", "--data", str(squad), "--model", str(model_dir),
            "--max-new-tokens", "4", "--out", str(out), "--n", "2"]  # fmt: skip
    assert _cli(io.StringIO(), *args) == 0
    before = (out / "heads.csv").read_bytes()
    assert _cli(io.StringIO(), *args[:-1], "3") == 0  # one more example
    assert (out / "heads.csv").read_bytes().startswith(before)
    assert json.loads((out / "summary.json").read_text())["n_examples"] == 3
    # The folder belongs to this dataset: another one is refused before the model loads.
    printed = io.StringIO()
    assert _cli(printed, "--dataset", "jsonl", "--data", str(squad), "--out", str(out)) == 2
    text = " ".join(printed.getvalue().split())
    assert 'dataset: "squad_v2" in the run, "jsonl" now' in text
    assert "choose another output folder" in text
    # So are another --max-new-tokens and other weights at the same path; nothing changes.
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    printed = io.StringIO()
    assert _cli(printed, *args[:7], "5", *args[8:]) == 2
    assert "max_new_tokens: 4 in the run, 5 now" in " ".join(printed.getvalue().split())
    other = tmp_path / "model"
    shutil.copytree(model_dir, other)
    printed = io.StringIO()
    swapped = [*args[:5], str(other), *args[6:]]
    assert _cli(printed, *swapped) == 2  # another path: the name differs
    assert "model.name" in " ".join(printed.getvalue().split())
    out2 = tmp_path / "squad2"
    assert _cli(io.StringIO(), *swapped[:-3], str(out2), "--n", "1") == 0
    changed = copy.deepcopy(tiny_model("llama"))
    with torch.no_grad():
        changed.model.norm.weight[0] += 1.0
    changed.save_pretrained(other, safe_serialization=True)  # new weights, same path
    printed = io.StringIO()
    assert _cli(printed, *swapped[:-3], str(out2), "--n", "1") == 2
    text = " ".join(printed.getvalue().split())
    assert "model.weights:" in text and "model.name" not in text
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files


def test_cli_interrupted_run_resumes_to_the_same_rows(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squad = _write_json(tmp_path / "dev-v2.0.json", _squad_doc())
    common = ["--dataset", "squad", "--data", str(squad), "--model", str(model_dir),
              "--max-new-tokens", "4", "--n", "3"]  # fmt: skip
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert _cli(io.StringIO(), *common, "--out", str(whole)) == 0
    real = collect_module.analyze
    calls: list[str] = []

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["question"])
        if len(calls) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second example
        return real(*args, **kwargs)

    monkeypatch.setattr(collect_module, "analyze", interrupted)
    printed = io.StringIO()
    assert _cli(printed, *common, "--out", str(cut)) == 130
    text = " ".join(printed.getvalue().splitlines()[-1].split())
    assert text.startswith("interrupted:") and "Traceback" not in text
    assert f"kept in {cut}" in text and "run the same command to resume" in text
    assert read_heads(cut)["example"].nunique() == 1 and len(_log(cut)) == 1
    assert not (cut / "summary.json").exists()
    monkeypatch.setattr(collect_module, "analyze", real)
    assert _cli(io.StringIO(), *common, "--out", str(cut)) == 0
    pd.testing.assert_frame_equal(read_heads(cut), read_heads(whole))
    assert _log(cut)["id"].tolist() == _log(whole)["id"].tolist()  # no duplicates
    assert (cut / "summary.md").read_text() == (whole / "summary.md").read_text()
    # A smaller --n resumes without work; the summary describes the whole folder, and says so.
    summary = (whole / "summary.md").read_text()
    printed = io.StringIO()
    assert _cli(printed, *common[:-1], "2", "--out", str(whole)) == 0
    text = " ".join(printed.getvalue().split())
    assert "the run folder holds 3 examples, more than --n 2 asks for" in text
    assert "3 examples, " in text and (whole / "summary.md").read_text() == summary


def test_cli_prints_plain_progress_lines_without_a_terminal(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    squad = _write_json(tmp_path / "dev-v2.0.json", _squad_doc())
    args = ["heads", "--dataset", "squad", "--data", str(squad), "--model", str(model_dir),
            "--max-new-tokens", "2", "--n", "2", "--out", str(tmp_path / "run")]  # fmt: skip
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert "heads: 0/2 example" in err and "heads: 2/2 example" in err and "\r" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "nope"], "unknown dataset 'nope'; choose one of squad_v2"),
        (["--dataset", "jsonl"], "--dataset jsonl needs --data FILE"),
        (["--compare", "{tmp}", "{tmp}"], "has no heads.csv"),
        (["--labels", "a,b"], "--labels applies to --compare only"),
        (
            ["--dataset", "squad_v2", "--context", "relevant"],
            "--context applies to --dataset qmsum",
        ),
        (["--compare", "{run}", "{run}", "--model", "x"], "--model do(es) not apply"),
        (["--compare", "{run}", "{run}"], "distinct --labels"),
        (["--dataset", "jsonl", "--data", "{bad}"], "line 2: invalid JSON"),
        (["--dataset", "jsonl", "--data", "{tmp}/missing.jsonl"], "no such file"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path: Path, argv: list[str], message: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _frame(np.ones((1, LAYERS, HEADS))).assign(prompt_len=1, gen_len=1).to_csv(
        run / "heads.csv", index=False
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"context": "c", "question": "q"}\n{oops\n')
    values = {"tmp": str(tmp_path), "run": str(run), "bad": str(bad)}
    printed = io.StringIO()
    code = _cli(printed, *(a.format(**values) for a in argv), "--out", str(tmp_path / "out"))
    assert code == 2
    text = " ".join(printed.getvalue().split())
    assert "error:" in text and message in text


def test_cli_refuses_a_part_of_other_settings_before_loading(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _write_jsonl(
        tmp_path / "d.jsonl", [{"context": "Cat on mat.", "question": "Where?", "answer": "Mat."}]
    )
    common = ["--model", str(model_dir), "--dataset", "jsonl", "--data", str(data)]
    out = tmp_path / "run"
    assert _cli(io.StringIO(), *common, "--out", str(out), "--shard", "1/2") == 0
    monkeypatch.setattr("rcstat.cli.heads.load_model_quietly", None)  # never reached
    printed = io.StringIO()
    argv = [*common, "--out", str(out), "--shard", "1/2", "--max-new-tokens", "5"]
    assert _cli(printed, *argv) == 2
    assert "max_new_tokens: 32 in the run, 5 now" in " ".join(printed.getvalue().split())


def test_the_library_call_is_the_command(model_dir: Path, tmp_path: Path) -> None:
    """``rcstat.evaluation.bench.heads.run(HeadsConfig)`` writes what ``rcstat heads`` writes,
    and the command prints the lines of its result."""
    from rcstat.evaluation.bench.heads import HeadsConfig
    from rcstat.evaluation.bench.heads import run as run_heads

    records = [{"id": f"e{i}", "context": f"Cat {i} sat.", "question": "Where?"} for i in range(2)]
    data = _write_jsonl(tmp_path / "d.jsonl", records)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['tua'\]"):
        HeadsConfig.from_dict({"tua": 2.0})
    config = HeadsConfig.from_dict(
        {"model": str(model_dir), "dataset": "jsonl", "data": str(data), "out": tmp_path / "lib",
         "max_new_tokens": 3}
    )  # fmt: skip
    result = run_heads(config)
    assert result.summary is not None and result.summary.n_examples == 2
    printed = io.StringIO()
    argv = ["--model", str(model_dir), "--dataset", "jsonl", "--data", str(data)]
    assert _cli(printed, *argv, "--max-new-tokens", "3", "--out", str(tmp_path / "cli")) == 0
    for name in ("heads.csv", "summary.json", "percentiles.csv", "counts.csv"):
        assert (tmp_path / "lib" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    summary = result.lines()[:6]  # the summary and the top heads (then timing and folder)
    assert summary[0].startswith("2 examples, 3 layers") and "top 10 heads" in summary[4]
    assert " ".join(" ".join(summary).split()) in " ".join(printed.getvalue().split())
