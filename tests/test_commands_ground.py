"""``rcstat ground`` (one pair) as a library call (:mod:`rcstat.commands.ground`).

The oracle is the command line: for the same inputs, ``run(config)`` writes the same folder as
``rcstat ground`` (JSON and CSV byte for byte) and its ``document()`` is the ``--json`` object.
The config refuses what the command line refuses, naming the flag, before the model loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat import cli
from rcstat.commands.ground import (
    FILES,
    GroundConfig,
    GroundResult,
    NotSavedError,
    run,
)
from rcstat.evaluation.bench.common import load
from rcstat.grounding import HeadProfile
from rcstat.grounding.options import GroundingOptions
from rcstat.runs.devices import Devices

CONTEXT = (
    "The river flows through the city. The bridge was built in 1889 by a team of engineers. "
    "Paris is the capital of France."
)
QUESTION = "Who built the bridge?"
RESPONSE = "The bridge was built in 1889. It crosses the river in Paris."


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A head profile of the tiny model's 3 layers x 4 heads."""
    values = np.random.default_rng(0).uniform(0.2, 0.9, size=(3, 4))
    copy = np.random.default_rng(10).random(values.shape)
    path = tmp_path_factory.mktemp("profile") / "profile.json"
    return HeadProfile(
        "tiny", values, threshold=0.05, quantile=0.1, fraction=0.5, copy_values=copy
    ).save(path)


def _refuse(*args: Any) -> Any:
    raise AssertionError("the model was loaded before the refusal")


def _config(model_dir: Path, profile: Path, out: Path | None, **options: Any) -> GroundConfig:
    return GroundConfig.from_dict(
        {
            "context": CONTEXT,
            "response": RESPONSE,
            "question": QUESTION,
            "model": str(model_dir),
            "out": None if out is None else str(out),
            "options": {"profile": str(profile), "top_k": 5, **options},
        }
    )


def test_run_writes_the_folder_of_the_command(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, capsys
) -> None:
    argv = ["ground", "--model", str(model_dir), "--profile", str(profile), "--top-k", "5"]
    texts = ["--context", CONTEXT, "--response", RESPONSE, "--question", QUESTION]
    code = cli.main([*argv, *texts, "--quantile", "0.3", "--json", "--out", str(tmp_path / "cli")])
    printed = json.loads(capsys.readouterr().out)
    loaded: list[str | None] = []

    def loader(model: str | None, devices: Devices) -> Any:
        loaded.append(model)
        return load(model, devices)

    out = tmp_path / "library"
    result = run(_config(model_dir, profile, out, quantile=0.3), loader=loader)
    assert loaded == [str(model_dir)] and result.out == out
    assert code == {"supported": 0, "unsupported": 1}.get(result.verdict, 3)
    assert {p.name for p in out.iterdir()} == {p.name for p in (tmp_path / "cli").iterdir()}
    assert set(FILES) <= {p.name for p in out.iterdir()}
    for name in ("ground.json", "ground.csv", "ground_tokens.csv"):
        assert (out / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert (out / "ground.html").read_text(encoding="utf-8").lower().startswith("<!doctype html")
    assert result.document() == {**printed, "out": str(out)}  # the --json object


def test_run_without_out_writes_nothing(model_dir, profile, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    result = run(_config(model_dir, profile, None))
    assert isinstance(result, GroundResult) and result.out is None
    assert result.document()["out"] is None and result.grounding.response == RESPONSE
    assert not any(tmp_path.iterdir())
    written = result.write(tmp_path / "later")  # the same folder, written afterwards
    assert result.out == written and set(FILES) <= {p.name for p in written.iterdir()}


def test_a_folder_that_cannot_be_written_keeps_the_verdict(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch
) -> None:
    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device", "/somewhere/ground.html")

    monkeypatch.setattr("rcstat.report.grounding_html.save_grounding_html", full)
    out = tmp_path / "out"
    with pytest.raises(NotSavedError, match=r"cannot write --out .*: No space left") as caught:
        run(_config(model_dir, profile, out))
    result = caught.value.result
    assert result.out is None and result.document()["out"] is None
    assert result.verdict in ("supported", "unsupported", "unverified")
    assert not out.exists()


def test_notes_go_to_say_and_the_folder_is_checked_before_the_model(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    config = GroundConfig(context=CONTEXT, response=RESPONSE, out=foreign)
    with pytest.raises(ValueError, match="not written by rcstat"):
        run(config, loader=_refuse)
    said: list[str] = []
    japanese = GroundConfig(
        context="東京タワーは1958年に建てられました。", response="It was built."
    )
    with pytest.raises(AssertionError, match="model was loaded"):
        run(japanese, loader=_refuse, say=said.append)  # the warning comes before loading
    assert len(said) == 1 and said[0].startswith("warning: the context is mostly not in the Latin")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"colour": "red"}, r"unknown option\(s\) \['colour'\]"),
        ({"options": {"quantlie": 0.3}}, r"unknown options \['quantlie'\]"),
        ({"devices": {"device": "tpu"}}, "--device 'tpu' is not a device"),
        ({"response": None}, "ground needs --context"),
        ({"context": "  "}, "--context is empty or whitespace only"),
        ({"question": "\n"}, "--question is empty or whitespace only"),
        ({"context": 3}, "--context: expected a text, got int"),
        ({"response": "?!"}, "the response has no word"),
        ({"options": {"quantile": 0}}, r"--quantile must be in \(0, 1\)"),
        ({"options": {"threshold": 2}}, r"--threshold must be in \[0, 1\]"),
        ({"options": {"top_k": -1}}, r"--top-k must be an integer in \[0, "),
        ({"options": {"max_chars": 10}}, "more than --max-chars 10 allows"),
        ({"options": {"profile": "missing.json"}}, "--profile missing.json: no such file"),
    ],
)
def test_from_dict_refuses_naming_the_flag(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GroundConfig.from_dict({"context": CONTEXT, "response": RESPONSE, **given})


def test_from_dict_builds_the_options_and_the_devices() -> None:
    config = GroundConfig.from_dict(
        {
            "context": CONTEXT,
            "response": RESPONSE,
            "devices": {"device": "cpu"},
            "options": {"quantile": 0.4, "detector": False, "language": "de"},
            "out": "runs/x",
        }
    )
    assert config.options == GroundingOptions(quantile=0.4, detector=False, language="de")
    assert config.devices == Devices(device="cpu") and config.out == Path("runs/x")
    assert config.texts() == {"context": CONTEXT, "response": RESPONSE, "question": None}
