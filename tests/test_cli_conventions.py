"""CLI conventions every command keeps: results on standard output, rcstat's own ``error:`` and
``interrupted:`` lines on standard error (one line each, never wrapped), documented exit codes,
and the refusals that must happen before any model is loaded, naming the flag."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from rcstat import cli
from rcstat.checks import check_language
from rcstat.cli import EXIT_CODES, build_parser
from rcstat.cli._common import console
from rcstat.cli.model_option import config_heads
from rcstat.cli.options import join_dash_values
from tests._console import console_width

LONG = "word " * 60  # a context far wider than 80 columns


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make loading a model fail the test: refusals must come before it."""
    import rcstat.models

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(rcstat.models, "load_model", refuse)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


REFUSALS = [
    (["attribute", "--context", "c.", "--question", "q?", "--language", "english"], "--language"),
    (["attribute", "--context", "c.", "--question", "q?", "--language", "xx"], "--language"),
    (["ground", "--context", "c.", "--response", "r.", "--language", "fr_XX_"], "--language"),
    (["ground", "--context", "c.", "--response", "r.", "--threshold", "-1"], "in [0, 1]"),
    (["ground", "--context", "c.", "--response", "r.", "--threshold", "1e308"], "in [0, 1]"),
    (
        ["compress", "--context", "c", "--question", "q", "--ratio", "0.5", "--threshold", "1"],
        "--ratio and --threshold",
    ),
    (["analyze", "--prompt", "p", "--device-map", "auto"], "--device-map auto: no GPU"),
    (["bench", "kv", "--shard", "-1/2"], "--shard '-1/2'"),
]


@pytest.mark.parametrize(("argv", "message"), REFUSALS)
def test_refusals_come_first_on_stderr_naming_the_flag(
    argv: list[str],
    message: str,
    no_loading: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rcstat.runs import devices as devices_module

    monkeypatch.setattr(devices_module, "visible_gpus", lambda: 0)
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, argv)
    assert code == 2
    assert out == ""  # standard output holds results only
    assert err.startswith("error:") and message in err
    assert len(err.splitlines()) == 1  # one line, whatever the width
    assert not any(tmp_path.iterdir())  # nothing written


USAGE_ERRORS = [
    (
        ["ground", "--treshold", "0.3"],
        "rcstat ground: unrecognized arguments: --treshold 0.3 "
        "(did you mean --threshold?); see rcstat ground --help",
    ),
    (
        ["ground", "--bogus=3", "x"],
        "rcstat ground: unrecognized arguments: --bogus=3 x; see rcstat ground --help",
    ),
    (
        ["bench", "kv", "--nn", "3"],
        "rcstat bench kv: unrecognized arguments: --nn 3 "
        "(did you mean --n?); see rcstat bench kv --help",
    ),
    (
        ["ground", "--threshold"],
        "rcstat ground: argument --threshold: expected one argument; see rcstat ground --help",
    ),
    (["frobnicate"], "rcstat: argument command: invalid choice: 'frobnicate'"),
    ([], "rcstat: the following arguments are required: command; see rcstat --help"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_usage_errors_are_one_line_naming_the_command(
    argv: list[str], message: str, no_loading: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse's own errors too: one ``error:`` line naming the (sub-)command and where its
    options are listed, no usage block; an unknown option of a sub-command is refused by that
    sub-command, with the nearest option name when one is close."""
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    captured = capsys.readouterr()
    assert exited.value.code == 2 and captured.out == ""
    assert captured.err.startswith(f"error: {message}")
    assert len(captured.err.splitlines()) == 1


@pytest.mark.parametrize("command", ["attribute", "ground"])
def test_top_k_beyond_the_heads_is_refused_before_loading(
    command: str,
    model_dir: Path,
    no_loading: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    heads = config_heads(str(model_dir))
    assert heads is not None and heads > 1
    text = ["--response", "r."] if command == "ground" else ["--question", "q?"]
    argv = [command, "--model", str(model_dir), "--context", "c.", *text]
    code, out, err = _run(capsys, [*argv, "--top-k", str(heads + 1), "--out", str(tmp_path / "o")])
    assert code == 2 and out == ""
    assert err.startswith("error: --top-k") and f"has {heads} heads" in err


def test_a_long_error_stays_on_one_line(
    no_loading: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / ("a-very-long-folder-name-" * 6) / "ctx.txt"
    code, out, err = _run(capsys, ["analyze", "--prompt-file", str(missing)])
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and len(err) > 100
    assert err.startswith("error: cannot read --prompt-file")


def test_an_error_with_newlines_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcstat.cli import analyze

    def fail(args: Any) -> int:
        raise ValueError("the first part\n  and [b]the second[/b]")

    monkeypatch.setattr(analyze, "run", fail)
    code, out, err = _run(capsys, ["analyze", "--prompt", "p"])
    assert code == 2 and out == ""
    assert err == "error: the first part and [b]the second[/b]\n"  # markup shown as written


def test_interrupted_goes_to_stderr_with_status_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rcstat.cli import analyze

    def interrupt(args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(analyze, "run", interrupt)
    code, out, err = _run(capsys, ["analyze", "--prompt", LONG])
    assert code == 130 and out == ""
    assert err == "interrupted: nothing was written\n"


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert set(EXIT_CODES) == {0, 1, 2, 3, 130}
    ground = _help("ground")  # rcstat ground exits with its verdict: its help lists them too
    for code in EXIT_CODES:
        assert f"{code} {EXIT_CODES[code].split()[0]}" in text
        assert f"{code} {' '.join(EXIT_CODES[code].split())}" in ground
    assert "reads English only" in ground
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for code in EXIT_CODES:
        assert f"`{code}`" in readme
    assert "`1` the response is unsupported (`rcstat ground` only" in " ".join(readme.split())


def _help(*command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    node: Any = sub.choices[command[0]]
    for name in command[1:]:
        inner = next(a for a in node._actions if isinstance(a, argparse._SubParsersAction))
        node = inner.choices[name]
    return " ".join(str(node.format_help()).split())


def test_boolean_flags_state_their_behaviour_not_a_default() -> None:
    text = _help("bench", "kv")
    flag = text[text.index("--no-retry-failed") :]
    assert "(default: True)" not in flag.split("--", 2)[1]
    assert "instead of running them again" in flag
    assert "(default: True)" not in _help("compress")


def test_shard_values_that_look_like_options_reach_their_check() -> None:
    assert join_dash_values(["bench", "kv", "--shard", "-1/2", "--n", "3"]) == [
        "bench",
        "kv",
        "--shard=-1/2",
        "--n",
        "3",
    ]
    assert join_dash_values(["--shard", "--n", "3"]) == ["--shard", "--n", "3"]


@pytest.mark.parametrize("code", ["en", "ja", "pt-br", "zh-hant", "yue", " de "])
def test_language_codes_are_accepted(code: str) -> None:
    assert check_language(code) == code.strip()


@pytest.mark.parametrize("code", ["english", "xx", "e", "en us", "12", ""])
def test_unknown_language_codes_are_refused(code: str) -> None:
    with pytest.raises(ValueError, match="--language"):
        check_language(code)


@pytest.mark.parametrize("command", ["analyze", "attribute", "compress", "ground"])
def test_single_example_commands_print_json_for_scripts(command: str) -> None:
    """Each command that answers one example has ``--json`` (its result as one object)."""
    assert "--json" in _help(command) and "one JSON object on standard output" in _help(command)


@pytest.mark.parametrize("made_with", [None, 80])
def test_console_width_holds_in_its_block_and_leaves_rich_as_it_was(
    monkeypatch: pytest.MonkeyPatch, made_with: int | None
) -> None:
    """The tests' console_width gives the results' console its width inside the block, whether
    rich reads COLUMNS at each print (made without COLUMNS) or kept the COLUMNS it was made with
    (pytest-xdist's workers under pytest 9); after it, a console that read COLUMNS still does."""
    monkeypatch.setattr(console, "_width", made_with)
    monkeypatch.setenv("COLUMNS", "80")
    with console_width(400):
        assert console.width == 400
    assert console._width == made_with
    monkeypatch.setenv("COLUMNS", "123")
    assert console.width == (123 if made_with is None else made_with)
