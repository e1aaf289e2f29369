"""rcstat.cli._common: staged outputs that never replace files rcstat did not write, text
options (files, standard input), checked numbers."""

from __future__ import annotations

import argparse
import io
import json
import os
from pathlib import Path

import pytest

from rcstat.cli._common import (
    OUTPUT_MARKER,
    Devices,
    check_output_folder,
    claim_output_folder,
    float_list,
    int_list,
    read_texts,
    staged_output,
)


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_staged_output_leaves_nothing_on_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), staged_output(out, "analyze") as stage:
        assert stage.parent == tmp_path and stage.name.startswith(".out.")
        (stage / "a.txt").write_text("partial")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_staged_output_keeps_an_existing_folder_on_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with staged_output(out, "analyze") as stage:
        (stage / "a.txt").write_text("old")
    with pytest.raises(ValueError, match="late"), staged_output(out, "analyze") as stage:
        (stage / "a.txt").write_text("new")
        raise ValueError("late")
    assert _names(tmp_path) == ["out"]
    assert (out / "a.txt").read_text() == "old"


def test_a_rerun_replaces_its_own_files_and_removes_its_stale_ones(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "out"
    with staged_output(out, "analyze") as stage:
        (stage / "a.txt").write_text("first a")
        (stage / "b.txt").write_text("first b")
        assert not out.exists()  # nothing is visible before success
    assert _names(out) == [OUTPUT_MARKER, "a.txt", "b.txt"]

    (out / "notes.txt").write_text("user file")  # a user's file in rcstat's folder
    with staged_output(out, "analyze") as stage:
        (stage / "a.txt").write_text("second a")
        (stage / "c.txt").write_text("second c")
    assert {p.name: p.read_text() for p in out.iterdir() if p.name != OUTPUT_MARKER} == {
        "a.txt": "second a",
        "c.txt": "second c",
        "notes.txt": "user file",  # never touched: rcstat did not write it
    }
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker == {"command": "analyze", "files": ["a.txt", "c.txt"]}
    assert _names(out.parent) == ["out"]  # staging folders are gone


def test_a_folder_rcstat_did_not_write_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "scores.csv").write_text("my own results")
    with pytest.raises(ValueError, match="not written by rcstat"), staged_output(out, "analyze"):
        pytest.fail("the body must not run")
    assert (out / "scores.csv").read_text() == "my own results"
    assert _names(tmp_path) == ["mine"]


def test_a_folder_of_another_command_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with staged_output(out, "attribute") as stage:
        (stage / "attribution.csv").write_text("x")
    with pytest.raises(ValueError, match="rcstat attribute"), staged_output(out, "analyze"):
        pytest.fail("the body must not run")
    with pytest.raises(ValueError, match="rcstat attribute"):
        claim_output_folder(out, "heads")


def test_a_folder_being_claimed_by_another_shard_is_not_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The processes of one torchrun claim the folder together: one may check it while the
    other's marker is being written (its temporary file, not yet moved into place), which is
    not a foreign file. The other shard checks in that window, with the real temporary file."""
    out = tmp_path / "dp"
    out.mkdir()
    seen: list[list[str]] = []
    move = os.replace

    def other_shard_checks_first(source: str, target: str) -> None:
        if Path(target).name == OUTPUT_MARKER:
            seen.append(sorted(entry.name for entry in out.iterdir()))
            check_output_folder(out, "heads")
        move(source, target)

    monkeypatch.setattr(os, "replace", other_shard_checks_first)
    claim_output_folder(out, "heads")
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0] != OUTPUT_MARKER  # in flight
    monkeypatch.setattr(os, "replace", move)
    claim_output_folder(out, "heads")  # the marker is there now: the same command's folder
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.tmp").write_text("mine")
    with pytest.raises(ValueError, match="not written by rcstat"):
        claim_output_folder(tmp_path / "foreign", "heads")


def test_a_file_as_out_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "file"
    out.write_text("x")
    with pytest.raises(ValueError, match="is a file"), staged_output(out, "analyze"):
        pytest.fail("the body must not run")


def test_resumable_runs_keep_their_rows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim_output_folder(out, "heads")
    (out / "heads.csv").write_text("rows")
    with staged_output(out, "heads", keep=["heads.csv"]) as stage:
        (stage / "summary.json").write_text("{}")
    with staged_output(out, "heads", keep=["heads.csv"]) as stage:
        (stage / "summary.md").write_text("#")
    assert _names(out) == [OUTPUT_MARKER, "heads.csv", "summary.md"]


def _text_namespace(**values: str | None) -> argparse.Namespace:
    names = ("context", "question")
    fields = {n: None for n in names} | {f"{n}_file": None for n in names}
    return argparse.Namespace(**(fields | values))


def test_text_options_read_files_and_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.txt"
    path.write_text("from a file", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin"))
    ns = _text_namespace(context_file=str(path), question_file="-")
    assert read_texts(ns, ["context", "question"]) == {
        "context": "from a file",
        "question": "from stdin",
    }


def test_text_option_conflicts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--context or --context-file"):
        read_texts(_text_namespace(context="a", context_file="b"), ["context", "question"])
    with pytest.raises(ValueError, match="only one option can read standard input"):
        read_texts(_text_namespace(context_file="-", question_file="-"), ["context", "question"])
    with pytest.raises(ValueError, match="cannot read --context-file"):
        read_texts(_text_namespace(context_file=str(tmp_path / "nope")), ["context"])


@pytest.mark.parametrize("bad", ["nan", "inf", "-0.1", "1.0", "x"])
def test_ratio_lists_refuse_bad_values(bad: str) -> None:
    with pytest.raises(ValueError, match="--ratios"):
        float_list("--ratios", ["0.5", bad], low=0, high=1, high_open=True)


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "x"])
def test_int_lists_refuse_bad_values(bad: str) -> None:
    with pytest.raises(ValueError, match="--window"):
        int_list("--window", ["8", bad])


def test_device_plan_defaults_and_load_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from rcstat.runs import devices as devices_module

    default = Devices.from_namespace(argparse.Namespace(device=None, device_map=None, dtype=None))
    gpu = torch.cuda.is_available()
    assert default.load_kwargs() == {"device": "cuda" if gpu else None, "dtype": None}
    monkeypatch.setattr(devices_module, "visible_gpus", lambda: 1)  # --device-map needs a GPU
    mapped = Devices.from_namespace(argparse.Namespace(device=None, device_map="auto", dtype=None))
    assert mapped.load_kwargs() == {"device_map": "auto", "dtype": "auto"}
    cpu = Devices(device="cpu", dtype="bfloat16")
    assert cpu.load_kwargs() == {"device": None, "dtype": "bfloat16"}
    assert Devices.from_namespace(argparse.Namespace()) == Devices()  # commands without them


def test_a_folder_with_more_examples_than_n_says_so(tmp_path: Path) -> None:
    """Each benchmark counts the examples its run folder holds (its summary describes them
    all); one line says so when ``--n`` asks for fewer, none otherwise."""
    import pandas as pd

    from rcstat.cli._common import folder_note
    from rcstat.cli.bench import BENCHES
    from rcstat.evaluation.bench.results import AttributionResult, GroundingResult, KVResult
    from rcstat.runs.shards import Shard

    shard = Shard()
    results = {
        "kv": KVResult(tmp_path, shard, True, summary=pd.DataFrame({"examples": [6, 5]})),
        "attribution": AttributionResult(
            tmp_path, shard, True, accuracy=pd.DataFrame({"examples": [6, 6]})
        ),
        "grounding": GroundingResult(
            tmp_path, shard, True, report={"dataset": "faithbench", "items": 6}
        ),
    }
    for name, result in results.items():
        assert BENCHES[name].held(result) == 6
        assert BENCHES[name].held(type(result)(tmp_path, Shard(0, 2), False)) is None
    contrast = GroundingResult(
        tmp_path, shard, True, report={"dataset": "squad-contrast", "items": 12}
    )
    assert BENCHES["grounding"].held(contrast) == 6  # a supporting and an unrelated item each
    assert folder_note(6, 4) == (
        "the run folder holds 6 examples, more than --n 4 asks for: the summary describes all 6"
    )
    assert folder_note(6, None) is None and folder_note(6, 6) is None
    assert folder_note(None, 4) is None and folder_note(3, 4) is None
