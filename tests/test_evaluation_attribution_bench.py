"""The attribution benchmark's prompt layouts, length buckets and paired comparisons."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rcstat import cli
from rcstat.data import AttributionExample
from rcstat.data.examples import AttributedSpan
from rcstat.evaluation.attribution_bench import AttributionBench, by_length, render
from tests.test_cli_attribute import check_accuracy_from_units, check_predictions_against_attributor
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
    for out, layout in ((numbered, "numbered"), (plain, "plain")):
        check_accuracy_from_units(out)
        check_predictions_against_attributor(model_dir, data, out, layout)
    # the layout is part of the run: resuming with another layout is refused
    assert (
        cli.main([*args, "--out", str(numbered), "--max-tokens", "120", "--layout", "plain"]) == 2
    )


def test_bench_attribution_fixed_heads_span_score_and_question_first(
    model_dir: Path, tmp_path: Path
) -> None:
    records = [_quotesum_record(qid=f"AMBIG_x_{i}", unique_id=f"AMBIG_x_{i}_0") for i in (1, 2)]
    data = _write_jsonl(tmp_path / "dev.jsonl", records)
    args = ["bench", "attribution", "--model", str(model_dir), "--dataset", "quotesum"]
    args += ["--data", str(data), "--k", "1,3,all"]
    source, fixed = tmp_path / "source", tmp_path / "fixed"
    assert cli.main([*args, "--out", str(source), "--n", "1"]) == 0
    lines = pd.read_json(source / "predictions.jsonl", lines=True)
    ranking = np.array(lines["head_scores"].iloc[0])
    assert ranking.shape == (3, 4) and not np.isnan(ranking).any()
    assert cli.main([*args, "--out", str(fixed), "--fixed-heads-from", str(source)]) == 0
    units = pd.read_csv(fixed / "units.csv")
    first = units[units["example"] == units["example"].iloc[0]]

    def picks(method: str, k: int) -> list[int]:
        part = first[(first["method"] == method) & (first["k"] == k)]
        return part.sort_values("unit")["predicted"].tolist()

    # one source example: its own ranking, so its fixed set is its top-k
    for k in (1, 3):
        assert picks("top_fixed", k) == picks("top", k)
    assert picks("top_fixed", 12) == picks("all", 12)  # every head
    check_accuracy_from_units(fixed)
    assert "top_fixed" in set(pd.read_csv(fixed / "comparison.csv")["method"])
    assert any("one set for the dataset" in r for r in pd.read_csv(fixed / "table1.csv")["row"])
    manifest = json.loads((fixed / "run.json").read_text())
    assert manifest["options"]["fixed_heads"]["from"] == str(source)

    # span score and question order are options of the run, recorded and compared on resume
    sentence = tmp_path / "sentence"
    run = [*args, "--out", str(sentence), "--span-score", "sentence", "--question-first"]
    assert cli.main(run) == 0
    options = json.loads((sentence / "run.json").read_text())["options"]
    assert options["span_score"] == "sentence" and options["question_first"] is True
    # the default is recorded too (runs made before the option were the paper's mean)
    assert json.loads((source / "run.json").read_text())["options"]["span_score"] == "sentence"
    again = [*args, "--out", str(sentence), "--question-first", "--span-score", "mean"]
    assert cli.main(again) == 2  # another score


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--span-score", "sum", "--statistic", "upper"], "--statistic expected"),
        (["--fixed-heads-from", "nowhere"], "no bench attribution run there"),
    ],
)
def test_bench_attribution_bad_options_are_refused_before_work(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["bench", "attribution", "--model", "/no/model", "--out", str(tmp_path / "o")]
    assert cli.main([*args, *extra]) == 2
    assert message in " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert not (tmp_path / "o").exists()
