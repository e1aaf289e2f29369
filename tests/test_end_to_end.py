"""End to end on the real default model (SmolLM2-135M-Instruct, float32 on the CPU).

Every test is ``slow``: it needs the embedded model, converted and cached by
:func:`rcstat.models.load_model` (~20 s the first time, ~3 s afterwards).
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from rcstat import cli
from rcstat.analysis import HeadAnalysis, analyze
from rcstat.segments import segment_chat
from tests._reference import algorithm1, naive_expected_rc
from tests._tiny_models import reference_scores

pytestmark = pytest.mark.slow

LAYERS, HEADS, WINDOW = 30, 9, 8192  # SmolLM2-135M: 30 layers × 9 query heads (3 KV heads)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CONTEXT = (
    "The Millbrook library opened in 1903 in a former grain store beside the canal. "
    "Its first librarian, Agnes Ward, bought the founding collection of 412 books."
)
QUESTION = "Who was the first librarian of the Millbrook library?"
ANSWER = "The first librarian was Agnes Ward."


@pytest.fixture(scope="module")
def smollm() -> tuple[Any, Any]:
    """The default model and tokenizer, loaded once for the module."""
    from rcstat.models import load_model

    return load_model()


@pytest.fixture(scope="module")
def result(smollm: tuple[Any, Any]) -> HeadAnalysis:
    model, tokenizer = smollm
    return analyze(model, tokenizer, context=CONTEXT, question=QUESTION, answer=ANSWER)


def test_analyze_shape_and_invariants(result: HeadAnalysis) -> None:
    from rcstat.defaults import DEFAULT_MODEL_HEADS

    assert result.shape == (LAYERS, HEADS)
    assert LAYERS * HEADS == DEFAULT_MODEL_HEADS  # what --top-k is checked against unloaded
    assert result.generation_text == ANSWER
    assert result.prompt_len > 40 and 5 <= result.gen_len <= 12
    for name in ("expected", "upper", "lower", "normalized"):
        values = result.values(name)  # type: ignore[arg-type]
        assert values.shape == (LAYERS, HEADS), name
        assert np.isfinite(values).all(), name
    assert (result.lower >= -1e-9).all()
    assert (result.lower <= result.expected + 1e-9).all()
    assert (result.expected <= result.upper + 1e-9).all()
    assert ((result.normalized >= 0) & (result.normalized <= 1)).all()
    # A trained model's heads differ: the statistics are not all equal.
    assert result.expected.std() > 0.1 * result.expected.mean()


@pytest.mark.parametrize("layer,head", [(0, 0), (12, 3), (29, 8)])
def test_heads_match_an_independent_oracle(
    smollm: tuple[Any, Any], result: HeadAnalysis, layer: int, head: int
) -> None:
    model, tokenizer = smollm
    example = segment_chat(tokenizer, CONTEXT, QUESTION, ANSWER)
    m, g = example.prompt_len, example.gen_len
    assert (m, g) == (result.prompt_len, result.gen_len)
    # q_proj/k_proj + apply_rotary_pos_emb recomputed from each attention module's inputs.
    block = reference_scores(model, example.input_ids)[layer][0, head, m:].numpy()  # [g, m + g]
    x = block[:, :m].ravel()  # X(p, g): every generation query against every prompt key
    y = np.concatenate([block[j, m : m + j + 1] for j in range(g)])  # Y(g, g), causal
    expected = naive_expected_rc(x, y)
    assert result.expected[layer, head] == pytest.approx(expected, rel=1e-4)
    assert result.upper[layer, head] == pytest.approx(algorithm1(x, y, "upper"), rel=1e-4)
    assert result.lower[layer, head] == pytest.approx(algorithm1(x, y, "lower"), rel=1e-4, abs=1e-6)
    normalized = expected / (expected + naive_expected_rc(y, x))
    assert result.normalized[layer, head] == pytest.approx(normalized, rel=1e-4)


def test_generation_mode(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    generated = analyze(model, tokenizer, context=CONTEXT, question=QUESTION, max_new_tokens=12)
    assert generated.shape == (LAYERS, HEADS)
    assert 1 <= generated.gen_len <= 12
    assert generated.generation_text.strip()
    assert np.isfinite(generated.expected).all()
    # The generation is the model's own greedy continuation of the chat prompt.
    prompt = segment_chat(tokenizer, CONTEXT, QUESTION).input_ids
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
    want = tokenizer.decode(out[0, prompt.shape[1] :], skip_special_tokens=True)
    assert generated.generation_text.strip() == want.strip()


def _table_rows(printed: str) -> dict[str, list[str]]:
    """Rows of the rich table(s) printed: ``{first cell: other cells}``."""
    rows = {}
    for line in printed.splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if len(cells) > 1:
            rows[cells[0]] = cells[1:]
    return rows


def test_demo_writes_a_self_contained_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert cli.main(["demo", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".rcstat-output.json",
        "attribution.html",
        "attribution.json",
        "report.html",
        "scores_supporting.csv",
        "scores_supporting.json",
        "scores_unrelated.csv",
        "scores_unrelated.json",
        "summary.json",
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]  # no staging folder left

    report = (out / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*['"]?\s*(https?:)?//""", report)
    images = re.findall(r"<img [^>]*src='data:image/png;base64,([A-Za-z0-9+/=]+)'", report)
    # sorted RC curves + (upper, normalized) × (supporting − unrelated, 2 contexts)
    assert len(images) == 7
    assert "<a href='attribution.html'>" in report
    assert len(re.findall(r"<img ", report)) == len(images)
    assert all(len(data) > 10_000 for data in images)

    for name in ("supporting", "unrelated"):
        frame = pd.read_csv(out / f"scores_{name}.csv")
        assert list(frame.columns) == ["layer", "head", "expected", "upper", "lower", "normalized"]
        assert len(frame) == LAYERS * HEADS

    summary = json.loads((out / "summary.json").read_text())
    assert summary["tau"] == 1.5
    supporting = pd.read_csv(out / "scores_supporting.csv")
    unrelated = pd.read_csv(out / "scores_unrelated.csv")
    label = "heads with upper bound A > 1.5"
    assert summary["rows"][label] == {
        "supporting": int((supporting["upper"] > 1.5).sum()),
        "unrelated": int((unrelated["upper"] > 1.5).sum()),
    }
    # The counts printed by the CLI are those of summary.json.
    printed_text = capsys.readouterr().out
    printed = _table_rows(printed_text)
    for row, values in summary["rows"].items():
        assert printed[row] == [f"{values['supporting']:g}", f"{values['unrelated']:g}"], row
    # The paper's contrast (§5.1): the supporting context is used more. On this small model
    # almost every head has A > 1.5 either way (269 vs 267 when written), so compare the
    # scale-free count and the medians, where the gap is wide (23 vs 7 heads; 3.9 vs 3.1).
    rows = summary["rows"]
    assert rows["heads with normalized RC > 0.5"]["supporting"] > (
        2 * rows["heads with normalized RC > 0.5"]["unrelated"]
    )
    assert rows["median expected"]["supporting"] > rows["median expected"]["unrelated"]
    # Attribution step: the answer's source sentence is in the supporting context.
    attribution = json.loads((out / "attribution.json").read_text())
    (unit,) = attribution["units"]
    assert attribution["spans"][unit["attributed"]]["text"].startswith("In 1962 the light")
    assert 'data-method="mean attention"' in (out / "attribution.html").read_text()
    # Compression: the faithful setting answers exactly as the full cache (the context says
    # 1962); the strong one is shown with its ROUGE-L and, when it differs, a warning.
    from rcstat.press.extra import has_kvpress

    compression = summary["compression"]
    full = compression["full"]
    assert full["finished"] and "1962" in full["answer"]
    assert html.escape(full["answer"]) in report
    if not has_kvpress():  # the core environment: the demo says how to add the press
        assert compression["settings"] == [] and "rcstat[press]" in compression["missing_extra"]
        pytest.skip("compressed answers need the rcstat[press] extra (kvpress)")
    faithful, strong = compression["settings"]
    assert (faithful["name"], strong["name"]) == ("faithful", "strong")
    assert faithful["answer"] == full["answer"] and faithful["same_as_full"]
    assert faithful["rougeL_vs_full"] == 1.0 and 0.15 < faithful["ratio"] < 0.35
    assert strong["ratio"] > faithful["ratio"] + 0.15
    warnings = re.findall(r"<p class='warning' role='alert'>([^<]*)</p>", report)
    assert len(warnings) == (0 if strong["same_as_full"] else 1)
    printed_flat = " ".join(printed_text.split())
    assert f"ROUGE-L vs full {strong['rougeL_vs_full']:.2f}" in printed_flat
    assert ("WARNING: strong" in printed_flat) != strong["same_as_full"]


def test_analyze_cli_plots_a_head(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["analyze", "--context", CONTEXT, "--question", QUESTION, "--answer", ANSWER]
    assert cli.main([*argv, "--head", "12.3", "--out", str(out)]) == 0
    data = (out / "head_12_3.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000
    frame = pd.read_csv(out / "scores.csv")
    assert len(frame) == LAYERS * HEADS


def test_too_long_answer_fails_fast(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    answer = "word " * (WINDOW + 500)
    calls = []
    hook = model.register_forward_pre_hook(lambda *args: calls.append(1))
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=str(WINDOW)):
            analyze(model, tokenizer, context=CONTEXT, question=QUESTION, answer=answer)
    finally:
        hook.remove()
    assert time.perf_counter() - start < 10.0
    assert calls == []  # refused before any forward pass


def test_attribution_finds_the_source_chunk_of_each_sentence(smollm: tuple[Any, Any]) -> None:
    from rcstat.attribution import Attributor

    chunks = [
        "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
        "Mount Everest is the highest mountain on Earth, at 8,849 metres.",
        "The Great Wall of China is more than 21,000 kilometres long.",
    ]
    answer = "Mount Everest is 8,849 metres high. The Eiffel Tower was finished in 1889."
    result = Attributor(*smollm).attribute(chunks, "How high is Mount Everest?", answer)
    assert result.attributed == [1, 0]
    np.testing.assert_allclose(result.scores.sum(axis=1), 1.0)
    assert result.per_head.shape == (LAYERS, HEADS, 2, 3)
    assert len(result.heads) == 20 and len(set(result.heads)) == 20


def test_heads_on_the_squad_slice(smollm: tuple[Any, Any], tmp_path: Path) -> None:
    from rcstat.data import find_shared_data, load_dataset

    if find_shared_data() is None:
        pytest.skip("shared/data (the dataset slices) not available")
    out = tmp_path / "heads"
    assert cli.main(["heads", "--dataset", "squad_v2", "--n", "3", "--out", str(out)]) == 0
    frame = pd.read_csv(out / "heads.csv")
    assert len(frame) == 3 * LAYERS * HEADS and frame["example"].nunique() == 3
    for name in ("distributions", "percentile_bands", "median_heatmap"):
        assert (out / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
    # the table holds exactly what analyze gives for the same example (context = prompt)
    first = load_dataset("squad_v2", limit=1)[0]
    want = analyze(
        *smollm,
        context=first.context,
        question=first.question,
        answer=first.answers[0] if first.answers else None,
        question_placement="generation",
        max_new_tokens=32,
    )
    got = frame[frame["example"] == first.id].sort_values(["layer", "head"])
    np.testing.assert_allclose(got["upper"].to_numpy(), want.upper.ravel(), rtol=1e-5)
    np.testing.assert_allclose(got["expected"].to_numpy(), want.expected.ravel(), rtol=1e-5)
