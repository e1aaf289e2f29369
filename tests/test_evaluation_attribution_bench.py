"""The attribution benchmark: its prompt layouts, length buckets and paired comparisons, its
config (one validator, naming the flag or the field), its job and its library call."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rcstat import cli
from rcstat.data import AttributionExample, load_dataset
from rcstat.data.examples import AttributedSpan
from rcstat.evaluation.attribution_scoring import render
from rcstat.evaluation.attribution_summary import by_length, comparison
from rcstat.evaluation.bench.attribution import AttributionConfig, AttributionJob, run
from rcstat.models import load_model
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
    found = comparison(units, [1, 20]).set_index("baseline")
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


def _flags(values: dict[str, Any]) -> SimpleNamespace:
    """``values`` as the command line's namespace gives them (``--k`` as its text)."""
    return SimpleNamespace(**{k: ",".join(v) if k == "ks" else v for k, v in values.items()})


@pytest.mark.parametrize(
    ("values", "flag", "field"),
    [
        ({"ks": []}, "--k needs at least one value", "ks needs at least one value"),
        ({"ks": ["1", "0"]}, "--k must be an integer in [1, ∞), got 0", "ks must be an integer"),
        ({"ks": ["all", "x"]}, "--k: 'x' is not an integer", "ks: 'x' is not an integer"),
        ({"n": 0}, "--n must be an integer in [1, ∞)", "n must be an integer in [1, ∞)"),
        ({"max_tokens": 1}, "--max-tokens must be an integer in [2", "max_tokens must be"),
        ({"layout": "xml"}, "--layout 'xml': choose one of numbered", "layout 'xml': choose"),
        ({"statistic": "lower"}, "--statistic 'lower': choose", "statistic 'lower': choose"),
        (
            {"statistic": "upper", "span_score": "sum"},
            "--span-score 'sum' adds up the expected RC of single keys",
            "span_score 'sum' adds up the expected RC of single keys",
        ),
        (
            {"fixed_heads_from": "nowhere"},
            "--fixed-heads-from nowhere: no bench attribution run there",
            "fixed_heads_from nowhere: no bench attribution run there",
        ),
        ({"dataset": "squad_v2"}, "bench attribution needs quotesum", "bench attribution needs"),
    ],
)
def test_one_validator_names_the_flag_on_the_command_line_and_the_field_in_python(
    values: dict[str, Any], flag: str, field: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(flag)):
        AttributionConfig.from_flags(_flags(values))
    with pytest.raises(ValueError, match="^" + re.escape(field)):
        AttributionConfig.from_dict(values)


def test_a_fixed_run_is_not_the_output_folder(tmp_path: Path) -> None:
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    (run_folder / "predictions.jsonl").write_text("")
    same = {"fixed_heads_from": str(run_folder), "out": str(run_folder)}
    with pytest.raises(ValueError, match=r"^--fixed-heads-from: give another run than --out$"):
        AttributionConfig.from_flags(_flags(same))
    with pytest.raises(ValueError, match=r"^fixed_heads_from: give another run than out$"):
        AttributionConfig.from_dict(same)


def test_flags_left_out_keep_the_config_defaults_which_help_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    defaults = AttributionConfig()
    assert AttributionConfig.from_flags(SimpleNamespace()) == AttributionConfig.from_dict({})
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "attribution", "--help"])
    assert exc.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for default in (",".join(defaults.ks), defaults.dataset, defaults.layout, str(defaults.out)):
        assert f"default: {default})" in shown, default
    ns = cli.build_parser().parse_args(["bench", "attribution"])
    assert (ns.ks, ns.dataset, ns.layout, ns.out) == (None, None, None, None)


def test_the_job_of_a_config_records_the_options_of_the_runs_before_it(
    model_dir: Path, tmp_path: Path
) -> None:
    """The manifest options of a job made from its config: the ``k`` values resolved against
    the tiny model's 3 × 4 heads, and the keys and values (in this order) that the runs made
    before the job took its config recorded, so that they resume."""
    data = _write_jsonl(tmp_path / "dev.jsonl", [_quotesum_record()])
    config = AttributionConfig.from_dict(
        {
            "data": str(data),
            "ks": ["5", "all", "1", "5", "40"],
            "span_score": "mean",
            "question_first": True,
            "max_tokens": 300,
            "layout": "plain",
            "out": str(tmp_path / "out"),
        }
    )
    model, tokenizer = load_model(model_dir)
    job = AttributionJob(config, model, tokenizer, load_dataset("quotesum", data))
    assert job.ks == [1, 5, 12]
    options = job.manifest_options()
    assert list(options.items()) == [
        ("dataset", "quotesum"),
        ("ks", [1, 5, 12]),
        ("statistic", "expected"),
        ("allow_special_tokens", False),
        ("layout", "plain"),
        ("data", str(data.resolve())),
        ("max_tokens", 300),
        ("question_first", True),
    ]
    assert [item.key for item in job.items()] == ["AMBIG_x_1_0"]
    default = AttributionJob(AttributionConfig(), model, tokenizer, [])
    assert default.manifest_options()["span_score"] == "sentence"
    assert "question_first" not in default.manifest_options()


def test_run_of_a_config_writes_the_folder_the_command_writes(
    model_dir: Path, tmp_path: Path
) -> None:
    records = [_quotesum_record(qid=f"AMBIG_x_{i}", unique_id=f"AMBIG_x_{i}_0") for i in (1, 2)]
    data = _write_jsonl(tmp_path / "dev.jsonl", records)
    library, command = tmp_path / "library", tmp_path / "command"
    config = AttributionConfig.from_dict(
        {"model": str(model_dir), "data": str(data), "ks": ["1", "3", "all"], "out": str(library)}
    )
    loaded: list[str | None] = []

    def loader(model: str | None, devices: Any) -> tuple[Any, Any]:
        loaded.append(model)
        return load_model(model)

    result = run(config, loader=loader)
    assert loaded == [str(model_dir)]
    args = ["bench", "attribution", "--model", str(model_dir), "--dataset", "quotesum"]
    assert cli.main([*args, "--data", str(data), "--k", "1,3,all", "--out", str(command)]) == 0
    for name in ("predictions.jsonl", "units.csv", "accuracy.csv", "comparison.csv", "table1.csv"):
        assert (library / name).read_bytes() == (command / name).read_bytes(), name
    manifest = json.loads((library / "run.json").read_text())
    assert manifest == json.loads((command / "run.json").read_text())
    assert manifest["kind"] == "bench attribution" and manifest["options"]["ks"] == [1, 3, 12]
    assert result.accuracy is not None and result.comparison is not None
    pd.testing.assert_frame_equal(result.accuracy, pd.read_csv(library / "accuracy.csv"))
    assert result.lines()[-1] == f"results written to {library}/"
    check_accuracy_from_units(library)
    # a second run resumes: no line is added or rewritten, the summaries are the same
    again = run(config, loader=loader)
    assert len(loaded) == 2 and again.accuracy is not None
    for name in ("predictions.jsonl", "units.csv"):
        assert (library / name).read_bytes() == (command / name).read_bytes(), name


def test_the_chance_line_takes_a_colour_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the accuracy-vs-k figure, no method's curve or level shares the chance line's
    colour (it once took the red of the fourth ranked method's curve)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from rcstat.evaluation import attribution_summary
    from rcstat.evaluation.attribution_scoring import ALL, FIXED, RANKED_METHODS

    methods = [*RANKED_METHODS, FIXED]
    rows = [{"method": m, "k": k, "accuracy": 0.5, "chance": 0.25} for m in methods for k in (1, 5)]
    rows += [{"method": m, "k": 9, "accuracy": 0.7, "chance": 0.25} for m in (ALL, "attention")]
    figures: list[Any] = []
    monkeypatch.setattr(attribution_summary, "save_figure", lambda fig, path: figures.append(fig))
    attribution_summary.plot_accuracy_vs_k(pd.DataFrame(rows), tmp_path / "a.png", title="t")
    (ax,) = figures[0].axes
    plt.close(figures[0])
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert set(colours) == {*methods, ALL, "attention", "chance"}
    chance = colours.pop("chance")
    assert to_rgb(chance) not in {to_rgb(c) for c in colours.values()}
