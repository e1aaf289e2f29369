"""Tests of rcstat.runs (manifests, row files, resume plans) and of the progress helper.

Oracles: hand-written row files cut the way an interrupted write cuts them (mid-line, inside a
quoted CSV field, without the final newline); manifests that differ in one field at a time;
weight files copied, moved and rewritten on disk.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from rcstat.report.console import progress
from rcstat.runs import (
    MANIFEST_FILE,
    RowFileError,
    RunManifest,
    RunMismatchError,
    append_csv_row,
    append_jsonl,
    check_options,
    content_hash,
    describe_model,
    model_label,
    open_run,
    read_csv_rows,
    read_jsonl,
    resume_plan,
    tokenizer_digest,
)
from tests._tiny_models import tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

COLUMNS = ("id", "value", "error")


# ------------------------------------------------------------------------------ hashing


def test_content_hash_is_canonical() -> None:
    a = {"context": "C", "question": "Q", "answers": ("x", "y")}
    b = {"answers": ["x", "y"], "question": "Q", "context": "C"}
    assert content_hash(a) == content_hash(b)
    assert content_hash(a) != content_hash({**a, "context": "C "})
    assert content_hash(a) != content_hash({**a, "answers": ("y", "x")})
    assert len(content_hash(a)) == 64


def test_tokenizer_digest_follows_the_behaviour(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    one = make_tiny_tokenizer()
    saved = AutoTokenizer.from_pretrained(model_dir)  # the same tokenizer, saved and reloaded
    assert tokenizer_digest(saved) == tokenizer_digest(one)
    saved.chat_template = (saved.chat_template or "") + " "
    assert tokenizer_digest(saved) != tokenizer_digest(one)
    other = AutoTokenizer.from_pretrained(model_dir)
    other.add_tokens(["<extra>"])
    assert tokenizer_digest(other) != tokenizer_digest(one)


def test_model_identity_from_files_and_parameters(model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(model_dir)
    identity, files = describe_model(loaded, "tiny")
    assert identity["name"] == "tiny" and identity["dtype"] == "float32"
    assert [Path(f["path"]).name for f in files] == ["model.safetensors"]
    # A moved copy keeps its identity (files are named by file name, not path).
    elsewhere = tmp_path / "copy"
    shutil.copytree(model_dir, elsewhere)
    moved = AutoModelForCausalLM.from_pretrained(elsewhere)
    assert describe_model(moved, "tiny")[0] == identity
    # Other weights at the same path: another identity.
    other = tiny_model("qwen2")
    other.save_pretrained(elsewhere, safe_serialization=True)
    assert describe_model(moved, "tiny")[0]["weights"] != identity["weights"]
    # An unchanged file (same size and modification time) is not hashed again.
    fake = [{**files[0], "sha256": "0" * 64}]
    assert describe_model(loaded, "tiny", known_files=fake)[1] == fake
    # A model built in memory is identified by its parameters.
    in_memory = describe_model(tiny_model("llama"))[0]
    assert in_memory["weights"].startswith("params:")
    assert in_memory == describe_model(tiny_model("llama"))[0]
    changed = copy.deepcopy(tiny_model("llama"))
    with torch.no_grad():
        changed.model.norm.weight[0] += 1e-3
    assert describe_model(changed)[0]["weights"] != in_memory["weights"]
    assert describe_model(changed.to(torch.bfloat16))[0]["dtype"] == "bfloat16"


def test_model_label(tmp_path: Path) -> None:
    assert model_label(None) == "SmolLM2-135M-Instruct"
    assert model_label("org/name") == "org/name"
    assert model_label(str(tmp_path)) == str(tmp_path.resolve())


# ----------------------------------------------------------------------------- manifest


def _manifest(**options: Any) -> RunManifest:
    return RunManifest(
        kind="heads",
        model={"name": "m", "weights": "a" * 64, "dtype": "float32"},
        tokenizer="t" * 64,
        options={"max_new_tokens": 4, "dataset": "squad_v2", **options},
    )


def test_open_run_writes_then_compares_every_field(tmp_path: Path) -> None:
    out = tmp_path / "run"
    open_run(out, _manifest(), rows=("rows.jsonl",))
    data = json.loads((out / MANIFEST_FILE).read_text())
    assert data["kind"] == "heads" and data["options"]["max_new_tokens"] == 4
    assert data["rcstat"]  # the installed version
    open_run(out, _manifest(), rows=("rows.jsonl",))  # the same settings resume
    with pytest.raises(RunMismatchError) as caught:
        open_run(out, _manifest(max_new_tokens=8, dataset="qmsum"), rows=())
    message = str(caught.value)
    assert "max_new_tokens: 4 in the run, 8 now" in message
    assert 'dataset: "squad_v2" in the run, "qmsum" now' in message
    other = _manifest()
    other.model = {**other.model, "weights": "b" * 64}
    with pytest.raises(RunMismatchError, match=r"model\.weights: aaaaaaaaaaaa… in the run"):
        open_run(out, other, rows=())
    other = _manifest(extra=True)
    with pytest.raises(RunMismatchError, match=r"extra: \(absent\) in the run, true now"):
        open_run(out, other, rows=())
    kind = _manifest()
    kind.kind = "bench kv"
    with pytest.raises(RunMismatchError, match="holds a `heads` run, not a `bench kv` run"):
        open_run(out, kind, rows=())
    assert json.loads((out / MANIFEST_FILE).read_text()) == data  # refusals change nothing


def test_check_options_before_the_model_loads(tmp_path: Path) -> None:
    check_options(tmp_path / "absent", "heads", {"max_new_tokens": 4})
    open_run(tmp_path, _manifest(), rows=())
    check_options(tmp_path, "heads", {"max_new_tokens": 4})  # a subset suffices
    with pytest.raises(RunMismatchError, match="max_new_tokens: 4 in the run, 5 now"):
        check_options(tmp_path, "heads", {"max_new_tokens": 5})
    with pytest.raises(RunMismatchError, match="not a `bench kv` run"):
        check_options(tmp_path, "bench kv", {})


def test_rows_without_a_manifest_are_not_resumed(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(RunMismatchError, match=r"rows\.jsonl but no run\.json"):
        open_run(tmp_path, _manifest(), rows=("rows.jsonl",))
    assert not (tmp_path / MANIFEST_FILE).exists()


# ---------------------------------------------------------------------------- row files


def test_jsonl_cut_last_line_is_dropped_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "predictions.jsonl"
    for i in range(3):
        append_jsonl(path, {"id": f"e{i}", "value": i})
    whole = path.read_bytes()
    path.write_bytes(whole[:-7])  # cut inside the third line
    with caplog.at_level(logging.WARNING, logger="rcstat.runs"):
        records = read_jsonl(path)
    assert [r["id"] for r in records] == ["e0", "e1"]
    assert f"{path}, line 3: cut-off last line" in caplog.text
    assert path.read_bytes() == whole[: whole.rfind(b'{"id": "e2"')]  # truncated in place
    append_jsonl(path, {"id": "e2", "value": 2})
    assert path.read_bytes() == whole  # the next append starts a fresh line


def test_jsonl_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a"}\n{"id": "b"}')  # complete, only the newline is missing
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b"]
    append_jsonl(path, {"id": "c"})
    assert [r["id"] for r in read_jsonl(path)] == ["a", "b", "c"]


def test_jsonl_corrupt_middle_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a"}\n{"id": \n{"id": "c"}\n')
    with pytest.raises(RowFileError, match=r"p\.jsonl, line 2: not a row of this run"):
        read_jsonl(path)
    path.write_text('{"id": "a"}\n[1, 2]\n{"id": "c"}\n')
    with pytest.raises(RowFileError, match=r"line 2: .*a JSON list, not an object"):
        read_jsonl(path)
    assert read_jsonl(tmp_path / "absent.jsonl") == []


@pytest.mark.parametrize(
    "cut",
    [
        lambda text: text[:-1],  # the newline of the last row is missing
        lambda text: text[: text.rindex(",")],  # cut between two fields
        lambda text: text[: text.rindex("two") + 2],  # cut inside a quoted field
    ],
)
def test_csv_cut_last_row_is_dropped(tmp_path: Path, caplog: pytest.LogCaptureFixture, cut) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "examples.csv"
    append_csv_row(path, COLUMNS, {"id": "a", "value": "1", "error": ""})
    append_csv_row(path, COLUMNS, {"id": "b", "value": "2", "error": "line one\nline two"})
    assert [r["error"] for r in read_csv_rows(path, COLUMNS)] == ["", "line one\nline two"]
    path.write_text(cut(path.read_text()))
    with caplog.at_level(logging.WARNING, logger="rcstat.runs"):
        rows = read_csv_rows(path, COLUMNS)
    assert rows == [{"id": "a", "value": "1", "error": ""}]
    assert f"{path}, line 3: cut-off last row" in caplog.text
    append_csv_row(path, COLUMNS, {"id": "c", "value": "3", "error": ""})
    assert [r["id"] for r in read_csv_rows(path, COLUMNS)] == ["a", "c"]


def test_csv_bad_middle_row_and_header_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "examples.csv"
    path.write_text("id,value,error\na,1,\nb,2\nc,3,\n")
    with pytest.raises(RowFileError, match=r"examples\.csv, line 3: 2 fields, expected 3"):
        read_csv_rows(path, COLUMNS)
    path.write_text('id,value,error\na,"1"x,\nc,3,\n')
    with pytest.raises(RowFileError, match="line 2: not a CSV row"):
        read_csv_rows(path, COLUMNS)
    path.write_text("id,other\na,1\n")
    with pytest.raises(RowFileError, match="line 1: header"):
        read_csv_rows(path, COLUMNS)


# ------------------------------------------------------------------------------ resuming


def test_resume_plan_keeps_redoes_and_retries() -> None:
    records = [
        {"key": "same", "example_hash": "h1", "error": None},
        {"key": "changed", "example_hash": "old", "error": None},
        {"key": "failed", "example_hash": "h3", "error": "ValueError: x"},
        {"key": "same", "example_hash": "h1", "error": None},  # a repeated line
        {"key": "elsewhere", "example_hash": "h9", "error": None},  # not asked for now
    ]
    wanted = {"same": "h1", "changed": "new", "failed": "h3", "fresh": "h4"}
    plan = resume_plan(records, wanted, key="key")
    assert plan.done == {"same"}
    assert [r["key"] for r in plan.keep] == ["same", "elsewhere"]
    assert (plan.changed, plan.retried, plan.duplicates) == (["changed"], ["failed"], ["same"])
    assert plan.dropped == 3
    kept = resume_plan(records, wanted, key="key", retry_failed=False)
    assert kept.done == {"same", "failed"} and kept.retried == []


# ------------------------------------------------------------------------------ progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_prints_plain_lines_without_a_terminal() -> None:
    log = io.StringIO()
    assert list(progress(range(40), desc="heads", unit="example", stream=log)) == list(range(40))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("heads: 0/40 example (") and lines[-1].startswith("heads: 40/40")
    assert len(lines) == 1 + 20  # the start, then every twentieth
    log = io.StringIO()
    assert list(progress(iter("ab"), desc="x", stream=log)) == ["a", "b"]  # no length
    assert log.getvalue().splitlines()[-1].startswith("x: 2 item")
    log = io.StringIO()
    assert list(progress(range(3), desc="quiet", enabled=False, stream=log)) == [0, 1, 2]
    assert log.getvalue() == ""


def test_progress_draws_a_bar_on_a_terminal() -> None:
    screen = _Terminal()
    assert list(progress(range(5), desc="bar", stream=screen)) == list(range(5))
    assert "\r" in screen.getvalue() and "bar" in screen.getvalue()
