"""``rcstat ground-train`` (and :mod:`rcstat.evaluation.ground_train`): every option error
exits 2 before the model loads, and one run on the tiny Llama saved to disk (the
``model_dir`` fixture) over labelled pairs written here writes a detector that ``rcstat
ground --detector`` uses, its out-of-fold report and predictions (recomputed here from the
rows), and a samples cache that a rerun reads instead of measuring again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rcstat import cli
from rcstat.evaluation.ground_train import GroundTrainConfig, labelled_responses
from rcstat.grounding import Grounding, HeadProfile
from rcstat.grounding.detector import Detector
from rcstat.grounding.lexicon import Lexicon
from rcstat.metrics.ranking import auroc
from rcstat.metrics.spans import char_prf, example_prf
from tests._tiny_models import one_thread

_PEOPLE = [
    "Anna",
    "Boris",
    "Carl",
    "Dora",
    "Emil",
    "Fay",
    "Gus",
    "Hana",
    "Ivo",
    "Jana",
    "Karl",
    "Lea",
]
_THINGS = ["bridge", "tower", "mill", "school"]


def _pairs(count: int) -> list[dict[str, Any]]:
    """``count`` groups: one context, a faithful response and one with the year changed (its
    span labelled)."""
    rows = []
    for k in range(count):
        person, thing = _PEOPLE[k % len(_PEOPLE)], _THINGS[k % len(_THINGS)]
        year, other = 1800 + 7 * k, 1900 + 5 * k
        context = f"The {thing} was built in {year} by {person}. It is old and red."
        right = f"{person} built it in {year}."
        wrong = f"{person} built it in {other}."
        start = wrong.index(str(other))
        rows.append(
            {"id": f"r{k}", "context": context, "response": right, "label": 0, "group": f"g{k}"}
        )
        rows.append(
            {
                "id": f"w{k}",
                "context": context,
                "response": wrong,
                "label": 1,
                "spans": [[start, start + 4]],
                "group": f"g{k}",
            }
        )
    return rows


@pytest.fixture(scope="module", autouse=True)
def _single_thread() -> Any:
    yield from one_thread()


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _no_model(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model was loaded before the options were checked")


def _train(model_dir: Path, out: Path, *extra: str) -> int:
    return cli.main(["ground-train", "--model", str(model_dir), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pairs")
    rows = _pairs(48)
    # one pair too long for the tiny model's window (256 tokens): an error row, not a failure
    rows.append(
        {"id": "long", "context": "The bridge was built. " * 90, "response": "It was.", "label": 0}
    )
    return _write_jsonl(folder / "pairs.jsonl", rows)


# ------------------------------------------------------------------------- option errors


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--dataset", "quotesum"],
            "--dataset quotesum: choose from ragtruth, faithbench, summedits, jsonl",
        ),
        (["--dataset", "nosuch"], "--dataset: unknown dataset 'nosuch'"),
        (["--dataset", "jsonl"], "--dataset jsonl needs a file: jsonl:PATH"),
        (
            ["--dataset", "jsonl:missing.jsonl"],
            "--dataset jsonl:missing.jsonl: no such file or folder",
        ),
        (["--dataset", "swaps"], "--dataset: swaps are built with --swaps-from"),
        (["--dataset", ","], "--dataset: name at least one labelled dataset"),
        (
            ["--swaps-from", "squad_v2:missing.json"],
            "--swaps-from squad_v2:missing.json: no such file",
        ),
        (["--weight", "ragtruth"], "--weight ragtruth: expected NAME=W"),
        (["--weight", "ragtruth=abc"], "--weight ragtruth=abc: 'abc' is not a number"),
        (["--weight", "faithbench=2"], "--weight faithbench: not a dataset of this run"),
        (["--weight", "swaps=2"], "--weight swaps: not a dataset of this run"),
        (["--weight", "ragtruth=0"], "--weight ragtruth"),
        (["--folds", "1"], "--folds"),
        (["--folds", "21"], "--folds"),
        (["--seed", "-1"], "--seed must be an integer in [0, 4294967295], got -1"),
        (["--max-false-alarms", "0"], "--max-false-alarms"),
        (["--max-false-alarms", "1"], "--max-false-alarms"),
        (["--max-copy-false-alarms", "1.5"], "--max-copy-false-alarms"),
        (["--head-penalty", "0.5"], "--head-penalty must be"),
        (["--n", "0"], "--n"),
    ],
)
def test_option_errors_exit_2_before_the_model_loads(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_train.load_model_quietly", _no_model)
    out = tmp_path / "out"
    assert _train(model_dir, out, *extra) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and message in printed, printed
    assert not out.exists()


def test_bad_folders_and_data_exit_2_before_the_model_loads(  # type: ignore[no-untyped-def]
    model_dir, pairs_file, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_train.load_model_quietly", _no_model)
    data = ["--dataset", f"jsonl:{pairs_file}"]
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert _train(model_dir, a_file, *data) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("not rcstat's")
    assert _train(model_dir, foreign, *data) == 2
    assert "was not written by rcstat" in " ".join(capsys.readouterr().err.split())
    bad = _write_jsonl(
        tmp_path / "bad.jsonl", [{"id": "a", "context": "c", "response": "r", "label": 2}]
    )
    assert _train(model_dir, tmp_path / "out", "--dataset", f"jsonl:{bad}") == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "line 1: key 'label' must be 0 or 1" in printed
    assert not (tmp_path / "out").exists()


def test_config_from_dict(pairs_file) -> None:  # type: ignore[no-untyped-def]
    config = GroundTrainConfig.from_dict(
        {"datasets": ["RAGTruth", ("jsonl", pairs_file)], "weights": {"jsonl": 2}, "out": "o"}
    )
    assert config.datasets == (("ragtruth", None), ("jsonl", str(pairs_file)))
    assert config.weights == (("jsonl", 2.0),) and config.out == Path("o")
    options = config.fit_options()
    assert options.folds == 5 and options.dataset_weights == (("jsonl", 2.0),)
    assert options.seed == 0
    assert GroundTrainConfig.from_dict({"seed": 3, "folds": 4}).fit_options().seed == 3
    with pytest.raises(ValueError, match="unknown option"):
        GroundTrainConfig.from_dict({"epochs": 3})


def test_seed_and_head_penalty_flags_reach_the_fit(pairs_file) -> None:  # type: ignore[no-untyped-def]
    from rcstat.cli.ground_train import from_namespace
    from rcstat.grounding.training import FitOptions

    parser = cli.build_parser()
    data = ["ground-train", "--dataset", f"jsonl:{pairs_file}"]
    plain = from_namespace(parser.parse_args(data)).fit_options()
    assert plain.seed == 0 and plain.head_penalty == FitOptions().head_penalty == 1.0
    ns = parser.parse_args([*data, "--seed", "7", "--head-penalty", "10"])
    assert from_namespace(ns).fit_options().seed == 7
    assert from_namespace(ns).fit_options().head_penalty == 10.0


def test_labelled_responses_of_pairs(pairs_file) -> None:  # type: ignore[no-untyped-def]
    items = labelled_responses("jsonl", str(pairs_file), 4)
    assert [i.id for i in items] == ["jsonl:r0", "jsonl:w0", "jsonl:r1", "jsonl:w1"]
    assert [i.label for i in items] == [False, True, False, True]
    assert items[1].spans == ((17, 21),) and items[1].response[17:21] == "1900"
    assert all(i.spans_known and i.question is None and i.dataset == "jsonl" for i in items)
    assert items[0].group == items[1].group != items[2].group


# ---------------------------------------------------------------------------- end to end


def _profile(path: Path) -> Path:
    rng = np.random.default_rng(0)
    return HeadProfile(
        "tiny",
        rng.uniform(0.2, 0.9, size=(3, 4)),
        threshold=0.05,
        quantile=0.1,
        fraction=0.5,
        copy_values=rng.random((3, 4)),
    ).save(path)


def test_train_on_labelled_pairs_end_to_end(  # type: ignore[no-untyped-def]
    model_dir, pairs_file, tmp_path, monkeypatch, capsys
) -> None:
    out = tmp_path / "train"
    args = ["--dataset", f"jsonl:{pairs_file}", "--folds", "2"]
    assert _train(model_dir, out, *args) == 0
    printed = capsys.readouterr().out
    assert f"detector written to {out}/detector.json" in " ".join(printed.split())
    assert {"detector.json", "report.json", "predictions.csv", "errors.csv", "samples"} <= {
        p.name for p in out.iterdir()
    }
    detector = Detector.load(out / "detector.json")
    assert detector.layers == 3 and detector.model == Path(model_dir).name
    assert detector.meta["samples"] == 96 and detector.meta["datasets"] == ["jsonl"]
    assert detector.meta["trained_on"] == [f"jsonl:{pairs_file}"]
    errors = pd.read_csv(out / "errors.csv")
    assert errors["id"].tolist() == ["jsonl:long"]
    assert "window" in errors["error"].iloc[0]
    assert len(list((out / "samples").glob("*.npz"))) == 96  # the long pair is not cached
    # the report is the metrics of the out-of-fold rows
    report = json.loads((out / "report.json").read_text())
    assert report["responses"] == 96 and report["errors"] == 1
    rows = pd.read_csv(out / "predictions.csv")
    assert len(rows) == 96 and set(rows["dataset"]) == {"jsonl"}
    assert rows["label"].sum() == 48
    assert set(report["out_of_fold"]) == {"all", "jsonl"}
    row = report["out_of_fold"]["all"]
    y = rows["label"].to_numpy(dtype=bool)
    flagged = rows["flagged"].to_numpy(dtype=bool)
    assert row["responses"] == 96 and row["unsupported"] == 48
    assert row["auroc"] == pytest.approx(auroc(rows["probability"].to_numpy(), y))
    example = example_prf(flagged, y)
    assert row["example_f1"] == pytest.approx(example.f1, nan_ok=True)
    assert row["false_alarms"] == pytest.approx(flagged[~y].mean())
    spans = [json.loads(v) for v in rows["spans"]]
    gold = [json.loads(v) for v in rows["labelled_spans"]]
    assert all(bool(s) == f for s, f in zip(spans, flagged, strict=True))
    found = char_prf([[tuple(x) for x in s] for s in spans], [[tuple(x) for x in g] for g in gold])
    for key, value in (("span_precision", found.precision), ("span_recall", found.recall)):
        assert row[key] == pytest.approx(value, nan_ok=True)
    assert detector.meta["out_of_fold"] == report["out_of_fold"]
    # rcstat ground uses it: the detector's verdict, token threshold and spans
    profile = _profile(tmp_path / "profile.json")
    ground_out = tmp_path / "ground"
    status = cli.main(
        [
            "ground",
            "--model",
            str(model_dir),
            "--profile",
            str(profile),
            "--detector",
            str(out / "detector.json"),
            "--top-k",
            "5",
            "--context",
            "The bridge was built in 1889 by Anna. It is old and red.",
            "--response",
            "Anna built it in 1925.",
            "--out",
            str(ground_out),
        ]
    )
    result = Grounding.load(ground_out / "ground.json")
    assert status == (1 if result.verdict == "unsupported" else 0)
    kind = detector.kind_of(Lexicon(result.context).words_of(result.response))[0]
    assert result.token_threshold == pytest.approx(1 - detector.span_threshold_of(kind))
    assert result.method["detector"]["model"] == detector.model
    assert bool(result.spans) == (result.verdict == "unsupported")
    # a rerun reads every sample from the cache: nothing is measured again, same detector
    before = (out / "detector.json").read_text()

    def measure_only_the_long_pair(measurer: Any, items: list[Any]) -> Any:
        assert [i.id for i in items] == ["jsonl:long"], "a cached sample was measured again"
        return [], [("jsonl:long", "ValueError: too long")]

    monkeypatch.setattr("rcstat.grounding.training.measure_samples", measure_only_the_long_pair)
    assert _train(model_dir, out, *args) == 0
    assert (out / "detector.json").read_text() == before
    assert pd.read_csv(out / "predictions.csv").equals(rows)
