"""``rcstat ground``, ``rcstat ground-profile`` and ``rcstat bench grounding`` on the tiny Llama
saved to disk (the ``model_dir`` fixture), with data files written here in the upstream
formats; one slow test runs the benchmark on a few documents of the shared FaithBench slice."""

from __future__ import annotations

import io
import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rcstat import cli
from rcstat.commands.ground import language_warning, latin_share
from rcstat.data import find_shared_data
from rcstat.defaults import DEFAULT_MODEL_NAME
from rcstat.evaluation.grounding_methods import BASELINES, VARIANTS
from rcstat.grounding import Grounder, Grounding, HeadProfile
from tests._console import console_width
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_data_grounding import _annotation, _faithbench_folder, _sample, _write_json

CONTEXT = (
    "The river flows through the city. The bridge was built in 1889 by a team of engineers. "
    "Paris is the capital of France."
)
QUESTION = "Who built the bridge?"
RESPONSE = "The bridge was built in 1889. It crosses the river in Paris."
WHY = "Why? " * 30  # 150 characters
TOP_K = "5"  # the tiny model has 12 heads; the default (20) is refused
OUTPUTS = {"ground.json", "ground.csv", "ground_tokens.csv", "ground.html"}


def _make_profile(path: Path, seed: int) -> Path:
    values = np.random.default_rng(seed).uniform(0.2, 0.9, size=(3, 4))
    copy = np.random.default_rng(seed + 10).random(values.shape)
    return HeadProfile(
        "tiny", values, threshold=0.05, quantile=0.1, fraction=0.5, copy_values=copy
    ).save(path)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("profiles")
    return _make_profile(folder / "a.json", 0), _make_profile(folder / "b.json", 1)


def _no_model(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model was loaded before the options were checked")


def _ground(model_dir: Path, profile: Path, out: Path, *extra: str) -> int:
    args = ["ground", "--model", str(model_dir), "--profile", str(profile), "--out", str(out)]
    return cli.main([*args, "--top-k", TOP_K, *extra])


# ------------------------------------------------------------------------------ ground


def test_ground_writes_results_matching_the_library(model_dir, profiles, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    texts = ["--context", CONTEXT, "--response", RESPONSE, "--question", QUESTION]
    want = Grounder(
        tiny_model("llama"), make_tiny_tokenizer(), profile=profiles[0], quantile=0.3, top_k=5
    ).ground(CONTEXT, RESPONSE, QUESTION)
    code = _ground(model_dir, profiles[0], out, *texts, "--quantile", "0.3")
    assert code == (0 if want.supported else 1)  # the exit status is the verdict
    assert OUTPUTS <= {p.name for p in out.iterdir()}
    result = Grounding.load(out / "ground.json")
    assert result.score == pytest.approx(want.score, rel=1e-5)
    np.testing.assert_allclose(result.token_scores, want.token_scores, rtol=1e-5)
    assert result.response == RESPONSE and result.question == QUESTION
    assert result.threshold == 0.05 and result.method["quantile"] == 0.3
    assert [s.support for s in result.sentences] == [s.support for s in want.sentences]
    sentences = pd.read_csv(out / "ground.csv")
    assert sentences["text"].tolist() == [s.text for s in want.sentences]
    tokens = pd.read_csv(out / "ground_tokens.csv", keep_default_na=False)
    assert len(tokens) == len(want.token_texts)
    html = (out / "ground.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html")
    printed = " ".join(capsys.readouterr().out.split())
    assert f"response score {want.score:.3f}" in printed and "ground.html" in printed
    # run again into the same folder: its own earlier output is replaced
    assert _ground(model_dir, profiles[0], out, *texts, "--threshold", "0.99") == 1
    assert Grounding.load(out / "ground.json").threshold == 0.99
    assert not Grounding.load(out / "ground.json").supported


def test_ground_outputs_get_the_users_umask(model_dir, profiles, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every file of the output folder, the marker included, is ``0o666`` less the umask, as
    any other tool's (the atomic writes once left them ``0o600``)."""
    previous = os.umask(0o022)
    try:
        _ground(
            model_dir, profiles[0], tmp_path / "out", "--context", CONTEXT, "--response", RESPONSE
        )
    finally:
        os.umask(previous)
    modes = {f.name: f.stat().st_mode & 0o777 for f in (tmp_path / "out").iterdir()}
    assert OUTPUTS <= set(modes) and set(modes.values()) == {0o644}, modes


def test_ground_reads_the_response_from_stdin(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(RESPONSE))
    context = tmp_path / "context.txt"
    context.write_text(CONTEXT, encoding="utf-8")
    out = tmp_path / "out"
    code = _ground(
        model_dir,
        profiles[0],
        out,
        "--context-file",
        str(context),
        "--response-file",
        "-",
        "--threshold",
        "0",
    )
    assert code == 0  # every score passes a threshold of 0: supported
    result = Grounding.load(out / "ground.json")
    assert result.response == RESPONSE and result.context == CONTEXT
    assert result.question == "Write a response based on the text above."


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--context", CONTEXT], "ground needs --context"),
        (["--response", RESPONSE], "ground needs --context"),
        (["--context", "  ", "--response", RESPONSE], "--context is empty"),
        (["--context", CONTEXT, "--response", "\n"], "--response is empty"),
        (["--context", CONTEXT, "--response", RESPONSE, "--question", " "], "--question is empty"),
        (["--context", CONTEXT, "--response", RESPONSE, "--fraction", "0"], "--fraction"),
        (["--context", CONTEXT, "--response", RESPONSE, "--fraction", "1.5"], "--fraction"),
        (["--context", CONTEXT, "--response", RESPONSE, "--quantile", "1"], "--quantile"),
        (["--context", CONTEXT, "--response", RESPONSE, "--quantile", "0"], "--quantile"),
        (["--context", CONTEXT, "--response", RESPONSE, "--threshold", "nan"], "--threshold"),
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--threshold", "-1"],
            "--threshold must be in [0, 1], got -1.0",
        ),
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--threshold", "1e308"],
            "--threshold must be in [0, 1], got 1e+308",
        ),
        (["--pairs", "pairs.jsonl", "--json"], "--json grounds one pair"),
        (["--context", CONTEXT, "--response", RESPONSE, "--probe", "nope.json"], "no such file"),
        (
            ["--context", CONTEXT, "--context-file", "c.txt", "--response", RESPONSE],
            "give --context or --context-file, not both",
        ),
        # a response without a word has nothing that could be supported: refused, not passed
        (["--context", CONTEXT, "--response", "?!?! ... !!!"], "the response has no word"),
        (["--context", CONTEXT, "--response", " — … ¡¿ "], "the response has no word"),
        # the limits, each named with the flag that raises it
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--max-chars", "100"],
            f"the context has {len(CONTEXT)} characters, more than --max-chars 100 allows; "
            "pass a larger --max-chars",
        ),
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--max-chars", "140", "--question", WHY],
            "the question has 150 characters, more than --max-chars 140",
        ),
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--max-tokens", "1000000000000"],
            "--max-tokens must be an integer in [128, 131072], got 1000000000000",
        ),
        (["--context", CONTEXT, "--response", RESPONSE, "--max-chars", "0"], "--max-chars must"),
        (
            ["--context", CONTEXT, "--response", RESPONSE, "--max-response-tokens", "0"],
            "--max-response-tokens must be an integer in [1, ∞)",
        ),
    ],
)
def test_ground_bad_options_exit_2_before_loading(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setattr("rcstat.cli.ground.load_model_quietly", _no_model)
    out = tmp_path / "out"
    assert _ground(model_dir, profiles[0], out, *extra) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and message in printed
    assert not out.exists()


LONG_CONTEXT = (
    "The suspension bridge over the slow brown river was built in 1889 by a large team of "
    "engineers from three different countries. Paris is the capital of France."
)
LONG_RESPONSE = (
    "The suspension bridge over the slow brown river was built in 1889 by a large team of "
    "engineers from three different countries, who finished it in winter. It is in Paris."
)


@pytest.mark.parametrize(("threshold", "status"), [("0", 0), ("1", 1)])
def test_ground_json_is_the_only_stdout_and_the_status_is_the_verdict(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, capsys, threshold, status
) -> None:
    out = tmp_path / "out"
    texts = ["--context", LONG_CONTEXT, "--response", LONG_RESPONSE, "--question", QUESTION]
    code = _ground(model_dir, profiles[0], out, *texts, "--threshold", threshold, "--json")
    assert code == status
    captured = capsys.readouterr()
    document = json.loads(captured.out)  # exactly one JSON object: nothing else on stdout
    assert captured.out.count("\n") == 1
    result = Grounding.load(out / "ground.json")
    assert document["verdict"] == ("supported" if status == 0 else "unsupported")
    assert document["score"] == pytest.approx(result.score)
    assert document["threshold"] == float(threshold) and document["out"] == str(out)
    assert document["baselines"].keys() == result.baselines.keys()
    assert [s["text"] for s in document["sentences"]] == [s.text for s in result.sentences]
    for got, sentence in zip(document["sentences"], result.sentences, strict=True):
        assert got["score"] == pytest.approx(sentence.score)
        assert got["verdict"] == ("supported" if sentence.supported else "unsupported")
        support = sentence.support
        assert got["support"] == (
            None
            if support is None
            else {
                "start": support.start,
                "end": support.end,
                "text": support.text,
                "share": pytest.approx(sentence.support_share),
            }
        )
        # the weakest word: the word of the sentence's lowest token score (a word's tokens
        # share its score; punctuation has none)
        first, last = sentence.tokens
        weakest = first + int(np.nanargmin(result.token_scores[first:last]))
        start, end = result.token_spans[weakest]
        word = next(
            m for m in re.finditer(r"\w+", LONG_RESPONSE) if m.start() < end and m.end() > start
        )
        assert got["weakest_word"]["score"] == pytest.approx(result.token_scores[weakest])
        assert got["weakest_word"]["text"] == word.group()
        assert (got["weakest_word"]["start"], got["weakest_word"]["end"]) == word.span()
    assert "response score" not in captured.err and "results written to" in captured.err


TOO_LONG_RESPONSE = " ".join(f"The bridge number {i} was built in 1889." for i in range(40))


def test_ground_exits_3_when_part_of_the_response_is_unverified(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, capsys
) -> None:
    """A response too long for the pass is checked up to where it fits: with no checked
    sentence unsupported (threshold 0) the verdict is unverified and the exit status 3, with
    the table or --json; an unsupported checked sentence (threshold 1) still exits 1."""
    texts = ["--context", CONTEXT, "--response", TOO_LONG_RESPONSE, "--question", QUESTION]
    budget = ["--max-tokens", "256"]
    out = tmp_path / "out"
    with console_width(400):  # the table's cells on one line each
        assert _ground(model_dir, profiles[0], out, *texts, *budget, "--threshold", "0") == 3
    table = " ".join(capsys.readouterr().out.split())
    assert "past the 256 tokens of one pass (--max-tokens)" in table  # the limit given
    result = Grounding.load(out / "ground.json")
    assert result.verdict == "unverified" and not result.finished
    assert result.unverified and not result.unsupported
    page = (out / "ground.html").read_text(encoding="utf-8")
    assert 'data-verdict="unverified"' in page and 'data-verdict="unsupported"' not in page
    capsys.readouterr()
    code = _ground(model_dir, profiles[0], out, *texts, *budget, "--threshold", "0", "--json")
    assert code == 3
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "unverified"
    assert "unverified" in {s["verdict"] for s in document["sentences"]}
    assert _ground(model_dir, profiles[0], out, *texts, *budget, "--threshold", "1") == 1
    assert Grounding.load(out / "ground.json").verdict == "unsupported"


def test_ground_refuses_a_10_mb_text_before_loading(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    """The default --max-chars refuses a 10 MB context from its file before the model loads (it
    once ran for 10 minutes); the same text passes the check with a larger --max-chars."""
    monkeypatch.setattr("rcstat.cli.ground.load_model_quietly", _no_model)
    huge = tmp_path / "huge.txt"
    huge.write_text("The bridge was built. " * 476_191, encoding="utf-8")  # 10,476,202 chars
    out = tmp_path / "out"
    texts = ["--context-file", str(huge), "--response", RESPONSE]
    assert _ground(model_dir, profiles[0], out, *texts) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed == (
        "error: the context has 10,476,202 characters, more than --max-chars 100,000 allows; "
        "pass a larger --max-chars to ground it (each window of a long context is one more pass)"
    )
    with pytest.raises(AssertionError, match="model was loaded"):  # past the check: the loader
        _ground(model_dir, profiles[0], out, *texts, "--max-chars", "20000000")


def test_ground_refuses_a_long_response_before_its_forward_pass(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    """A response of more tokens than --max-response-tokens is refused once tokenised, before
    any forward pass (a 20,000-character response once ran for 14 minutes)."""

    def no_pass(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a forward pass ran before the response's length was checked")

    monkeypatch.setattr("rcstat.grounding.measure.Measurer.measure_batch", no_pass)
    out = tmp_path / "out"
    word = "x" * 20_000  # one word of 20,000 characters
    texts = ["--context", CONTEXT, "--response", word]
    assert _ground(model_dir, profiles[0], out, *texts) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error: the response has ") and "tokens, more than" in printed
    assert "--max-response-tokens 2,048" in printed and not out.exists()
    with pytest.raises(AssertionError, match="forward pass ran"):  # a short one reaches it
        _ground(model_dir, profiles[0], out, "--context", CONTEXT, "--response", RESPONSE)


def test_ground_shows_the_windows_of_a_long_context_and_a_lowered_max_tokens(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, capsys
) -> None:
    """Progress on standard error for a context read in windows; a --max-tokens above the
    model's window (256 for the tiny model) is lowered to it, in one line."""
    context = " ".join(f"The bridge number {i} was built in 1889 by engineers." for i in range(30))
    texts = ["--context", context, "--response", RESPONSE, "--threshold", "0", "--json"]
    out = tmp_path / "out"
    assert _ground(model_dir, profiles[0], out, *texts, "--max-tokens", "100000") == 0
    captured = capsys.readouterr()
    windows = Grounding.load(out / "ground.json").windows
    assert windows > 1 and json.loads(captured.out)["windows"] == windows
    err = captured.err.splitlines()
    assert "note: --max-tokens 100,000 is more than the model's window: 256 used" in err
    assert f"reading the context: 0/{windows} window" in captured.err
    assert any(line.startswith(f"reading the context: {windows}/{windows} window") for line in err)


def test_ground_checks_out_before_loading_and_prints_the_verdict_if_writing_fails(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    """An --out that cannot be written is refused before the model loads, naming --out (not a
    temporary file); when the files still cannot be written at the end, the verdict is printed
    first, then one error line, exit status 2."""
    texts = ["--context", CONTEXT, "--response", RESPONSE, "--threshold", "0"]
    (tmp_path / "file.txt").write_text("x")
    with monkeypatch.context() as patch:
        patch.setattr("rcstat.cli.ground.load_model_quietly", _no_model)
        assert _ground(model_dir, profiles[0], tmp_path / "file.txt" / "out", *texts) == 2
        printed = capsys.readouterr().err.splitlines()[-1]
        assert printed.startswith(f"error: --out {tmp_path / 'file.txt' / 'out'}: ")
        assert printed.endswith("is a file, not a folder")

        def refuse(*args: Any, dir: Any = None, **kwargs: Any) -> str:
            raise PermissionError(13, "Permission denied", str(Path(dir) / ".out.x1y2"))

        patch.setattr("rcstat.runs.folder.tempfile.mkdtemp", refuse)
        assert _ground(model_dir, profiles[0], tmp_path / "out", *texts) == 2
        printed = capsys.readouterr().err.splitlines()[-1]
        assert printed.startswith(f"error: --out {tmp_path / 'out'} cannot be written")
        assert "Permission denied" in printed and ".out.x1y2" not in printed

    def fail(*args: Any, **kwargs: Any) -> None:  # the disk fills up at the end
        raise OSError(28, "No space left on device", "/somewhere/.out.tmp123/ground.html")

    monkeypatch.setattr("rcstat.report.grounding_html.save_grounding_html", fail)
    out = tmp_path / "out"
    assert _ground(model_dir, profiles[0], out, *texts) == 2
    captured = capsys.readouterr()
    assert "response score" in captured.out and "supported" in captured.out  # the verdict
    assert "results written" not in captured.out
    last = captured.err.splitlines()[-1]
    assert last == (
        f"error: cannot write --out {out}: No space left on device; the verdict above is not saved"
    )
    assert not out.exists()
    assert _ground(model_dir, profiles[0], out, *texts, "--json") == 2
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["verdict"] == "supported" and document["out"] is None
    assert captured.err.splitlines()[-1].startswith(f"error: cannot write --out {out}")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes in read-only folders"
)
def test_ground_refuses_a_read_only_out_before_loading(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("rcstat.cli.ground.load_model_quietly", _no_model)
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        texts = ["--context", CONTEXT, "--response", RESPONSE]
        assert _ground(model_dir, profiles[0], folder / "out", *texts) == 2
    finally:
        folder.chmod(0o755)
    printed = capsys.readouterr().err.splitlines()[-1]
    assert printed.startswith(f"error: --out {folder / 'out'} cannot be written")


def test_ground_json_sentences_are_the_library_schema(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, capsys
) -> None:
    """--json's sentences are ``Grounding.to_dict``'s (without their token range): one schema."""
    out = tmp_path / "out"
    texts = ["--context", LONG_CONTEXT, "--response", LONG_RESPONSE, "--threshold", "1"]
    assert _ground(model_dir, profiles[0], out, *texts, "--json") == 1
    document = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "ground.json").read_text(encoding="utf-8"))
    assert saved["format"] == "rcstat-grounding-3"
    assert document["sentences"] == [
        {k: v for k, v in s.items() if k != "tokens"} for s in saved["sentences"]
    ]
    for entry in document["sentences"]:
        assert set(entry) == {"start", "end", "text", "score", "verdict", "support"} | {
            "weakest_word"
        }
        assert isinstance(entry["weakest_word"], dict) and isinstance(entry["support"], dict)


def test_ground_table_shows_whole_sentences_and_evidence(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, capsys
) -> None:
    out = tmp_path / "out"
    texts = ["--context", LONG_CONTEXT, "--response", LONG_RESPONSE]
    assert _ground(model_dir, profiles[0], out, *texts, "--threshold", "0") == 0
    printed = capsys.readouterr().out
    assert "…" not in printed
    words = set(printed.replace("│", " ").split())
    result = Grounding.load(out / "ground.json")
    shown = [s.text for s in result.sentences]
    shown += [s.support.text for s in result.sentences if s.support is not None]
    assert max(map(len, shown)) > 100  # longer than any cut the table once made
    for text in shown:
        assert set(text.split()) <= words, text
    # an unsupported sentence names its weakest word
    assert _ground(model_dir, profiles[0], out, *texts, "--threshold", "1") == 1
    result = Grounding.load(out / "ground.json")
    first, last = result.sentences[0].tokens
    weakest = first + int(np.nanargmin(result.token_scores[first:last]))
    start, end = result.token_spans[weakest]
    word = next(
        m for m in re.finditer(r"\w+", LONG_RESPONSE) if m.start() < end and m.end() > start
    )
    cells = set(capsys.readouterr().out.replace("│", " ").split())  # wrapped: word by word
    assert {"unsupported:", repr(word.group()), "is", "not", "supported"} <= cells


def test_ground_warns_when_the_text_is_not_in_the_default_models_script(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    def stop(*args: Any, **kwargs: Any) -> None:
        raise ValueError("stop here")

    monkeypatch.setattr("rcstat.cli.ground.load_model_quietly", stop)
    japanese = "東京タワーは1958年に建てられました。1962年に改装されました。"
    argv = ["ground", "--context", japanese, "--response", "It was built in 1958."]
    assert cli.main([*argv, "--out", str(tmp_path / "a")]) == 2
    warning, error = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: the context is mostly not in the Latin script")
    assert "SmolLM2-135M-Instruct reads English only" in warning and "stop here" in error
    # another model, or Latin-script text: no warning
    assert _ground(model_dir, profiles[0], tmp_path / "b", *argv[1:]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: stop here"]
    english = ["ground", "--context", "It was built in 1958.", "--response", japanese[:8]]
    assert cli.main([*english, "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err.startswith("warning: the response is mostly not")


def test_latin_share_and_the_language_warning_by_hand() -> None:
    assert latin_share("Straße café") == 1.0 and math.isnan(latin_share("1962 !"))
    assert latin_share("ab東京") == 0.5 and latin_share("Москва") == 0.0
    texts = {"context": "Paris is big.", "response": "東京は大きい abc"}  # 3 of 9 letters Latin
    warning = language_warning(None, texts)
    assert warning is not None and warning.startswith("warning: the response is mostly not")
    assert "(33% Latin letters)" in warning and "\n" not in warning
    assert language_warning(DEFAULT_MODEL_NAME, texts) == warning
    assert language_warning("Qwen/Qwen2.5-7B", texts) is None
    assert language_warning(None, {"context": "ab東京", "response": "1962"}) is None  # half


def test_ground_missing_profile_and_foreign_out(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("rcstat.cli.ground.load_model_quietly", _no_model)
    texts = ["--context", CONTEXT, "--response", RESPONSE]
    assert _ground(model_dir, tmp_path / "missing.json", tmp_path / "a", *texts) == 2
    assert "--profile" in capsys.readouterr().err.splitlines()[-1]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    profile = _make_profile(tmp_path / "p.json", 0)
    assert _ground(model_dir, profile, foreign, *texts) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and "not written by rcstat" in printed
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]


def test_ground_refuses_a_profile_of_another_shape(model_dir, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    profile = HeadProfile(
        "other", np.full((2, 9), 0.5), 0.1, 0.1, copy_values=np.zeros((2, 9))
    ).save(tmp_path / "p.json")
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--context", CONTEXT, "--response", RESPONSE) == 2
    assert "2 layers x 9 heads" in " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert not out.exists()


# ---------------------------------------------------------------------- ground-profile


def _squad_file(path: Path) -> Path:
    """SQuAD v2 in its upstream format: two articles, two answerable questions and one not."""
    bridge = "The bridge was built in 1889 by a team of engineers. It crosses the river."
    capital = "Paris is the capital of France. Berlin is the capital of Germany."

    def qa(qid: str, question: str, context: str, answer: str | None) -> dict[str, Any]:
        if answer is None:
            return {"id": qid, "question": question, "answers": [], "is_impossible": True}
        start = context.index(answer)
        answers = [{"text": answer, "answer_start": start}]
        return {"id": qid, "question": question, "answers": answers, "is_impossible": False}

    document = {
        "version": "v2.0",
        "data": [
            {
                "title": "Bridge",
                "paragraphs": [
                    {
                        "context": bridge,
                        "qas": [
                            qa("q1", "Who built the bridge?", bridge, "a team of engineers"),
                            qa("q2", "Who painted the bridge?", bridge, None),
                        ],
                    }
                ],
            },
            {
                "title": "Capitals",
                "paragraphs": [
                    {
                        "context": capital,
                        "qas": [qa("q3", "What is the capital of France?", capital, "Paris")],
                    }
                ],
            },
        ],
    }
    return _write_json(path, document)


def test_ground_profile_writes_a_profile(model_dir, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = _squad_file(tmp_path / "dev-v2.0.json")
    out = tmp_path / "profile"
    # the slice's two contexts share no number and no other name: nothing to calibrate on
    args = ["ground-profile", "--model", str(model_dir), "--data", str(data)]
    assert cli.main([*args, "--max-new-tokens", "4", "--out", str(tmp_path / "none")]) == 2
    assert "no context sentence holds a number or a name" in capsys.readouterr().err
    # more documents to calibrate on
    more = tmp_path / "more.json"
    data_text = data.read_text().replace("Berlin is the capital of Germany", "Rome is in Italy")
    more.write_text(data_text.replace("a team of engineers", "40 engineers from Spain"))
    args += ["--calibrate-on", f"squad_v2:{more}"]
    assert cli.main([*args, "--max-new-tokens", "4", "--out", str(out)]) == 0
    profile = HeadProfile.load(out / "profile.json")
    assert profile.shape == (3, 4)
    assert ((profile.values >= 0) & (profile.values <= 1)).all()
    assert np.isfinite(profile.threshold) and profile.quantile == 0.05
    assert profile.source["examples"] == 3 and profile.source["max_new_tokens"] == 4
    assert profile.source["dataset_file"] == str(data)
    calibration = profile.source["calibration"]
    assert calibration["contexts"] == 4 and calibration["pairs"] >= 1
    assert profile.copy_values is not None and profile.copy_heads().size == 10
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    printed = " ".join(capsys.readouterr().out.split())
    assert "contextual heads" in printed and "profile written to" in printed
    assert f"{calibration['pairs']} copied/swapped sentence pairs" in printed

    # the profile drives `rcstat ground`
    ground = tmp_path / "ground"
    texts = ["--context", CONTEXT, "--response", RESPONSE]
    code = _ground(model_dir, out / "profile.json", ground, *texts)
    grounded = Grounding.load(ground / "ground.json")
    assert grounded.threshold == profile.threshold
    assert code == (0 if grounded.supported else 1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dataset", "faithbench"], "needs questions with contexts"),
        (["--dataset", "quotesum"], "needs questions with contexts"),
        (["--fraction", "0"], "--fraction"),
        (["--threshold-quantile", "1"], "--threshold-quantile"),
        (["--max-new-tokens", "0"], "--max-new-tokens"),
        (["--n", "0"], "--n"),
        (["--calibrate-on", "nosuch"], "--calibrate-on: unknown dataset 'nosuch'"),
        (["--calibrate-on", "squad_v2:/no/such/file"], "no such file"),
    ],
)
def test_ground_profile_bad_options_exit_2(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_profile.load_model_quietly", _no_model)
    out = tmp_path / "out"
    assert cli.main(["ground-profile", "--model", str(model_dir), "--out", str(out), *extra]) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and message in printed
    assert not out.exists()


# --------------------------------------------------------------------- bench grounding


def _bench(model_dir: Path, out: Path, *extra: str) -> int:
    args = ["bench", "grounding", "--model", str(model_dir), "--resamples", "20"]
    return cli.main([*args, "--out", str(out), *extra])


def test_bench_grounding_squad_contrast_and_resume(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path, monkeypatch, capsys
) -> None:
    data = _squad_file(tmp_path / "dev-v2.0.json")
    out = tmp_path / "bench"
    args = ["--dataset", "squad-contrast", "--data", str(data), "--profile", str(profiles[0])]
    assert _bench(model_dir, out, *args) == 0
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics["method"].tolist() == [*VARIANTS, *BASELINES]
    assert metrics["supporting_higher"].between(0, 1).all()
    assert metrics["ties"].between(0, 1).all() and (metrics["pairs"] == 2).all()
    report = json.loads((out / "report.json").read_text())
    assert report["dataset"] == "squad-contrast" and report["items"] == 4
    assert report["errors"] == 0 and report["positives"] == 2
    lines = [json.loads(v) for v in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(v["item"] for v in lines) == [
        "q1:supporting",
        "q1:unrelated",
        "q3:supporting",
        "q3:unrelated",
    ]
    assert all(v["error"] is None and len(v["head_features"]) == 36 for v in lines)
    # the supporting item of q1 is the library's measurement of the gold answer in context
    grounder = Grounder(tiny_model("llama"), make_tiny_tokenizer(), profile=profiles[0], top_k=5)
    bridge = next(v for v in lines if v["item"] == "q1:supporting")
    want = grounder.ground(
        "The bridge was built in 1889 by a team of engineers. It crosses the river.",
        "a team of engineers",
        "Who built the bridge?",
    )
    assert bridge["scores"]["rcstat"] == pytest.approx(want.score, rel=1e-5)
    assert bridge["label"] is False and bridge["pair"] == "q1"
    before = (out / "predictions.jsonl").read_text()
    assert _bench(model_dir, out, *args) == 0  # resumed: nothing measured again
    assert (out / "predictions.jsonl").read_text() == before
    # another profile is another run: refused before the model loads
    monkeypatch.setattr("rcstat.cli.bench.load_model_quietly", _no_model)
    capsys.readouterr()
    other = ["--dataset", "squad-contrast", "--data", str(data), "--profile", str(profiles[1])]
    assert _bench(model_dir, out, *other) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and "other settings" in printed and "profile" in printed
    assert (out / "predictions.jsonl").read_text() == before


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--dataset", "quotesum"], "bench grounding needs --dataset"),
        (["--dataset", "squad_v2"], "bench grounding needs --dataset"),
        (["--dataset", "summedits", "--questionable"], "--questionable applies to"),
        (["--dataset", "faithbench", "--profile", "missing.json"], "no such file"),
        (["--dataset", "faithbench", "--resamples", "0"], "--resamples"),
        (["--dataset", "faithbench", "--resamples", "100001"], "--resamples must be"),
        (["--dataset", "jsonl"], "--dataset jsonl needs --data FILE"),
        (["--dataset", "ragtruth", "--task", "qa,summary"], "--task must be one of qa, summary"),
        (["--dataset", "faithbench", "--task", "qa"], "--task applies to --dataset ragtruth"),
    ],
)
def test_bench_grounding_bad_options_exit_2(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setattr("rcstat.cli.bench.load_model_quietly", _no_model)
    out = tmp_path / "out"
    assert _bench(model_dir, out, *extra) == 2
    printed = " ".join(capsys.readouterr().err.splitlines()[-1].split())
    assert printed.startswith("error:") and message in printed
    assert not out.exists()


def test_bench_grounding_runs_on_a_model_with_few_heads(model_dir, profiles, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _squad_file(tmp_path / "dev-v2.0.json")
    args = ["--dataset", "squad-contrast", "--data", str(data), "--profile", str(profiles[0])]
    assert _bench(model_dir, tmp_path / "bench", *args) == 0


# FaithBench in its upstream format: five documents, each with one summary whose annotated
# span is Unwanted (hallucinated) and one consistent summary (not annotated).
_DOCUMENTS = [
    (
        "The council approved the budget on Monday. It rises by 4 percent.",
        "The council approved the budget on Friday.",
        "on Friday",
        "The budget rises by 4 percent.",
    ),
    (
        "Rain is expected in the north tomorrow. The south stays dry.",
        "Snow is expected in the north tomorrow.",
        "Snow",
        "The south stays dry.",
    ),
    (
        "The bridge was built in 1889 by a team of engineers.",
        "The bridge was built in 1925 by engineers.",
        "1925",
        "Engineers built the bridge in 1889.",
    ),
    (
        "Paris is the capital of France. Berlin is the capital of Germany.",
        "Rome is the capital of France.",
        "Rome",
        "Berlin is the capital of Germany.",
    ),
    (
        "The river flows through the city and the old mill stands by it.",
        "The river flows around the city and past a new mill.",
        "a new mill",
        "An old mill stands by the river.",
    ),
]


def _faithbench_documents(folder: Path) -> Path:
    folder.mkdir()
    samples = []
    for k, (source, wrong, span, right) in enumerate(_DOCUMENTS):
        unwanted = [_annotation(wrong, span, ["Unwanted", "Unwanted.Extrinsic"], "ann-1")]
        samples.append(_sample(2 * k, source, wrong, unwanted))
        samples.append(_sample(2 * k + 1, source, right, []))
    _write_json(folder / "batch_1.json", {"samples": samples})
    return folder


def _check_faithbench_run(out: Path, items: int) -> None:
    metrics = pd.read_csv(out / "metrics.csv")
    methods = set(metrics["method"])
    assert {"rcstat", "lookback", "attention_score", "neg_nll", "overlap"} <= methods
    assert "stored:hhem-2.1" in methods
    assert metrics["auroc"].between(0, 1).all() and (metrics["n"] == items).all()
    assert (out / "roc.png").read_bytes()[:4] == b"\x89PNG"
    assert len(list((out / "tokens").glob("*.npz"))) == items
    report = json.loads((out / "report.json").read_text())
    assert report["items"] == items and report["errors"] == 0
    assert set(report["probe"]) == {"rc", "lookback"}
    _check_metrics_from_rows(out)


def test_bench_grounding_faithbench_format(model_dir, profiles, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _faithbench_documents(tmp_path / "faithbench")
    out = tmp_path / "bench"
    args = ["--dataset", "faithbench", "--data", str(data), "--profile", str(profiles[0])]
    assert _bench(model_dir, out, *args) == 0
    _check_faithbench_run(out, 10)
    with np.load(next((out / "tokens").glob("*.npz"))) as tokens:
        assert {"score", "label", "nll", "rc", "lookback"} <= set(tokens.files)
        assert tokens["rc"].shape == (len(tokens["score"]), 12)
    hallucinated = 0
    for line in (out / "predictions.jsonl").read_text().splitlines():
        row = json.loads(line)
        hallucinated += row["label"]
        assert row["detectors"]["hhem-2.1"] == 0.5
    assert hallucinated == 5


def test_bench_grounding_summarizes_a_small_run(model_dir, profiles, tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _faithbench_folder(tmp_path)  # 5 summaries of 2 documents
    out = tmp_path / "bench"
    args = ["--dataset", "faithbench", "--data", str(data), "--profile", str(profiles[0])]
    assert _bench(model_dir, out, *args) == 0
    assert "rcstat" in set(pd.read_csv(out / "metrics.csv")["method"])
    _check_metrics_from_rows(out)


def _check_metrics_from_rows(out: Path) -> None:
    """metrics.csv recomputed from the row file: every method scored on both classes, its
    count and its AUROC of ``-score`` for hallucination by counting pairs (ties ½)."""
    rows = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    rows = [row for row in rows if not row.get("error")]
    scores: dict[str, list[tuple[float, bool]]] = {}
    for row in rows:
        named = {**row["scores"], **{f"stored:{k}": v for k, v in row["detectors"].items()}}
        for method, value in named.items():
            if value is not None and value == value:  # NaN: not scored
                scores.setdefault(method, []).append((-float(value), bool(row["label"])))
    want = {}
    for method, pairs in scores.items():
        positives = [v for v, label in pairs if label]
        negatives = [v for v, label in pairs if not label]
        if positives and negatives:
            wins = sum((p > q) + 0.5 * (p == q) for p in positives for q in negatives)
            want[method] = (len(pairs), wins / (len(positives) * len(negatives)))
    metrics = pd.read_csv(out / "metrics.csv").set_index("method")
    assert set(metrics.index) == set(want)
    for method, (n, area) in want.items():
        assert metrics.loc[method, "n"] == n
        assert metrics.loc[method, "auroc"] == pytest.approx(area, abs=1e-12)
        assert metrics.loc[method, "auroc_best_orientation"] == pytest.approx(max(area, 1 - area))
    report = json.loads((out / "report.json").read_text())
    assert report["items"] == len(rows) and report["positives"] == sum(r["label"] for r in rows)


def _summary_length(item: tuple[str, dict[str, Any]]) -> int:
    return len(item[1]["summary"])


def _hallucinated(sample: dict[str, Any]) -> bool:
    return any(label.startswith("Unwanted") for a in sample["annotations"] for label in a["label"])


@pytest.mark.slow
def test_bench_grounding_on_the_faithbench_slice(  # type: ignore[no-untyped-def]
    model_dir, profiles, tmp_path
) -> None:
    shared = find_shared_data()
    if shared is None or not (shared / "faithbench").is_dir():
        pytest.skip("shared/data/faithbench not available")
    # Five documents that have both a hallucinated and a consistent summary, one of each (the
    # shortest, to fit the tiny model's window), in their upstream files.
    documents: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for path in sorted((shared / "faithbench").glob("*.json")):
        for sample in json.loads(path.read_text(encoding="utf-8"))["samples"]:
            assert isinstance(sample["annotations"], list)
            documents[sample["source"]].append((path.name, sample))
    pairs = []  # per document with both labels: its shortest summary of each label
    for source, samples in documents.items():
        chosen = [
            min((x for x in samples if _hallucinated(x[1]) is label), key=_summary_length)
            for label in (True, False)
            if any(_hallucinated(x[1]) is label for x in samples)
        ]
        if len(chosen) == 2:
            pairs.append((2 * len(source) + sum(map(_summary_length, chosen)), chosen))
    files: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, chosen in sorted(pairs, key=lambda p: p[0])[:5]:
        for name, sample in chosen:
            files[name].append(sample)
    folder = tmp_path / "faithbench"
    folder.mkdir()
    for name, samples in files.items():
        _write_json(folder / name, {"samples": samples})
    # the tiny tokenizer spends many tokens per word: a copy of the model with a longer window
    # (RoPE needs no change)
    long_model = tmp_path / "model"
    long_model.mkdir()
    for path in model_dir.iterdir():
        (long_model / path.name).write_bytes(path.read_bytes())
    config = json.loads((long_model / "config.json").read_text())
    config["max_position_embeddings"] = 2048
    (long_model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "bench"
    args = ["--dataset", "faithbench", "--data", str(folder), "--profile", str(profiles[0])]
    assert _bench(long_model, out, *args) == 0
    _check_faithbench_run(out, 10)


# ------------------------------------------------------------- bench grounding: RAGTruth

# Per task, two sources in FaithJudge's per-task files, each with a faithful response and one
# whose labelled span is wrong: (source, faithful, hallucinated, span text).
_RAGTRUTH: dict[str, list[tuple[Any, str, str, str]]] = {
    "qa": [
        (
            {
                "question": "who built the bridge",
                "passages": "passage 1:The bridge was built in 1889 by engineers.",
            },
            "Engineers built it in 1889.",
            "Engineers built it in 1925.",
            "1925",
        ),
        (
            {
                "question": "what is the capital of France",
                "passages": "passage 1:Paris is the capital of France.",
            },
            "The capital is Paris.",
            "The capital is Rome.",
            "Rome",
        ),
    ],
    "summary": [
        (
            "The council approved the budget on Monday. It rises by 4 percent.",
            "The council approved the budget.",
            "The council approved the budget on Friday.",
            "Friday",
        ),
        (
            "Rain is expected in the north tomorrow. The south stays dry.",
            "Rain is expected in the north.",
            "Snow is expected in the north.",
            "Snow",
        ),
    ],
    "data2txt": [
        (
            {"name": "Cafe Rouge", "hours": {"Monday": "17:00-21:00"}},
            "Cafe Rouge opens at 5 pm on Monday.",
            "Cafe Rouge opens at 9 am on Monday.",
            "9 am",
        ),
        (
            {"name": "Blue Mill", "stars": 4.5},
            "Blue Mill has 4.5 stars.",
            "Blue Mill has 2 stars.",
            "2",
        ),
    ],
}
_QA_INSTRUCTION = (
    "Briefly answer the following question: who built the bridge\n"
    "Bear in mind that your response should be strictly based on the passages above."
)


def _ragtruth_folder(folder: Path) -> Path:
    folder.mkdir()
    for task, sources in _RAGTRUTH.items():
        lines = []
        for k, (source, right, wrong, span) in enumerate(sources):
            start = wrong.index(span)
            label = {
                "start": start,
                "end": start + len(span),
                "text": span,
                "label_type": "Evident Conflict",
            }
            responses = [
                {"response": right, "model": "m", "labels": []},
                {"response": wrong, "model": "m", "labels": [label]},
            ]
            lines.append(json.dumps({"source_id": k, "source": source, "responses": responses}))
        (folder / f"ragtruth_{task}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def _one_thread() -> Any:
    from tests._tiny_models import one_thread

    yield from one_thread()


def _chars(spans: list[list[int]]) -> set[int]:
    return {c for start, end in spans for c in range(start, end)}


@pytest.mark.usefixtures("_one_thread")
def test_bench_grounding_ragtruth_detection_by_task(model_dir, profiles, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.test_grounding_detector import _detector

    data = _ragtruth_folder(tmp_path / "ragtruth")
    detector = _detector(threshold=0.5, span_threshold=0.6).save(tmp_path / "detector.json")
    out = tmp_path / "bench"
    args = ["--dataset", "ragtruth", "--data", str(data), "--profile", str(profiles[0])]
    assert _bench(model_dir, out, *args, "--detector", str(detector)) == 0
    rows = [json.loads(v) for v in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(r["error"] is None for r in rows)
    assert sorted({r["by"] for r in rows}) == ["data2txt", "qa", "summary"]
    assert sum(r["label"] for r in rows) == 6
    # the default verdict is the detector's (1 - P against 1 - its threshold), the zero-shot
    # one the profile's
    assert all(r["zero_shot_threshold"] == pytest.approx(0.05) for r in rows)
    assert all(r["threshold"] == pytest.approx(0.5) for r in rows)
    for r in rows:
        assert r["verdict"] == (
            "unsupported" if r["scores"]["rcstat"] < r["threshold"] else "supported"
        )
        assert bool(r["spans"]) == (r["verdict"] == "unsupported")
    # a QA item was teacher-forced after RAGTruth's instruction with its question
    qa = next(r for r in rows if r["item"] == "qa:0:1")
    grounder = Grounder(
        tiny_model("llama"), make_tiny_tokenizer(), profile=profiles[0], detector=False
    )
    want = grounder.ground(
        _RAGTRUTH["qa"][0][0]["passages"], "Engineers built it in 1925.", _QA_INSTRUCTION
    )
    assert qa["scores"]["zero_shot"] == pytest.approx(want.score, rel=1e-5)
    assert qa["labelled_spans"] == [[22, 26]]
    # detection.csv: both verdicts in every scope, the example-level figures by counting
    detection = pd.read_csv(out / "detection.csv")
    assert sorted(zip(detection["scope"], detection["verdict"], strict=True)) == [
        (scope, verdict)
        for scope in ("all", "data2txt", "qa", "summary")
        for verdict in ("rcstat", "zero_shot")
    ]
    for (scope, verdict), row in detection.set_index(["scope", "verdict"]).iterrows():
        part = [r for r in rows if scope in ("all", r["by"])]
        if verdict == "rcstat":
            flagged = [r["verdict"] == "unsupported" for r in part]
            spans = [r["spans"] for r in part]
        else:
            flagged = [r["scores"]["zero_shot"] < r["zero_shot_threshold"] for r in part]
            spans = [r["zero_shot_spans"] for r in part]
        labels = [bool(r["label"]) for r in part]
        hits = sum(f and y for f, y in zip(flagged, labels, strict=True))
        assert row["n"] == len(part) and row["unsupported"] == sum(labels)
        precision = hits / sum(flagged) if any(flagged) else math.nan
        assert row["example_precision"] == pytest.approx(precision, nan_ok=True)
        assert row["example_recall"] == pytest.approx(hits / sum(labels))
        faithful = [f for f, y in zip(flagged, labels, strict=True) if not y]
        assert row["false_alarms"] == pytest.approx(sum(faithful) / len(faithful))
        found = sum(len(_chars(s)) for s in spans)
        both = sum(
            len(_chars(s) & _chars(r["labelled_spans"])) for s, r in zip(spans, part, strict=True)
        )
        gold = sum(len(_chars(r["labelled_spans"])) for r in part)
        assert row["span_recall"] == pytest.approx(both / gold)
        assert row["span_precision"] == pytest.approx(
            both / found if found else math.nan, nan_ok=True
        )
    assert not detection[["example_f1_lo", "example_f1_hi"]].isna().all().all()
    # metrics.csv: a scope column, every method pooled and per task
    metrics = pd.read_csv(out / "metrics.csv")
    assert set(metrics["scope"]) == {"all", "data2txt", "qa", "summary"}
    pooled = metrics[metrics["scope"] == "all"]
    assert {"rcstat", "zero_shot", "unigram_overlap"} <= set(pooled["method"])
    assert (pooled["n"] == 12).all() and (metrics[metrics["scope"] == "qa"]["n"] == 4).all()
    report = json.loads((out / "report.json").read_text())
    assert report["dataset"] == "ragtruth" and len(report["detection"]) == 8
    # --task: that task's responses only
    only = tmp_path / "qa_only"
    assert _bench(model_dir, only, *args, "--task", "qa", "--zero-shot") == 0
    rows = [json.loads(v) for v in (only / "predictions.jsonl").read_text().splitlines()]
    assert sorted(r["item"] for r in rows) == ["qa:0:0", "qa:0:1", "qa:1:0", "qa:1:1"]
    assert all(r["threshold"] == pytest.approx(0.05) for r in rows)  # --zero-shot verdict
    assert set(pd.read_csv(only / "detection.csv")["scope"]) == {"all", "qa"}
