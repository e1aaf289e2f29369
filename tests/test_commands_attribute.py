"""``rcstat.commands.attribute``: the library call writes the folder ``rcstat attribute``
writes, and its config refuses what the command refuses, naming the flag."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat import cli
from rcstat.attribution import Attribution, Attributor
from rcstat.commands.attribute import AttributeConfig, AttributeResult, run
from rcstat.runs.devices import Devices
from rcstat.runs.folder import OUTPUT_MARKER
from tests._tiny_models import one_thread, tiny_loader, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CHUNKS = ["The cat sat on the warm mat near the door.", "The dog slept in the garden all day."]
QUESTION = "Where did the dog sleep?"
ANSWER = "The dog slept in the garden. The cat sat on the mat."
FILES = ["attribution.csv", "attribution.html", "attribution.json", "attribution.npz"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    yield from one_thread()


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_run_writes_the_folder_the_command_writes(model_dir: Path, tmp_path: Path) -> None:
    by_cli, by_library = tmp_path / "cli", tmp_path / "library"
    chunks = tmp_path / "chunks.json"
    chunks.write_text(json.dumps(CHUNKS), encoding="utf-8")
    argv = ["attribute", "--model", str(model_dir), "--chunks-file", str(chunks)]
    argv += ["--question", QUESTION, "--answer", ANSWER, "--top-k", "3", "--out", str(by_cli)]
    assert cli.main(argv) == 0
    config = AttributeConfig.from_dict(
        {
            "model": str(model_dir),
            "context": CHUNKS,
            "question": QUESTION,
            "answer": ANSWER,
            "top_k": 3,
            "out": str(by_library),
        }
    )
    result = run(config)
    assert isinstance(result, AttributeResult)
    want, got = _files(by_cli), _files(by_library)
    assert sorted(got) == sorted(want) == sorted([OUTPUT_MARKER, *FILES])
    for name in (OUTPUT_MARKER, "attribution.csv", "attribution.json", "attribution.html"):
        assert got[name] == want[name], name  # byte for byte
    saved = [Attribution.load(folder / "attribution.npz") for folder in (by_cli, by_library)]
    np.testing.assert_array_equal(saved[0].scores, saved[1].scores)
    assert result.attribution.method == "top-3 RC heads, best sentence"


def test_run_with_a_loader_and_no_folder_gives_the_attributors_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    asked: list[str | None] = []

    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        asked.append(model)
        return tiny_loader(model, devices)

    config = AttributeConfig(
        model="any",
        context=CHUNKS,
        question=QUESTION,
        answer=ANSWER,
        top_k=2,
        span_score="mean",
        question_first=True,
    )
    result = run(config, loader=loader)
    assert asked == ["any"] and not any(tmp_path.iterdir())
    direct = Attributor(
        tiny_model("llama"), make_tiny_tokenizer(), top_k=2, span_score="mean", question_first=True
    ).attribute(CHUNKS, QUESTION, ANSWER)
    np.testing.assert_array_equal(result.attribution.scores, direct.scores)
    assert result.attribution.attributed == direct.attributed
    result.write(tmp_path / "later")
    assert sorted(p.name for p in (tmp_path / "later").iterdir()) == [OUTPUT_MARKER, *FILES]


def test_the_folder_is_checked_before_the_model_loads(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / ".rcstat-output.json").write_text(json.dumps({"command": "analyze", "files": []}))

    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        raise AssertionError("the model was loaded before the folder was checked")

    config = AttributeConfig(context="c.", question="q?", out=out)
    with pytest.raises(ValueError, match="holds the output of `rcstat analyze`"):
        run(config, loader=loader)


def test_a_top_k_beyond_the_models_heads_is_refused_before_writing(tmp_path: Path) -> None:
    config = AttributeConfig(context=CHUNKS, question=QUESTION, answer=ANSWER, out=tmp_path / "o")
    with pytest.raises(ValueError, match="--top-k 20: the model has 12 heads"):  # the default
        run(config, loader=tiny_loader)
    assert not any(tmp_path.iterdir())


def test_from_dict_keeps_the_defaults_and_refuses_an_unknown_field() -> None:
    config = AttributeConfig.from_dict({"context": "c.", "question": "q?", "out": "o"})
    assert (config.top_k, config.ranking, config.statistic, config.language) == (
        20,
        "top",
        "expected",
        "en",
    )
    assert config.out == Path("o") and config.span_score is None
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['k'\]"):
        AttributeConfig.from_dict({"context": "c.", "question": "q?", "k": 3})


BASE = {"context": "c.", "question": "q?"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**BASE, "top_k": 0}, "--top-k must be an integer in [1, ∞), got 0"),
        ({**BASE, "ranking": "best"}, "--ranking 'best': choose one of top, bottom, all"),
        ({**BASE, "statistic": "lower"}, "--statistic 'lower': choose one of expected, upper"),
        ({**BASE, "granularity": "word"}, "--granularity 'word': choose one of chunk"),
        ({**BASE, "span_score": "sum", "statistic": "upper"}, "--span-score"),
        ({**BASE, "span_score": "median"}, "--span-score"),
        ({**BASE, "language": "xx"}, "--language 'xx' is not a language code"),
        ({**BASE, "max_new_tokens": 0}, "--max-new-tokens must be an integer"),
        ({**BASE, "answer": "  "}, "--answer is empty or whitespace only"),
        ({**BASE, "context": ["a.", 3]}, "--chunks-file: expected a list of strings"),
        ({**BASE, "context": " \n"}, "--context is empty or whitespace only"),
        ({**BASE, "question": "\t"}, "--question is empty or whitespace only"),
        ({**BASE, "context": []}, "--chunks-file: the context has no chunk"),
        ({**BASE, "context": ["a.", "b.", " "]}, "--chunks-file: chunk 2 is empty"),
        ({**BASE, "granularity": "chunk"}, "--granularity chunk needs the context as chunks"),
        ({"question": "q?"}, "attribute needs a context (--context, --context-file or"),
        ({"context": "c."}, "and --question"),
        ({**BASE, "question_first": "yes"}, "--question-first: expected True or False"),
    ],
)
def test_from_dict_refuses_what_the_command_refuses(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        AttributeConfig.from_dict(data)
    assert message in str(refused.value)


def test_help_shows_the_configs_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["attribute", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"number of heads (default: {AttributeConfig.top_k})" in text
    assert f"how heads are chosen (default: {AttributeConfig.ranking})" in text
    ns = cli.build_parser().parse_args(["attribute", "--context", "c", "--question", "q"])
    assert (ns.top_k, ns.ranking) == (None, None)  # the config holds the defaults
