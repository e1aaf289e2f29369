"""``rcstat.commands.compress``: the library call answers as ``rcstat compress`` prints (the
command writes no folder), and its config refuses what the command refuses, naming the flag.
The runs need the rcstat[press] extra; the checks of the config do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rcstat import cli
from rcstat.commands.compress import CompressConfig, CompressResult, run
from rcstat.press.options import KNOBS, knob_choices, knob_default, knob_type
from rcstat.runs.devices import Devices
from tests._tiny_models import one_thread, tiny_loader

CONTEXT = "The cat sat on the warm mat near the door. " * 4
QUESTIONS = ["Where did the cat sit?", "What was warm?"]


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    yield from one_thread()


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.press
def test_run_gives_what_the_command_prints(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("kvpress")
    argv = ["compress", "--model", str(model_dir), "--context", CONTEXT]
    argv += ["--question", QUESTIONS[0], "--ratio", "0.5", "--max-new-tokens", "3"]
    assert cli.main(argv) == 0
    printed = _flat(capsys.readouterr().out)
    config = CompressConfig.from_dict(
        {
            "model": str(model_dir),
            "context": CONTEXT,
            "question": QUESTIONS[0],
            "ratio": 0.5,
            "max_new_tokens": 3,
        }
    )
    result = run(config)
    assert isinstance(result, CompressResult) and not result.batched
    (report,), (full,) = result.reports, result.fulls
    assert full is not None
    assert f"answer (compressed cache): {report.answer!r}" in printed
    assert f"answer (full cache) : {full.text!r}" in printed
    assert f"agreement with the full cache: ROUGE-L {full.agreement:.3f}" in printed
    assert f"global {report.ratio:.3f}" in printed
    assert result.agreements() == [full.agreement]


@pytest.mark.press
def test_a_batch_with_a_loader_answers_each_question_as_alone() -> None:
    pytest.importorskip("kvpress")
    from rcstat.press.answer import compress_and_answer
    from rcstat.press.rcstat_press import RCStatPress

    asked: list[str | None] = []

    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        asked.append(model)
        return tiny_loader(model, devices)

    config = CompressConfig(
        context=CONTEXT, questions=tuple(QUESTIONS), ratio=0.5, max_new_tokens=3, full=False
    )
    result = run(config, loader=loader)
    assert asked == [None] and result.batched and result.questions == QUESTIONS
    assert result.fulls == [None, None] and result.agreements() == [None, None]
    model, tokenizer = tiny_loader(None, Devices())
    for question, report in zip(QUESTIONS, result.reports, strict=True):
        alone = compress_and_answer(
            model,
            tokenizer,
            CONTEXT,
            question,
            RCStatPress(compression_ratio=0.5),
            max_new_tokens=3,
        )
        assert (report.answer, round(report.ratio, 6)) == (alone.answer, round(alone.ratio, 6))


def test_options_are_refused_before_the_model_loads() -> None:
    def loader(model: str | None, devices: Devices) -> tuple[Any, Any]:
        raise AssertionError("the model was loaded before the options were checked")

    with pytest.raises(ValueError, match="--ratio and --threshold"):
        run(CompressConfig(context="c", question="q", ratio=0.5, threshold=1.0), loader=loader)


def test_from_dict_keeps_the_defaults_and_refuses_an_unknown_field() -> None:
    config = CompressConfig.from_dict({"context": "c", "questions": ["a?", "b?"]})
    assert config.questions == ("a?", "b?") and config.question is None
    assert (config.window, config.knobs) == (8, {})  # every knob at the press's default
    assert (config.threshold, config.ratio, config.press_scope, config.full) == (
        None,
        None,
        "context",
        True,
    )
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['out'\]"):  # writes no folder
        CompressConfig.from_dict({"context": "c", "question": "q", "out": "runs/x"})


BASE = {"context": "c", "question": "q?"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**BASE, "ratio": 1.0}, "--ratio must be in [0, 1), got 1.0"),
        ({**BASE, "ratio": 0.5, "threshold": 1.0}, "--ratio and --threshold: give one of them"),
        ({**BASE, "threshold": -1}, "--threshold must be in [0, ∞), got -1.0"),
        ({**BASE, "window": 0}, "--window must be an integer in [1, ∞), got 0"),
        ({**BASE, "window": "question"}, "--window question needs --press-scope question"),
        ({**BASE, "knobs": {"budget": "pooled"}}, "--budget pooled needs --ratio"),
        (
            {**BASE, "knobs": {"budget": "global"}, "ratio": 0.5},
            "--budget must be one of layer, pooled, got 'global'",
        ),
        ({**BASE, "knobs": {"group": "min"}}, "--group must be one of max, mean, got 'min'"),
        (
            {**BASE, "knobs": {"score": "lower"}},
            "--score must be one of expected, upper, got 'lower'",
        ),
        ({**BASE, "press_scope": "answer"}, "--press-scope 'answer': choose one of context"),
        ({**BASE, "knobs": {"floor": 2}, "ratio": 0.5}, "--floor must be in [0, 1], got 2.0"),
        ({**BASE, "knobs": {"sinks": -1}}, "--sinks must be an integer in [0, ∞), got -1"),
        ({**BASE, "knobs": {"colour": 1}}, "--colour: RCStatPress has no such option"),
        ({**BASE, "max_new_tokens": 0}, "--max-new-tokens must be an integer"),
        ({"question": "q?"}, "compress needs --context (or --context-file) and --question"),
        ({**BASE, "questions": ["a?"]}, "give --question (one) or --questions-file (several)"),
        ({"context": "c", "questions": ["a?", " "]}, "--questions-file: every question"),
        (
            {"context": "c", "questions": ["a?"], "window": "question", "press_scope": "question"},
            "--window question makes each question its own window",
        ),
    ],
)
def test_from_dict_refuses_what_the_command_refuses(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        CompressConfig.from_dict(data)
    assert message in str(refused.value)


def test_the_command_line_builds_the_config_from_its_flags(tmp_path: Path) -> None:
    from rcstat.cli import compress

    path = tmp_path / "questions.txt"
    path.write_text("a?\n\nb?\n", encoding="utf-8")
    argv = ["compress", "--context", "c", "--questions-file", str(path), "--ratio", "0.25"]
    argv += ["--press-scope", "question", "--window", "4", "--sinks", "2", "--no-full"]
    args = compress.from_namespace(cli.build_parser().parse_args(argv))
    assert args.json is False
    assert args.config == CompressConfig(
        context="c",
        questions=("a?", "b?"),
        ratio=0.25,
        press_scope="question",
        window=4,
        knobs={"sinks": 2},
        full=False,
    )
    plain = compress.from_namespace(
        cli.build_parser().parse_args(["compress", "--context", "c", "--question", "q", "--json"])
    )
    assert plain.config == CompressConfig(context="c", question="q")  # the config's defaults
    assert plain.json is True


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["compress", "--help"])
    text = _flat(capsys.readouterr().out)
    assert "c of eq. 9, threshold mode (default: 1.0)" in text
    assert f"answer length limit (default: {CompressConfig.max_new_tokens})" in text
    assert "skip the full-cache answer used for comparison" in text


@pytest.mark.press
@pytest.mark.parametrize("name", KNOBS)
def test_every_press_knob_reaches_the_press_from_its_flag(name: str) -> None:
    """``rcstat compress --<knob> V`` exists for every knob of the press and builds the press
    with V (a knob added to RCStatOptions fails here until its flag exists)."""
    from rcstat.cli import compress

    kind = knob_type(name)
    value: object = {float: 0.35, int: 3}.get(kind)
    if kind is str:  # a named value that is not the target-ratio mode's default
        value = next(v for v in knob_choices(name) if v not in (knob_default(name), "mean"))
    argv = ["compress", "--context", "c", "--question", "q", "--ratio", "0.5"]
    config = compress.from_namespace(
        cli.build_parser().parse_args([*argv, f"--{name}", str(value)])
    ).config
    assert config.knobs == {name: value}
    assert getattr(config.press(), name) == value
