"""``rcstat ground --pairs`` and ``rcstat bench grounding --dataset jsonl`` on the tiny Llama
saved to disk (the ``model_dir`` fixture), with pair files written here; the pairs loaders
(:mod:`rcstat.data.pairs`) on hand-written lines."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat import cli
from rcstat.data import DatasetFormatError, load_dataset, load_pairs
from rcstat.evaluation.grounding_methods import token_file_name
from rcstat.grounding import Grounder, Measurer
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer
from tests.test_cli_ground import TOO_LONG_RESPONSE, _make_profile

PAIRS = [
    {
        "id": "bridge",
        "context": "The bridge was built in 1889 by a team of engineers. It crosses the river.",
        "response": "The bridge was built in 1925. It crosses the river.",
        "question": "When was the bridge built?",
    },
    {
        "context": "Paris is the capital of France. Berlin is the capital of Germany.",
        "response": "Rome is the capital of France.",
    },
]


def _no_model(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the model was loaded before the options were checked")


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_profile(tmp_path_factory.mktemp("profile") / "p.json", 0)


def _assert_same_entry(got: dict[str, Any], want: dict[str, Any]) -> None:
    """Two sentence entries (``Grounding.sentence_dict``) with the same keys, types and values;
    scores to float32 round-off (the command line loads the model from disk)."""
    assert got.keys() == want.keys() == ENTRY_KEYS
    for key in ("score", "weakest_word", "support"):
        a, b = got[key], want[key]
        if isinstance(a, dict) and isinstance(b, dict):
            assert a.keys() == b.keys()
            number = "score" if key == "weakest_word" else "share"
            assert a[number] == pytest.approx(b[number], rel=1e-4)
            assert {k: v for k, v in a.items() if k != number} == {
                k: v for k, v in b.items() if k != number
            }
        elif isinstance(a, float):
            assert a == pytest.approx(b, rel=1e-4)
        else:
            assert a == b
    for key in ("start", "end", "text", "verdict"):
        assert got[key] == want[key]


#: The keys of a sentence entry in --json, the --pairs rows and Grounding.to_dict.
ENTRY_KEYS = {"start", "end", "text", "score", "verdict", "support", "weakest_word"}


def _ground(model_dir: Path, profile: Path, out: Path, *extra: str) -> int:
    args = ["ground", "--model", str(model_dir), "--profile", str(profile), "--out", str(out)]
    return cli.main([*args, "--top-k", "5", *extra])


def test_ground_pairs_one_row_per_line_and_resume(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys
) -> None:
    data = _write(tmp_path / "pairs.jsonl", PAIRS)
    out = tmp_path / "out"
    code = _ground(model_dir, profile, out, "--pairs", str(data))
    rows = [json.loads(v) for v in (out / "grounded.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["bridge", "line-2"] and [r["line"] for r in rows] == [1, 2]
    grounder = Grounder(tiny_model("llama"), make_tiny_tokenizer(), profile=profile, top_k=5)
    for row, pair in zip(rows, PAIRS, strict=True):
        want = grounder.ground(pair["context"], pair["response"], pair.get("question"))
        assert row["score"] == pytest.approx(want.score, rel=1e-5)
        assert row["threshold"] == want.threshold and row["error"] is None
        assert row["verdict"] == ("supported" if want.supported else "unsupported")
        assert row["probe_score"] is None  # no probe: null, as in --json
        flagged = [s for s in want.sentences if not s.supported]
        assert [u["text"] for u in row["unsupported"]] == [s.text for s in flagged]
        for u, sentence in zip(row["unsupported"], flagged, strict=True):
            assert pair["response"][u["start"] : u["end"]] == u["text"]
            _assert_same_entry(u, want.sentence_dict(sentence))  # the one schema
    summary = json.loads((out / "summary.json").read_text())
    assert summary["supported"] + summary["unsupported"] == 2 and summary["error"] == 0
    assert code == (1 if summary["unsupported"] else 0)  # the verdicts are the exit status
    assert "2 pairs:" in capsys.readouterr().out
    # run again: resumed, nothing computed (the model would be loaded, but never called)
    before = (out / "grounded.jsonl").read_text()
    monkeypatch.setattr(Measurer, "measure_batch", _no_model)
    assert _ground(model_dir, profile, out, "--pairs", str(data)) == code
    assert (out / "grounded.jsonl").read_text() == before
    # one more line: only it is computed
    monkeypatch.undo()
    _write(data, [*PAIRS, {"id": "x", "context": "A cat sat.", "response": "A dog sat."}])
    assert _ground(model_dir, profile, out, "--pairs", str(data)) in (0, 1)
    after = (out / "grounded.jsonl").read_text()
    assert after.startswith(before) and len(after.splitlines()) == 3


def test_ground_pairs_in_batches_equal_one_pair_a_pass(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch
) -> None:
    """``--batch-tokens``: pairs share passes (fewer passes than pairs), in rows equal to
    those of one pair a pass, in the order of the file; a bad line keeps its place."""
    lines = [*PAIRS, {"id": "blank", "context": "c", "response": "x" * 3000}, *PAIRS[::-1]]
    lines[3], lines[4] = {**lines[3], "id": "again"}, {**lines[4], "id": "again2"}
    data = _write(tmp_path / "pairs.jsonl", lines)
    passes: list[int] = []
    batch = Measurer.measure_batch

    def counted(self: Measurer, prepared: Any) -> Any:
        passes.append(len(prepared))
        return batch(self, prepared)

    monkeypatch.setattr(Measurer, "measure_batch", counted)
    limit = ("--max-response-tokens", "1000")
    _ground(model_dir, profile, tmp_path / "one", "--pairs", str(data), *limit)
    assert passes == [1, 1, 1, 1]  # on a CPU: one pair a pass
    passes.clear()
    _ground(
        model_dir,
        profile,
        tmp_path / "many",
        "--pairs",
        str(data),
        "--batch-tokens",
        "4000",
        *limit,
    )
    assert sorted(passes) == [4]  # every scored pair in one pass
    one, many = (
        [json.loads(v) for v in (tmp_path / name / "grounded.jsonl").read_text().splitlines()]
        for name in ("one", "many")
    )
    assert [r["id"] for r in many] == ["bridge", "line-2", "blank", "again", "again2"]
    assert many[2]["verdict"] == "error" and "max-response-tokens" in many[2]["error"]
    for got, want in zip(many, one, strict=True):
        assert got.keys() == want.keys() and got["verdict"] == want["verdict"]
        if want.get("score") is not None:
            assert got["score"] == pytest.approx(want["score"], rel=1e-5, abs=1e-7)
        assert [s["text"] for s in got.get("spans", [])] == [
            s["text"] for s in want.get("spans", [])
        ]
    assert (
        _ground(
            model_dir,
            profile,
            tmp_path / "x",
            "--context",
            "c",
            "--response",
            "r",
            "--batch-tokens",
            "9",
        )
        == 2
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([PAIRS[0], {"context": "c"}], "line 2: missing key 'response'"),
        ([PAIRS[0], "not an object"], "line 2: the record must be an object"),
        ([{"context": " ", "response": "r"}], "line 1: key 'context' is empty"),
        ([PAIRS[0], PAIRS[0]], "line 2: duplicate id 'bridge' (also line 1)"),
        ([{**PAIRS[1], "question": 3}], "line 1: key 'question' must be a string"),
    ],
)
def test_ground_pairs_refuses_a_bad_line_before_the_model(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys, lines, message
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_pairs.load_model_quietly", _no_model)
    data = _write(tmp_path / "pairs.jsonl", lines)
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith("error:") and message in printed and '"context": str' in printed
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--pairs", "missing.jsonl"], "--pairs missing.jsonl: no such file"),
        (["--context", "c"], "drop --context"),
        (["--response-file", "r.txt"], "drop --response-file"),
        (["--quantile", "1.5"], "--quantile"),
        (["--threshold", "nan"], "--threshold"),
        (["--threshold", "-1"], "--threshold must be in [0, 1], got -1.0"),
        (["--threshold", "1e308"], "--threshold must be in [0, 1]"),
        (["--probe", "missing.json"], "--probe missing.json: no such file"),
        (["--max-tokens", "1000000000000"], "--max-tokens must be an integer in [128, 131072]"),
        (["--max-tokens", "64"], "--max-tokens must be an integer in [128, 131072]"),
        (["--max-chars", "0"], "--max-chars must be an integer in [1, ∞)"),
        (["--max-response-tokens", "-3"], "--max-response-tokens must be an integer"),
        # every line is checked against --max-chars before the model loads, naming the line
        (["--max-chars", "40"], "line 1: the context has 74 characters, more than --max-chars 40"),
    ],
)
def test_ground_pairs_bad_options_exit_2_before_loading(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys, extra, message
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_pairs.load_model_quietly", _no_model)
    data = _write(tmp_path / "pairs.jsonl", PAIRS)
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data), *extra) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith("error:") and message in printed
    assert not out.exists()


def test_ground_pairs_refuses_a_response_without_words_and_a_huge_line_before_the_model(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys
) -> None:
    """A response of punctuation alone cannot be supported, and a 10 MB line would run for many
    minutes: both are refused, naming the line, before the model loads."""
    monkeypatch.setattr("rcstat.cli.ground_pairs.load_model_quietly", _no_model)
    out = tmp_path / "out"
    wordless = _write(
        tmp_path / "a.jsonl", [PAIRS[0], {"context": "c", "response": "?!?! ... !!!"}]
    )
    assert _ground(model_dir, profile, out, "--pairs", str(wordless)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith("error:") and f"--pairs {wordless} line 2:" in printed
    assert "the response has no word" in printed
    huge = _write(tmp_path / "b.jsonl", [{"context": "word " * 2_000_000, "response": "ok"}])
    assert _ground(model_dir, profile, out, "--pairs", str(huge)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "line 1: the context has 10,000,000 characters, more than --max-chars 100,000" in printed
    assert "pass a larger --max-chars" in printed
    assert not out.exists()


def test_ground_pairs_refuses_an_out_it_cannot_write_before_the_model(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("rcstat.cli.ground_pairs.load_model_quietly", _no_model)
    data = _write(tmp_path / "pairs.jsonl", PAIRS)
    (tmp_path / "file.txt").write_text("not a folder")
    out = tmp_path / "file.txt" / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith(f"error: --out {out}:") and "is a file, not a folder" in printed
    # a read-only folder (simulated: the tests may run as root, whom no mode stops)
    folder = tmp_path / "read-only"
    folder.mkdir()

    def refuse(*args: Any, dir: Any = None, **kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied", str(Path(dir) / ".tmp-name"))

    monkeypatch.setattr("rcstat.runs.folder.tempfile.mkdtemp", refuse)
    assert _ground(model_dir, profile, folder / "out", "--pairs", str(data)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert printed.startswith(f"error: --out {folder / 'out'} cannot be written")
    assert "Permission denied" in printed and ".tmp-name" not in printed
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "lines", "status", "verdicts"),
    [
        (["--threshold", "0"], PAIRS, 0, {"supported": 2}),
        (["--threshold", "1"], PAIRS, 1, {"unsupported": 2}),
        # a response too long for the pass: checked up to where it fits, the rest unverified
        (
            ["--threshold", "0", "--max-tokens", "256"],
            [*PAIRS, {"context": PAIRS[0]["context"], "response": TOO_LONG_RESPONSE}],
            3,
            {"supported": 2, "unverified": 1},
        ),
        # a response over --max-response-tokens is not scored (its row says why): not verified
        (
            ["--threshold", "0", "--max-response-tokens", "9"],
            PAIRS,
            3,
            {"supported": 1, "error": 1},
        ),
        (
            ["--threshold", "1", "--max-response-tokens", "9"],
            PAIRS,
            1,
            {"unsupported": 1, "error": 1},
        ),
    ],
)
def test_ground_pairs_exit_status_reflects_the_verdicts(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, extra, lines, status, verdicts
) -> None:
    """1 when a pair is unsupported, else 3 when one is unverified or not scored, else 0."""
    data = _write(tmp_path / "pairs.jsonl", lines)
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data), *extra) == status
    summary = json.loads((out / "summary.json").read_text())
    assert {k: v for k, v in summary.items() if v} == verdicts
    rows = [json.loads(v) for v in (out / "grounded.jsonl").read_text().splitlines()]
    for row in rows:
        if row["verdict"] == "error":
            assert "more than max_response_tokens=9" in row["error"]
            assert "--max-response-tokens 9" in row["error"]
        for entry in row.get("unsupported", []) + row.get("unverified", []):
            assert entry.keys() == ENTRY_KEYS and entry["verdict"] in ("unsupported", "unverified")


def test_ground_pairs_help_documents_its_exit_status() -> None:
    from rcstat.cli import build_parser
    from rcstat.cli.exit_codes import PAIRS_EXIT_CODES

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["ground"].format_help().split())
    for code, meaning in PAIRS_EXIT_CODES.items():
        assert f"{code} {' '.join(meaning.split())}" in text
    assert set(PAIRS_EXIT_CODES) == {0, 1, 2, 3, 130}
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "`rcstat ground --pairs` exits" in " ".join(readme.split())


def test_ground_pairs_refuses_a_folder_of_other_settings(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys
) -> None:
    data = _write(tmp_path / "pairs.jsonl", PAIRS[1:])
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data), "--threshold", "0") == 0
    monkeypatch.setattr("rcstat.cli.ground_pairs.load_model_quietly", _no_model)
    capsys.readouterr()
    other = ["--threshold", "0", "--quantile", "0.5"]
    assert _ground(model_dir, profile, out, "--pairs", str(data), *other) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "other settings" in printed and "quantile" in printed


def test_load_pairs_reads_ids_and_questions(tmp_path: Path) -> None:
    pairs = load_pairs(_write(tmp_path / "p.jsonl", PAIRS))
    assert [(p.id, p.question, p.line) for p in pairs] == [
        ("bridge", PAIRS[0]["question"], 1),
        ("line-2", None, 2),
    ]


# ------------------------------------------------------ bench grounding --dataset jsonl

LABELLED = [
    {**PAIRS[0], "label": 1, "spans": [[24, 28]]},
    {"id": "ok", "context": PAIRS[0]["context"], "response": "It crosses the river.", "label": 0},
    {**PAIRS[1], "id": "rome", "label": 1, "spans": [[0, 4]], "group": "capitals"},
    {
        "id": "berlin",
        "context": PAIRS[1]["context"],
        "response": "Berlin is the capital of Germany.",
        "label": 0,
        "group": "capitals",
    },
]


def test_labelled_pairs_are_grounding_examples(tmp_path: Path) -> None:
    examples = load_dataset("jsonl", _write(tmp_path / "l.jsonl", LABELLED))
    assert [e.label for e in examples] == [True, False, True, False]
    assert [e.group for e in examples] == ["bridge", "ok", "capitals", "capitals"]
    assert examples[0].span_texts == ("1925",) and examples[0].spans[0].hallucinated()
    assert examples[0].meta["question"] == PAIRS[0]["question"]
    assert "question" not in examples[1].meta


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"label": 2}, "line 1: key 'label' must be 0 or 1"),
        ({"label": True}, "line 1: key 'label' must be an integer"),
        ({"spans": [[3, 99]]}, "line 1: spans[0] must be [start, end]"),
        ({"spans": [[5, 5]]}, "line 1: spans[0] must be [start, end]"),
        ({"id": ""}, "line 1: key 'id' is empty"),
    ],
)
def test_labelled_pairs_refuse_a_bad_line(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = _write(tmp_path / "l.jsonl", [{**LABELLED[0], **change}])
    with pytest.raises(DatasetFormatError, match="expected: your labelled pairs") as err:
        load_dataset("jsonl", path)
    assert message in str(err.value)


def _bench(model_dir: Path, out: Path, *extra: str) -> int:
    args = ["bench", "grounding", "--model", str(model_dir), "--resamples", "20"]
    return cli.main([*args, "--out", str(out), *extra])


def test_bench_grounding_on_labelled_pairs(model_dir, profile, tmp_path) -> None:  # type: ignore[no-untyped-def]
    more = [  # five groups: the span-level probe's folds
        {"id": f"more{k}", "context": PAIRS[0]["context"], "response": text, "label": k}
        for k, text in enumerate(["It crosses the river.", "It crosses the sea."])
    ]
    data = _write(tmp_path / "l.jsonl", [*LABELLED, *more])
    out = tmp_path / "bench"
    args = ["--dataset", "jsonl", "--data", str(data), "--profile", str(profile)]
    assert _bench(model_dir, out, *args) == 0
    rows = [json.loads(v) for v in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == [True, False, True, False, False, True]
    grounder = Grounder(tiny_model("llama"), make_tiny_tokenizer(), profile=profile, top_k=5)
    want = grounder.ground(PAIRS[0]["context"], PAIRS[0]["response"], PAIRS[0]["question"])
    assert rows[0]["scores"]["rcstat"] == pytest.approx(want.score, rel=1e-5)
    assert len(list((out / "tokens").glob("*.npz"))) == 6  # the spans are evaluated
    report = json.loads((out / "report.json").read_text())
    assert report["dataset"] == "jsonl" and report["positives"] == 3
    assert report["spans"] != {"note": "no annotated span"}  # read (too few groups to fit)
    with np.load(out / "tokens" / token_file_name("bridge")) as tokens:
        assert tokens["label"].any() and not tokens["label"].all()  # "1925" only
    # the same rows when the items share passes
    assert _bench(model_dir, tmp_path / "batched", *args, "--batch-tokens", "3000") == 0
    batched = (tmp_path / "batched" / "predictions.jsonl").read_text().splitlines()
    for got, want in zip(map(json.loads, batched), rows, strict=True):
        assert got["verdict"] == want["verdict"] and got["spans"] == want["spans"]
        assert got["scores"] == pytest.approx(want["scores"], rel=1e-4, abs=1e-6)
        np.testing.assert_allclose(got["head_features"], want["head_features"], atol=2e-5)


def test_bench_grounding_jsonl_refuses_a_bad_line_before_the_model(  # type: ignore[no-untyped-def]
    model_dir, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr("rcstat.cli.bench.load_model_quietly", _no_model)
    data = _write(tmp_path / "l.jsonl", [LABELLED[0], {**LABELLED[1], "label": "no"}])
    assert _bench(model_dir, tmp_path / "out", "--dataset", "jsonl", "--data", str(data)) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "line 2: key 'label' must be an integer" in printed


def test_bench_grounding_one_class_prints_a_note(model_dir, profile, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    data = _write(tmp_path / "l.jsonl", [LABELLED[0], LABELLED[2]])  # unsupported only
    out = tmp_path / "bench"
    args = ["--dataset", "jsonl", "--data", str(data), "--profile", str(profile)]
    assert _bench(model_dir, out, *args) == 0
    printed = capsys.readouterr().out
    assert "note: no AUROC" in printed and "2 unsupported and 0 supported" in printed
    assert "Empty DataFrame" not in printed and not (out / "roc.png").exists()


def test_ground_pairs_interrupted_says_its_rows_are_kept(  # type: ignore[no-untyped-def]
    model_dir, profile, tmp_path, monkeypatch, capsys
) -> None:
    """Ctrl-C in a ``--pairs`` run keeps the finished rows (a resumable job), and says so."""

    def interrupt(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("rcstat.cli.ground.run_pairs", interrupt)  # `rcstat ground --pairs`
    data = _write(tmp_path / "pairs.jsonl", PAIRS)
    out = tmp_path / "out"
    assert _ground(model_dir, profile, out, "--pairs", str(data)) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        f"interrupted: rows finished so far are kept in {out}; run the same command to resume"
    )
