"""``rcstat.commands.analyze``: the library call writes the folder ``rcstat analyze`` writes, and
its config refuses what the command refuses, naming the flag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat import cli
from rcstat.analysis import analyze
from rcstat.commands.analyze import AnalyzeConfig, AnalyzeResult, run
from rcstat.runs.devices import Devices
from rcstat.runs.folder import OUTPUT_MARKER
from tests._tiny_models import one_thread, tiny_loader, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CONTEXT = "The cat sat on the warm mat near the door. The dog slept in the garden."
QUESTION = "Where did the cat sit?"
ANSWER = "On the warm mat."
LAYERS, HEADS = 3, 4  # tests/_tiny_models.py


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    yield from one_thread()


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_run_writes_the_folder_the_command_writes(model_dir: Path, tmp_path: Path) -> None:
    by_cli, by_library = tmp_path / "cli", tmp_path / "library"
    argv = ["analyze", "--model", str(model_dir), "--context", CONTEXT, "--question", QUESTION]
    argv += ["--answer", ANSWER, "--head", "1.2", "--tau", "4", "--out", str(by_cli)]
    assert cli.main(argv) == 0
    config = AnalyzeConfig.from_dict(
        {
            "model": str(model_dir),
            "context": CONTEXT,
            "question": QUESTION,
            "answer": ANSWER,
            "heads": [[1, 2]],
            "tau": 4,
            "out": str(by_library),
        }
    )
    result = run(config)
    assert isinstance(result, AnalyzeResult)
    want, got = _files(by_cli), _files(by_library)
    assert sorted(got) == [
        OUTPUT_MARKER,
        "head_1_2.png",
        "heatmap.png",
        "scores.csv",
        "scores.json",
    ]
    assert sorted(got) == sorted(want)
    for name in want:  # byte for byte, the figures too (same data, same backend)
        assert got[name] == want[name], name
    assert got["heatmap.png"].startswith(b"\x89PNG") and len(got["heatmap.png"]) > 5_000
    assert result.analysis.generation_text == ANSWER


def test_run_with_a_loader_and_no_folder_returns_what_the_command_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    asked: list[tuple[str | None, Devices]] = []

    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        asked.append((model, devices))
        return tiny_loader(model, devices)

    config = AnalyzeConfig(context=CONTEXT, question=QUESTION, answer=ANSWER, top=3, tau=2.0)
    result = run(config, loader=loader)
    assert asked == [(None, Devices())]
    assert not any(tmp_path.iterdir())  # no out: nothing written
    want = analyze(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        context=CONTEXT,
        question=QUESTION,
        answer=ANSWER,
    )
    np.testing.assert_array_equal(result.analysis.expected, want.expected)
    upper, expected = want.count_above(2.0, "upper"), want.count_above(2.0, "expected")
    assert result.title() == (
        f"top 3 of {LAYERS * HEADS} heads by expected RC — A > 2.0: {upper} heads, "
        f"E > 2.0: {expected} heads"
    )
    assert result.columns() == ("layer", "head", "expected", "upper", "lower", "normalized")
    top = want.top(3)
    assert [row[:3] for row in result.rows()] == [
        (str(r.layer), str(r.head), f"{r.expected:.3f}") for r in top.itertuples()
    ]
    result.write(tmp_path / "later")  # the same folder, written afterwards
    assert json.loads((tmp_path / "later" / "scores.json").read_text())["gen_len"] == want.gen_len


def test_the_folder_is_checked_before_the_model_loads(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        raise AssertionError("the model was loaded before the folder was checked")

    with pytest.raises(ValueError, match="not written by rcstat"):
        run(AnalyzeConfig(prompt="Once upon a time", out=out), loader=loader)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_head_the_model_lacks_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    config = AnalyzeConfig(prompt="Once upon a time", heads=((3, 0),), out=tmp_path / "run")
    with pytest.raises(ValueError, match=r"--head 3\.0 does not exist: the model has 3 layers"):
        run(config, loader=tiny_loader)
    assert not any(tmp_path.iterdir())


def test_from_dict_reads_paths_devices_and_keeps_the_defaults() -> None:
    config = AnalyzeConfig.from_dict(
        {"prompt": "Once", "out": "runs/x", "devices": {"device": "cpu", "dtype": "float32"}}
    )
    assert config.out == Path("runs/x")
    assert config.devices == Devices(device="cpu", dtype="float32")
    assert (config.tau, config.top, config.question_placement) == (1.5, 10, "prompt")
    assert config.raw and config.inputs() == {"prompt": "Once", "generation": None}


def test_from_dict_refuses_an_unknown_field_naming_it() -> None:
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\]"):
        AnalyzeConfig.from_dict({"prompt": "Once", "colour": "red"})


RAW = {"prompt": "Once upon a time"}
CHAT = {"context": "c", "question": "q"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**RAW, "tau": float("nan")}, "--tau must be a finite number"),
        ({**RAW, "top": 0}, "--top must be an integer in [1, ∞), got 0"),
        ({**RAW, "max_new_tokens": -2}, "--max-new-tokens must be an integer"),
        ({**RAW, "heads": [[-1, 0]]}, "--head -1.0: layer and head are >= 0"),
        ({**RAW, "heads": [[1]]}, "--head [1]: expected a (layer, head) pair"),
        ({**CHAT, "question_placement": "middle"}, "--question-placement 'middle'"),
        ({"prompt": " "}, "--prompt: is empty or whitespace only"),
        ({**CHAT, **RAW}, "(--context, --question) or raw-mode inputs (--prompt), not both"),
        ({"generation": "g"}, "raw mode needs --prompt"),
        ({"context": "c"}, "give --context and --question (chat mode)"),
        ({**RAW, "scaled": "yes"}, "--scaled: expected True or False"),
        ({**RAW, "devices": {"device": "tpu"}}, "--device 'tpu' is not a device"),
    ],
)
def test_from_dict_refuses_what_the_command_refuses(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        AnalyzeConfig.from_dict(data)
    assert message in str(refused.value)


def test_help_shows_the_configs_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["analyze", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"threshold for head counts, >= 0 (default: {AnalyzeConfig.tau})" in text
    assert f"rows of the top-heads table (default: {AnalyzeConfig.top})" in text
    assert "starts the generation (default: prompt)" in text
    assert f"length of a generated answer (default: {AnalyzeConfig.max_new_tokens})" in text
    ns = cli.build_parser().parse_args(["analyze", "--prompt", "p"])
    assert (ns.tau, ns.top, ns.question_placement) == (None, None, None)  # the config's
