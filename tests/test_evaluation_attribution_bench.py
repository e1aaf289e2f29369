"""The attribution benchmark's prompt layouts, length buckets and paired comparisons."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rcstat import cli
from rcstat.data import AttributionExample
from rcstat.data.examples import AttributedSpan
from rcstat.evaluation.attribution_bench import AttributionBench, by_length, render
from tests.test_data import _quotesum_record, _write_jsonl

CHUNKS = ("In 1990 Red won the final.", "In 2000 Blue won the cup.", "Nothing here.")


def _example(titles: tuple[str, ...] = ("Final", "", "Other")) -> AttributionExample:
    unit = AttributedSpan(0, 3, 1)
    return AttributionExample(
        "x", "Who won?", CHUNKS, "Red", (unit,), "quotesum", {"titles": titles}
    )


def test_numbered_layout_spans_are_whole_entries() -> None:
    text, spans = render(_example(), "numbered")
    assert isinstance(text, str) and spans is not None
    entries = [text[a:b] for a, b in spans]
    assert entries == [f"[1] Final: {CHUNKS[0]}", f"[2] {CHUNKS[1]}", f"[3] Other: {CHUNKS[2]}"]
    assert text == "\n\n".join(entries)  # nothing outside the entries but the separators
    no_titles = _example(titles=())
    text, spans = render(no_titles, "numbered")
    assert text.startswith("[1] In 1990") and len(spans or []) == 3


def test_numbered_text_layout_is_the_same_prompt_with_the_chunk_texts_as_spans() -> None:
    text, spans = render(_example(), "numbered-text")
    assert text == render(_example(), "numbered")[0]
    assert [text[a:b] for a, b in spans or []] == list(CHUNKS)


def test_plain_layout_is_the_chunks_and_unknown_layouts_are_refused() -> None:
    assert render(_example(), "plain") == (list(CHUNKS), None)
    with pytest.raises(ValueError, match="unknown layout 'xml'"):
        render(_example(), "xml")


def _units(rows: list[tuple[str, str, int, bool, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["example", "method", "k", "correct", "prompt_tokens"])


def test_by_length_buckets_and_comparison_by_hand() -> None:
    rows = []  # example a: 2 units, 900 tokens; b: 1 unit, 3000 tokens
    for method, k, correct in (
        ("top", 20, (True, True, False)),
        ("attention", 12, (True, False, True)),
    ):
        rows += [("a", method, k, correct[0], 900), ("a", method, k, correct[1], 900)]
        rows += [("b", method, k, correct[2], 3000)]
    units = _units(rows)
    table = by_length(units).set_index(["method", "bucket"])
    assert table.loc[("top", "0-1000"), "accuracy"] == 1.0
    assert table.loc[("top", ">=2500"), "accuracy"] == 0.0
    assert table.loc[("attention", "0-1000"), "units"] == 2
    bench = AttributionBench(Path("unused"), "quotesum", "m", [1, 20], table_k=20)
    found = bench.comparison(units).set_index("baseline")
    # per example: a 100 vs 50 (2 units), b 0 vs 100 (1 unit): (2·50 − 100) / 3 = 0
    assert found.loc["attention", "difference"] == pytest.approx(0.0)
    assert found.loc["attention", "wins"] == 1 and found.loc["attention", "losses"] == 1
    assert found.loc["attention", "k"] == 20 and found.loc["attention", "examples"] == 2


def test_bench_attribution_layouts_and_max_tokens(model_dir: Path, tmp_path: Path) -> None:
    records = [_quotesum_record(qid=f"AMBIG_x_{i}", unique_id=f"AMBIG_x_{i}_0") for i in (1, 2)]
    long = _quotesum_record(qid="AMBIG_x_3", unique_id="AMBIG_x_3_0")
    long["source1"] = "In 1990 Red won the final. " + "The crowd cheered. " * 8
    data = _write_jsonl(tmp_path / "dev.jsonl", [*records, long])
    args = ["bench", "attribution", "--model", str(model_dir), "--dataset", "quotesum"]
    args += ["--data", str(data), "--k", "1,5,all"]
    numbered, plain = tmp_path / "numbered", tmp_path / "plain"
    assert cli.main([*args, "--out", str(numbered), "--max-tokens", "120"]) == 0
    assert cli.main([*args, "--out", str(plain), "--layout", "plain"]) == 0
    lines = pd.read_json(numbered / "predictions.jsonl", lines=True)
    assert len(lines) == 2 and (lines["prompt_tokens"] <= 120).all()  # the long one skipped
    assert pd.read_json(plain / "predictions.jsonl", lines=True)["prompt_tokens"].max() > 120
    comparison = pd.read_csv(numbered / "comparison.csv")
    assert set(comparison["baseline"]) == {"attention", "all"}
    assert set(comparison["method"]) == {"top", "top_post_softmax"}
    assert {"low", "high", "win_share"} <= set(comparison.columns)
    assert set(pd.read_csv(numbered / "accuracy_by_length.csv")["bucket"]) == {"0-1000"}
    # the layout is part of the run: resuming with another layout is refused
    assert (
        cli.main([*args, "--out", str(numbered), "--max-tokens", "120", "--layout", "plain"]) == 2
    )
