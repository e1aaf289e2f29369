"""Bad input never passes silently: every number, count and input mode is refused with a message
that names it, by the CLI before any model loads or file is written, and by the API."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rcstat import cli
from rcstat.analysis import analyze
from rcstat.attribution import Attributor
from rcstat.checks import check_count, check_number
from rcstat.press.extra import has_kvpress
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

# A model path that does not exist: a command that validates its options first never gets to
# the model, so the error must name the option, not the model.
NO_MODEL = "/nonexistent/model"
CONTEXT, QUESTION, ANSWER = "The cat sat on the mat.", "Where did the cat sit?", "On the mat."


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert "Traceback" not in captured.out + captured.err
    assert "loading model" not in captured.err  # refused before the model
    return " ".join(captured.err.split())


CHAT = ["--model", NO_MODEL, "--context", CONTEXT, "--question", QUESTION]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["analyze", *CHAT, "--top", "-5"], "--top must be an integer in [1, ∞), got -5"),
        (["analyze", *CHAT, "--tau", "nan"], "--tau must be a finite number, got nan"),
        (["analyze", *CHAT, "--tau", "inf"], "--tau must be a finite number"),
        (["analyze", *CHAT, "--tau", "-1"], "--tau must be in [0, ∞), got -1.0"),
        (["analyze", *CHAT, "--max-new-tokens", "-1"], "--max-new-tokens must be an integer"),
        (["analyze", *CHAT, "--max-new-tokens", "0"], "--max-new-tokens must be an integer"),
        (["analyze", *CHAT, "--answer", "  \n "], "--answer: is empty or whitespace only"),
        (["analyze", *CHAT, "--prompt", "raw"], "not both"),
        (["analyze", "--model", NO_MODEL, "--context", CONTEXT], "--question"),
        (["analyze", "--model", NO_MODEL, "--generation", "x"], "raw mode needs --prompt"),
        (["analyze", *CHAT, "--head", "-1.0"], "layer and head are >= 0"),
        (["attribute", *CHAT, "--top-k", "0"], "--top-k must be an integer"),
        (["attribute", *CHAT, "--max-new-tokens", "-1"], "--max-new-tokens"),
        (["attribute", *CHAT, "--answer", " "], "--answer is empty or whitespace only"),
        (["heads", "--model", NO_MODEL, "--tau", "nan"], "--tau must be a finite number"),
        (["heads", "--model", NO_MODEL, "--tau", "-0.5"], "--tau must be in [0, ∞)"),
        (["heads", "--model", NO_MODEL, "--n", "0"], "--n must be an integer"),
        (["heads", "--model", NO_MODEL, "--dataset", "nope"], "unknown dataset 'nope'"),
        (["heads", "--model", NO_MODEL, "--dataset", "faithbench"], "faithbench has none"),
        (["demo", "--model", NO_MODEL, "--tau=-inf"], "--tau must be a finite number"),
        (["demo", "--model", NO_MODEL, "--tau=-1"], "--tau must be in [0, ∞)"),
        (["compress", *CHAT, "--threshold", "nan"], "--threshold must be a finite number"),
        (["compress", *CHAT, "--threshold", "-1"], "--threshold must be in [0, ∞)"),
        (["compress", *CHAT, "--ratio", "1.0"], "--ratio must be in [0, 1)"),
        (["compress", *CHAT, "--window", "0"], "--window must be an integer"),
        (["compress", *CHAT, "--max-new-tokens", "-1"], "--max-new-tokens"),
        (["compress", "--model", NO_MODEL, "--question", QUESTION], "needs --context"),
        (["bench", "kv", "--model", NO_MODEL, "--presses", "magic"], "unknown press 'magic'"),
        (["bench", "kv", "--model", NO_MODEL, "--presses", "tova,tova"], "listed twice"),
        (["bench", "kv", "--model", NO_MODEL, "--ratios", "1.0"], "--ratios must be in [0, 1)"),
        (["bench", "kv", "--model", NO_MODEL, "--ratios", "nan"], "--ratios must be a finite"),
        (["bench", "kv", "--model", NO_MODEL, "--thresholds", "-0.5"], "--thresholds"),
        (["bench", "kv", "--model", NO_MODEL, "--window", "8,0"], "--window"),
        (["bench", "kv", "--model", NO_MODEL, "--dataset", "quotesum"], "bench kv needs"),
        (["bench", "attribution", "--model", NO_MODEL, "--k", "0"], "--k must be an integer"),
        (["bench", "attribution", "--model", NO_MODEL, "--k", ","], "--k needs at least one"),
        (["heads", "--model", NO_MODEL, "--shard", "2/2"], "need 0 <= i < N"),
        (
            ["bench", "kv", "--model", NO_MODEL, "--group", "max,median"],
            "--group must be one of max, mean, got 'median'",
        ),
        (["bench", "kv", "--model", NO_MODEL, "--group", "mean,mean"], "--group lists a value"),
        (["bench", "kv", "--model", NO_MODEL, "--score", "lower"], "--score must be one of"),
        (
            ["bench", "kv", "--model", NO_MODEL, "--budget", "layer,head"],
            "--budget must be one of layer, pooled, got 'head'",
        ),
        (["bench", "kv", "--model", NO_MODEL, "--floor", "2"], "--floor must be in [0, 1]"),
        (
            ["bench", "kv", "--model", NO_MODEL, "--window", "question"],
            "needs --press-scope q",
        ),
        (["bench", "kv", "--model", NO_MODEL, "--window", "8,8"], "--window lists a value"),
        (["compress", *CHAT, "--budget", "pooled"], "--budget pooled needs --ratio"),
        (["compress", *CHAT, "--sinks", "-4"], "--sinks must be an integer in [0"),
        (["bench", "kv", "--model", NO_MODEL, "--sinks", "0,x"], "--sinks: 'x' is not an"),
        (["compress", *CHAT, "--window", "question"], "needs --press-scope question"),
        (["compress", *CHAT, "--window", "eight"], "--window: 'eight' is not an integer"),
        (["compress", *CHAT, "--ratio", "0.5", "--floor", "-1"], "--floor must be in [0, 1]"),
        (["bench", "attribution", "--model", NO_MODEL, "--max-tokens", "1"], "--max-tokens"),
        (["bench", "kv", "--model", NO_MODEL, "--shard", "1of2"], "expected i/N"),
        (["bench", "grounding", "--model", NO_MODEL, "--shard=-1/2"], "expected i/N"),
        (["merge", "/nonexistent/run"], "has no parts/ folder"),
        (["merge", "/nonexistent/run", "--shards", "0"], "--shards must be an integer"),
    ],
)
def test_cli_refuses_before_loading_the_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    out = tmp_path / "out"
    if argv[0] in ("analyze", "attribute", "heads", "demo"):
        argv = [*argv, "--out", str(out)]
    printed = _run(capsys, argv)
    assert printed.startswith("error:")
    assert message in printed
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_cli_input_file_and_stdin_conflicts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["analyze", "--model", NO_MODEL, "--context-file", "-", "--question-file", "-"]
    assert "only one option can read standard input" in _run(capsys, argv)
    argv = ["attribute", *CHAT, "--chunks-file", str(tmp_path / "missing.json")]
    assert "cannot read --chunks-file" in _run(capsys, [*argv[:3], *argv[5:]])


def test_cli_reads_a_context_from_standard_input(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(CONTEXT))
    out = tmp_path / "run"
    argv = ["analyze", "--model", str(model_dir), "--context-file", "-", "--question", QUESTION]
    assert cli.main([*argv, "--answer", ANSWER, "--out", str(out)]) == 0
    assert CONTEXT in (out / "scores.json").read_text(encoding="utf-8")


def test_help_shows_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, default in [
        (["analyze", "--help"], "(default: 1.5)"),
        (["attribute", "--help"], "(default: 20)"),
        (["compress", "--help"], "(default: 8)"),
        (["bench", "kv", "--help"], "(default: 0.3,0.5,0.7)"),
        (["heads", "--help"], "(default: 1.5)"),
    ]:
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        assert default in " ".join(capsys.readouterr().out.split()), argv


def test_version_has_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib import metadata

    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"rcstat {metadata.version('rcstat')}"


# ---------------------------------------------------------------------------------- the API


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "1", None, True])
def test_check_number_refuses_non_finite_and_non_numbers(value: object) -> None:
    with pytest.raises(ValueError, match="tau must be"):
        check_number("tau", value)


@pytest.mark.parametrize("value", [0, -5, 2.0, "3", None, True])
def test_check_count_refuses_non_positive_and_non_integers(value: object) -> None:
    with pytest.raises(ValueError, match="top must be an integer"):
        check_count("top", value)


def test_analysis_api_refuses_bad_numbers() -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        analyze(model, tok, context=CONTEXT, question=QUESTION, max_new_tokens=-1)
    with pytest.raises(ValueError, match="answer: is empty or whitespace only"):
        analyze(model, tok, context=CONTEXT, question=QUESTION, answer=" \t")
    result = analyze(model, tok, context=CONTEXT, question=QUESTION, answer=ANSWER)
    with pytest.raises(ValueError, match="tau must be a finite number"):
        result.count_above(math.nan)
    with pytest.raises(ValueError, match=r"tau must be in \[0, ∞\)"):  # RC is never negative
        result.count_above(-1.0)
    assert result.count_above(0.0) == int((result.values("upper") > 0).sum())
    with pytest.raises(ValueError, match="k must be an integer"):
        result.top(-5)


def test_attributor_api_refuses_bad_numbers() -> None:
    model, tok = tiny_model("llama"), make_tiny_tokenizer()
    with pytest.raises(ValueError, match="top_k must be an integer"):
        Attributor(model, tok, top_k=-5)
    with pytest.raises(ValueError, match="max_new_tokens must be at least 1"):
        Attributor(model, tok, top_k=5, max_new_tokens=0)
    with pytest.raises(ValueError, match="answer is empty or whitespace only"):
        Attributor(model, tok, top_k=5).attribute(CONTEXT, QUESTION, "   ")


@pytest.mark.press
@pytest.mark.skipif(not has_kvpress(), reason="the rcstat[press] extra is not installed")
@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"threshold": math.nan}, "threshold must be a finite number"),
        ({"threshold": -0.1}, "threshold must be in"),
        ({"compression_ratio": 1.0}, "compression_ratio must be in"),
        ({"compression_ratio": math.nan}, "compression_ratio must be a finite"),
        ({"window_size": 0}, "window_size must be an integer"),
        ({"window_size": 2.5}, "window_size must be an integer"),
    ],
)
def test_press_api_refuses_bad_numbers(kwargs: dict[str, object], message: str) -> None:
    from rcstat.press import RCStatPress

    with pytest.raises(ValueError, match=message):
        RCStatPress(**kwargs)  # type: ignore[arg-type]


def test_package_version_is_the_metadata_version() -> None:
    from importlib import metadata

    import rcstat

    assert rcstat.__version__ == metadata.version("rcstat")


@pytest.mark.parametrize("argv", [["compress", *CHAT], ["bench", "kv", "--model", NO_MODEL]])
def test_press_commands_without_the_extra_name_the_install_command(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
) -> None:
    import rcstat.press.extra as extra

    # a folder that passes --model's own check (it has a config.json) and is never loaded
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    monkeypatch.setattr(extra, "has_kvpress", lambda: False)
    printed = _run(capsys, [str(tmp_path) if arg == NO_MODEL else arg for arg in argv])
    assert printed.startswith("error:") and 'pip install "rcstat[press]"' in printed
