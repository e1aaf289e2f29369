"""``rcstat analyze`` on a tiny random Llama saved to disk (no downloads)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rcstat import cli
from rcstat.analysis import HeadAnalysis, analyze
from rcstat.cli._common import OUTPUT_MARKER
from rcstat.cli.analyze import parse_head
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

CONTEXT = "The cat sat on the warm mat near the door. The dog slept in the garden."
QUESTION = "Where did the cat sit?"
ANSWER = "On the warm mat."
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LAYERS, HEADS = 3, 4  # tests/_tiny_models.py


def _flat(text: str) -> str:
    """Console output with rich's line wrapping and padding collapsed to single spaces."""
    return " ".join(text.split())


def _leftovers(parent: Path, out: Path) -> list[str]:
    """The output folder or a hidden staging folder of it, if any is left in ``parent``."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith((out.name, f".{out.name}")))


def _chat_args(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "analyze",
        "--model",
        str(model_dir),
        "--context",
        CONTEXT,
        "--question",
        QUESTION,
        "--answer",
        ANSWER,
        "--out",
        str(out),
        *extra,
    ]


def test_analyze_writes_scores_plots_and_prints_table(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    tau = 4.0
    assert (
        cli.main(_chat_args(model_dir, out, "--head", "1.2", "--tau", str(tau), "--top", "5")) == 0
    )

    assert sorted(p.name for p in out.iterdir()) == [
        OUTPUT_MARKER,
        "head_1_2.png",
        "heatmap.png",
        "scores.csv",
        "scores.json",
    ]
    frame = pd.read_csv(out / "scores.csv")
    assert list(frame.columns) == ["layer", "head", "expected", "upper", "lower", "normalized"]
    assert len(frame) == LAYERS * HEADS
    assert list(frame["layer"]) == [layer for layer in range(LAYERS) for _ in range(HEADS)]
    assert list(frame["head"]) == list(range(HEADS)) * LAYERS
    values = frame[["expected", "upper", "lower", "normalized"]].to_numpy()
    assert np.isfinite(values).all()
    assert (frame["lower"] <= frame["expected"] + 1e-9).all()
    assert (frame["expected"] <= frame["upper"] + 1e-9).all()

    # The same numbers as rcstat.analyze on the in-memory model that was saved.
    want = analyze(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        context=CONTEXT,
        question=QUESTION,
        answer=ANSWER,
    )
    np.testing.assert_allclose(frame["expected"], want.expected.ravel(), rtol=1e-6)
    np.testing.assert_allclose(frame["upper"], want.upper.ravel(), rtol=1e-6)
    saved = HeadAnalysis.load(out / "scores.json")
    # the CSV holds decimal text (pandas writes 16 significant digits), the JSON exact floats
    np.testing.assert_allclose(saved.expected.ravel(), frame["expected"], rtol=1e-12)
    assert saved.generation_text == ANSWER
    assert (saved.prompt_len, saved.gen_len) == (want.prompt_len, want.gen_len)

    for name in ("heatmap.png", "head_1_2.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        assert len(data) > 5_000, name

    printed = _flat(capsys.readouterr().out)
    assert f"generation: {ANSWER!r}" in printed
    n_upper = int((frame["upper"] > tau).sum())
    n_expected = int((frame["expected"] > tau).sum())
    assert n_upper != n_expected  # the tau chosen tells the two counts apart
    assert f"A > {tau}: {n_upper} heads" in printed
    assert f"E > {tau}: {n_expected} heads" in printed
    assert f"top 5 of {LAYERS * HEADS} heads by expected RC" in printed
    rows = re.findall(r"│ (\d+) │ (\d+) │ ([\d.]+) │ ([\d.]+) │", printed)
    top = frame.sort_values("expected", ascending=False, kind="stable").head(5)
    assert [(int(r[0]), int(r[1]), float(r[2]), float(r[3])) for r in rows] == [
        (int(t.layer), int(t.head), round(t.expected, 3), round(t.upper, 3))
        for t in top.itertuples()
    ]
    assert f"results written to {out}/" in printed


def test_files_give_the_same_scores_as_inline_text(model_dir: Path, tmp_path: Path) -> None:
    inline, from_files = tmp_path / "inline", tmp_path / "files"
    (tmp_path / "context.txt").write_text(CONTEXT, encoding="utf-8")
    (tmp_path / "answer.txt").write_text(ANSWER, encoding="utf-8")
    assert cli.main(_chat_args(model_dir, inline)) == 0
    argv = [
        "analyze",
        "--model",
        str(model_dir),
        "--context-file",
        str(tmp_path / "context.txt"),
        "--question",
        QUESTION,
        "--answer-file",
        str(tmp_path / "answer.txt"),
        "--out",
        str(from_files),
    ]
    assert cli.main(argv) == 0
    pd.testing.assert_frame_equal(
        pd.read_csv(from_files / "scores.csv"), pd.read_csv(inline / "scores.csv")
    )
    assert HeadAnalysis.load(from_files / "scores.json").generation_text == ANSWER


def test_raw_mode(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "raw"
    argv = ["analyze", "--model", str(model_dir), "--out", str(out)]
    argv += ["--prompt", "Once upon a time", "--generation", " there was a cat."]
    assert cli.main(argv) == 0
    saved = HeadAnalysis.load(out / "scores.json")
    assert saved.prompt_text == "Once upon a time"
    assert saved.generation_text == " there was a cat."
    want = analyze(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        prompt="Once upon a time",
        generation=" there was a cat.",
    )
    assert (saved.prompt_len, saved.gen_len) == (want.prompt_len, want.gen_len)
    np.testing.assert_allclose(saved.upper, want.upper, rtol=1e-6)
    assert not (out / "head_0_0.png").exists()


def test_raw_mode_generates_when_no_generation(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gen"
    argv = ["analyze", "--model", str(model_dir), "--out", str(out)]
    argv += ["--prompt", "Once upon a time", "--max-new-tokens", "3"]
    assert cli.main(argv) == 0
    saved = HeadAnalysis.load(out / "scores.json")
    assert 1 <= saved.gen_len <= 3
    assert saved.generation_text


def test_markup_in_user_text_is_printed_verbatim(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rich markup in the answer must neither vanish nor crash the print ("[/note]" alone
    # raised rich.errors.MarkupError after the results had been written).
    answer = "On the [bold]warm[/bold] mat [/note]."
    out = tmp_path / "[x]run"
    argv = _chat_args(model_dir, out)
    argv[argv.index(ANSWER)] = answer
    assert cli.main(argv) == 0
    printed = _flat(capsys.readouterr().out)
    assert f"generation: {answer!r}" in printed
    assert f"results written to {out}/" in printed
    assert HeadAnalysis.load(out / "scores.json").generation_text == answer


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--answer", ""], "answer: is empty"),
        (["--head", "3.0"], f"head 3.0 does not exist: the model has {LAYERS} layers × {HEADS}"),
        (["--head", "0.4"], "head 0.4 does not exist"),
        (["--device", "tpu"], "--device 'tpu' is not a device"),
        (["--device", "cpu", "--device-map", "auto"], "give one of them, not both"),
        (["--device", "cuda:99"], "--device cuda:99:"),
    ],
    ids=[
        "empty-answer",
        "layer-out-of-range",
        "head-out-of-range",
        "bad-device",
        "device-and-map",
        "missing-gpu",
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    out = tmp_path / "run"
    argv = _chat_args(model_dir, out)
    if extra[0] == "--answer":
        argv[argv.index(ANSWER)] = extra[1]
    else:
        argv += extra
    assert cli.main(argv) == 2
    printed = _flat(capsys.readouterr().err.splitlines()[-1])
    assert printed.startswith("error:")
    assert message in printed
    assert "Traceback" not in printed
    assert _leftovers(tmp_path, out) == []


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_bad_model_path_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    model = tmp_path / "no-such-model"
    if kind == "file":
        model.write_text("not a checkpoint")
    out = tmp_path / "run"
    argv = ["analyze", "--model", str(model), "--prompt", "hello", "--generation", " world"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    printed = _flat(capsys.readouterr().err.splitlines()[-1])
    assert printed.startswith(f"error: --model {model}: ")
    assert ("no such file or folder" if kind == "missing" else "a file but not a .gguf") in printed
    assert _leftovers(tmp_path, out) == []


def test_text_and_file_of_the_same_input_is_refused(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "context.txt").write_text(CONTEXT, encoding="utf-8")
    argv = _chat_args(model_dir, tmp_path / "run", "--context-file", str(tmp_path / "context.txt"))
    assert cli.main(argv) == 2
    assert "error: give --context or --context-file, not both" in _flat(
        capsys.readouterr().err.splitlines()[-1]
    )
    assert _leftovers(tmp_path, tmp_path / "run") == []


def test_unreadable_input_file_is_refused(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["analyze", "--model", str(model_dir), "--out", str(tmp_path / "run")]
    argv += ["--prompt-file", str(tmp_path / "missing.txt")]
    assert cli.main(argv) == 2
    assert "error: cannot read --prompt-file" in _flat(capsys.readouterr().err.splitlines()[-1])


@pytest.mark.parametrize("head", ["3", "1.x", "1.2.3", ""])
def test_malformed_head_is_an_argparse_error(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], head: str
) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(_chat_args(model_dir, tmp_path / "run", "--head", head))
    assert exc.value.code == 2
    assert f"--head must look like LAYER.HEAD, got {head!r}" in capsys.readouterr().err
    assert _leftovers(tmp_path, tmp_path / "run") == []


def test_head_parser() -> None:
    assert parse_head("12.3") == (12, 3)
    args = cli.build_parser().parse_args(["analyze", "--head", "0.1", "--head", "2.3"])
    assert args.head == [(0, 1), (2, 3)]


def test_scores_json_is_plain_json(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert cli.main(_chat_args(model_dir, out, "--scaled")) == 0
    data = json.loads((out / "scores.json").read_text())
    assert data["scaled"] is True
    assert np.asarray(data["upper"]).shape == (LAYERS, HEADS)
    unscaled = analyze(
        tiny_model("llama"),
        make_tiny_tokenizer(),
        context=CONTEXT,
        question=QUESTION,
        answer=ANSWER,
    )
    # Scaling every score by 1/sqrt(d) scales E and A by the same factor (d = 16).
    np.testing.assert_allclose(data["expected"], unscaled.expected / 4.0, rtol=1e-5)


def test_no_lower_bound_leaves_it_out(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert cli.main(_chat_args(model_dir, out, "--no-lower-bound")) == 0
    frame = pd.read_csv(out / "scores.csv")
    assert list(frame.columns) == ["layer", "head", "expected", "upper", "normalized"]
    assert HeadAnalysis.load(out / "scores.json").lower is None
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "layer" in line and "expected" in line)
    assert "lower" not in header and "normalized" in header


@pytest.mark.parametrize(
    "placement", [["--device", "cpu", "--dtype", "float32"], ["--device-map", "auto"]]
)
def test_placement_options_give_the_same_scores(
    model_dir: Path, tmp_path: Path, placement: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--device cpu`` and a device map (accelerate; all on the CPU here, the CLI's GPU check
    — ``--device-map`` needs a GPU — passed by a stub) load the model where asked and give the
    scores of the default placement."""
    from rcstat.runs import devices as devices_module

    monkeypatch.setattr(devices_module, "visible_gpus", lambda: 1)
    plain, placed = tmp_path / "plain", tmp_path / "placed"
    assert cli.main(_chat_args(model_dir, plain)) == 0
    assert cli.main(_chat_args(model_dir, placed, *placement)) == 0
    want, got = (HeadAnalysis.load(p / "scores.json") for p in (plain, placed))
    np.testing.assert_allclose(got.expected, want.expected, rtol=1e-6)
    np.testing.assert_allclose(got.upper, want.upper, rtol=1e-6)


def test_json_is_the_library_result_as_one_object(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--json``: one JSON object on standard output and nothing else there — every head's
    statistics as the files hold them, the counts above τ and the top heads recomputed here
    from ``scores.csv``; the folder written is named on standard error."""
    out, tau = tmp_path / "run", 4.0
    assert cli.main(_chat_args(model_dir, out, "--json", "--tau", str(tau), "--top", "4")) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1
    printed = json.loads(captured.out)
    saved = json.loads((out / "scores.json").read_text())
    assert {k: printed[k] for k in saved} == saved  # HeadAnalysis.to_dict, as scores.json
    frame = pd.read_csv(out / "scores.csv")
    assert printed["tau"] == tau
    assert printed["heads_above_tau"] == {
        "upper": int((frame["upper"] > tau).sum()),
        "expected": int((frame["expected"] > tau).sum()),
    }
    top = frame.sort_values("expected", ascending=False, kind="stable").head(4)
    assert [(h["layer"], h["head"]) for h in printed["top_heads"]] == list(
        zip(top["layer"], top["head"], strict=True)
    )
    np.testing.assert_allclose([h["upper"] for h in printed["top_heads"]], top["upper"])
    assert printed["out"] == str(out)
    assert "│" not in captured.out  # no table
    assert f"results written to {out}/" in captured.err
