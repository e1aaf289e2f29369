"""``rcstat demo`` as a library call (:class:`rcstat.demo.DemoConfig`, :func:`rcstat.demo.run`).

The oracle is the command: for the same texts, ``run(config)`` writes the same folder as
``rcstat demo`` (its JSON and CSV files byte for byte). The tiny model answers gibberish; the
press is left out (as without the ``rcstat[press]`` extra) to keep these tests short.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rcstat.cli import demo as cli_demo
from rcstat.demo import SETTINGS, DemoConfig, DemoResult, DemoTexts, Setting, run
from rcstat.evaluation.bench.common import load
from rcstat.runs.devices import Devices

TEXTS = DemoTexts(
    question="When was the lighthouse automated?",
    answer="It was automated in 1962.",
    supporting="The lighthouse was built in 1871. It was automated in 1962 with a timer.",
    unrelated="Bread rises because of yeast. Bakers feed the culture every day.",
)
FIELDS = {"question": "q?", "answer": "a.", "supporting": "s.", "unrelated": "u."}
#: Every file is deterministic but the pages, which embed the figures.
SAME = ("summary.json", "attribution.json", "scores_supporting.csv", "scores_unrelated.json")


@pytest.fixture
def no_press(monkeypatch: pytest.MonkeyPatch) -> None:
    import rcstat.press.extra as extra

    monkeypatch.setattr(extra, "has_kvpress", lambda: False)


def _refuse(*args: Any) -> Any:
    raise AssertionError("the model was loaded before the refusal")


@pytest.mark.usefixtures("no_press")
def test_run_writes_the_folder_of_the_command(model_dir: Path, tmp_path: Path) -> None:
    assert cli_demo.run_contrast(str(model_dir), tmp_path / "cli", 1.5, texts=TEXTS) == 0
    loaded: list[str | None] = []

    def loader(model: str | None, devices: Devices) -> Any:
        loaded.append(model)
        return load(model, devices)

    out = tmp_path / "library"
    config = DemoConfig(model=str(model_dir), out=out, texts=TEXTS)
    result = run(config, loader=loader)
    assert loaded == [str(model_dir)] and result.out == out
    names = {p.name for p in out.iterdir()}
    assert names == {p.name for p in (tmp_path / "cli").iterdir()}
    assert {"report.html", "attribution.html", *SAME} <= names
    for name in SAME:
        assert (out / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert "<a href='attribution.html'>" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.usefixtures("no_press")
def test_run_without_out_writes_nothing(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    steps: list[str] = []

    def step(message: str) -> Any:
        from contextlib import nullcontext

        steps.append(message)
        return nullcontext()

    result = run(DemoConfig(model=str(model_dir), texts=TEXTS, max_new_tokens=2), step=step)
    assert isinstance(result, DemoResult) and result.out is None
    assert not any(tmp_path.iterdir())
    assert "analysing the supporting example…" in steps and "writing the report…" not in steps
    assert result.comparison.max_new_tokens == 2 and result.summary()["tau"] == 1.5


def test_the_folder_is_checked_before_the_model(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not written by rcstat"):
        run(DemoConfig(out=foreign), loader=_refuse)
    with pytest.raises(ValueError, match="--tau must be a finite number"):
        run(DemoConfig(tau=float("nan")), loader=_refuse)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"colour": "red"}, r"unknown option\(s\) \['colour'\]"),
        ({"tau": float("inf")}, "--tau must be a finite number"),
        ({"tau": "high"}, "--tau must be a number"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer"),
        ({"texts": {"question": "q?"}}, r"texts without \['answer', 'supporting', 'unrel"),
        ({"texts": {**FIELDS, "answer": " "}}, "texts.answer must be a text that is not empty"),
        ({"texts": {**FIELDS, "questoin": "q?"}}, r"unknown texts \['questoin'\]"),
        ({"settings": [{"name": "x", "threshold": -1}]}, "the threshold of setting 'x'"),
        ({"settings": [{"name": "x", "c": 1}]}, r"unknown settings \['c'\]"),
        ({"devices": {"dtype": "float8"}}, "--dtype 'float8'"),
    ],
)
def test_from_dict_refuses_naming_the_flag(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DemoConfig.from_dict(given)


def test_from_dict_builds_the_texts_and_the_settings() -> None:
    config = DemoConfig.from_dict(
        {
            "tau": 2,
            "texts": FIELDS,
            "settings": [{"name": "mild", "threshold": 0.2}],
            "out": "runs/d",
        }
    )
    assert config.texts == DemoTexts(**FIELDS) and config.tau == 2.0
    assert config.settings == (Setting("mild", 0.2),) and config.out == Path("runs/d")
    assert DemoConfig.from_dict({}).settings == SETTINGS  # the package's by default
