"""``rcstat ground-profile`` as a library call (:mod:`rcstat.commands.ground_profile`).

The oracle is the command line: for the same inputs, ``run(config)`` writes the same
``profile.json`` as ``rcstat ground-profile`` (byte for byte) and its lines are what it prints.
The config refuses what the command line refuses, naming the flag, before anything loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rcstat import cli
from rcstat.commands.ground_profile import (
    FILES,
    GroundProfileConfig,
    GroundProfileResult,
    run,
)
from rcstat.grounding import HeadProfile
from rcstat.runs.folder import OUTPUT_MARKER

#: Two articles whose sentences hold numbers and names to swap (SQuAD v2's upstream format).
ARTICLES = {
    "Bridge": (
        "The bridge was built in 1889 by 40 engineers from Spain. It crosses the river.",
        [("q1", "Who built the bridge?", "40 engineers from Spain")],
    ),
    "Capitals": (
        "Paris is the capital of France. Rome is the capital of Italy since 1871.",
        [("q2", "What is the capital of France?", "Paris"), ("q3", "Who won?", None)],
    ),
}


def _squad(path: Path) -> Path:
    data = []
    for title, (context, questions) in ARTICLES.items():
        qas = [
            {
                "id": qid,
                "question": question,
                "answers": []
                if answer is None
                else [{"text": answer, "answer_start": context.index(answer)}],
                "is_impossible": answer is None,
            }
            for qid, question, answer in questions
        ]
        data.append({"title": title, "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return path


def _refuse(*args: Any) -> Any:
    raise AssertionError("the model was loaded before the refusal")


def test_run_writes_the_folder_of_the_command(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, capsys
) -> None:
    data = _squad(tmp_path / "dev-v2.0.json")
    flags = ["--model", str(model_dir), "--data", str(data), "--max-new-tokens", "4"]
    assert cli.main(["ground-profile", *flags, "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out.splitlines()
    out = tmp_path / "library"
    config = GroundProfileConfig.from_dict(
        {"model": str(model_dir), "data": str(data), "max_new_tokens": 4, "out": str(out)}
    )
    result = run(config)
    assert result.out == out and {*FILES, OUTPUT_MARKER} == {p.name for p in out.iterdir()}
    assert {p.name for p in out.iterdir()} == {p.name for p in (tmp_path / "cli").iterdir()}
    cli_profile = (tmp_path / "cli" / "profile.json").read_bytes()
    assert (out / "profile.json").read_bytes() == cli_profile
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    assert HeadProfile.load(out / "profile.json").source["examples"] == 3
    cli_lines = [line.replace(str(tmp_path / "cli"), str(out)) for line in printed]
    assert result.lines() == cli_lines
    assert result.lines()[-1].startswith(f"profile written to {out}/profile.json")


def test_run_without_out_writes_nothing(model_dir, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    data = _squad(tmp_path / "dev-v2.0.json")
    monkeypatch.chdir(tmp_path)
    config = GroundProfileConfig(model=str(model_dir), data=str(data), max_new_tokens=4)
    result = run(config)
    assert isinstance(result, GroundProfileResult) and result.out is None
    assert [p.name for p in tmp_path.iterdir()] == ["dev-v2.0.json"]
    assert len(result.lines()) == 1 and "contextual heads" in result.lines()[0]


def test_the_folder_and_the_data_are_checked_before_the_model(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    data = _squad(tmp_path / "dev-v2.0.json")
    with pytest.raises(ValueError, match="not written by rcstat"):
        run(GroundProfileConfig(data=str(data), out=foreign), loader=_refuse)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"version": "v2.0", "data": []}), encoding="utf-8")
    with pytest.raises(ValueError, match="no examples in squad_v2"):
        run(GroundProfileConfig(data=str(empty)), loader=_refuse)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"colour": "red"}, r"unknown option\(s\) \['colour'\]"),
        ({"dataset": "faithbench"}, "--dataset must be one of squad_v2"),
        ({"dataset": "nope"}, "unknown dataset 'nope'"),
        ({"fraction": 0}, r"--fraction must be in \(0, 1\]"),
        ({"fraction": 1.5}, "--fraction"),
        ({"threshold_quantile": 1}, r"--threshold-quantile must be in \(0, 1\)"),
        ({"max_new_tokens": 0}, "--max-new-tokens must be an integer"),
        ({"n": 0}, "--n must be an integer"),
        ({"calibrate_on": ["nosuch"]}, "--calibrate-on: unknown dataset 'nosuch'"),
        ({"calibrate_on": "squad_v2:/no/such/file"}, "no such file or folder"),
    ],
)
def test_from_dict_refuses_naming_the_flag(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroundProfileConfig.from_dict(given)


def test_from_dict_takes_the_registry_names(tmp_path: Path) -> None:
    data = _squad(tmp_path / "more.json")
    config = GroundProfileConfig.from_dict(
        {"dataset": "SQuAD-v2", "calibrate_on": f"squad-v2:{data},2wiki", "n": 2}
    )
    assert config.dataset == "squad_v2" and config.n == 2
    assert config.calibrate_on == (f"squad_v2:{data}", "2wiki")
    assert config.calibration_sets() == [("squad_v2", str(data)), ("2wiki", None)]
