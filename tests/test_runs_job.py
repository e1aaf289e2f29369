"""rcstat.runs.job: one driver for every dataset job, on a toy job (no language model).

Oracles: the rows a single call writes by hand; the files of a single-process run (a sharded
run must merge into the same bytes); counts of the items each call runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from rcstat.evaluation.bench.registry import JOBS, job_kind, run_summary
from rcstat.runs.job import Item, Job, check_run_folder, run_job
from rcstat.runs.manifest import RunMismatchError
from rcstat.runs.parts import RunFiles
from rcstat.runs.rows import RowFile, read_csv_rows, read_jsonl
from rcstat.runs.shards import Shard


class _Tokenizer:
    def get_vocab(self) -> dict[str, int]:
        return {"a": 0, "b": 1}


FILES = RunFiles(
    "toy",
    (
        RowFile("cells.csv", "key", ("key", "cell", "value")),
        RowFile("log.jsonl", "key", commit=True),
    ),
)


@dataclass
class Toy(Job):
    """Item ``k`` of text ``t`` writes ``len(t)`` cells and one log line; ``fail`` fails."""

    kind: ClassVar[str] = "toy"
    files: ClassVar[RunFiles] = FILES

    texts: dict[str, str]
    fail: set[str] = field(default_factory=set)
    ran: list[str] = field(default_factory=list)
    model: torch.nn.Module = field(default_factory=lambda: torch.nn.Linear(2, 2))

    def source(self) -> tuple[Any, Any, str | None]:
        return self.model, _Tokenizer(), "toy-model"

    def manifest_options(self) -> dict[str, Any]:
        return {"width": 3}

    def items(self) -> list[Item]:
        return [Item(k, f"h-{t}", i, t) for i, (k, t) in enumerate(self.texts.items())]

    def expected_rows(self) -> dict[str, int]:
        return {"cells.csv": 3}

    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        self.ran.append(item.key)
        line = {"key": item.key, "example_hash": item.hash, "error": None}
        if item.key in self.fail:
            return {"log.jsonl": [{**line, "error": "ValueError: no"}]}
        cells = [{"key": item.key, "cell": c, "value": item.data * c} for c in range(3)]
        return {"cells.csv": cells, "log.jsonl": [line]}


def test_run_resume_redo_and_retry(tmp_path: Path) -> None:
    texts = {"a": "x", "b": "y", "c": "z"}
    job = Toy(texts, fail={"b"})
    done = run_job(job, tmp_path, progress=False)
    assert (done.ran, done.errors) == (3, {"b": "ValueError: no"})
    assert [r["key"] for r in read_csv_rows(tmp_path / "cells.csv", FILES.rows[0].columns or ())] \
        == ["a"] * 3 + ["c"] * 3  # fmt: skip
    again = Toy(texts, fail={"b"}, model=job.model)
    assert run_job(again, tmp_path, retry_failed=False, progress=False).ran == 0
    fixed = Toy({**texts, "c": "changed"}, model=job.model)
    assert run_job(fixed, tmp_path, progress=False).ran == 2
    assert sorted(fixed.ran) == ["b", "c"]  # the failure retried, the changed item redone
    log = read_jsonl(tmp_path / "log.jsonl")
    assert [(v["key"], v["error"]) for v in log] == [("a", None), ("b", None), ("c", None)]
    cells = read_csv_rows(tmp_path / "cells.csv", ("key", "cell", "value"))
    assert [r["value"] for r in cells if r["key"] == "c"] == ["", "changed", "changedchanged"]


def test_rows_cut_between_two_files_are_computed_again(tmp_path: Path) -> None:
    job = Toy({"a": "x", "b": "y"})
    run_job(job, tmp_path, progress=False)
    path = tmp_path / "cells.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # b's last cell lost, its log line kept
    again = Toy({"a": "x", "b": "y"}, model=job.model)
    assert run_job(again, tmp_path, progress=False).ran == 1 and again.ran == ["b"]
    assert path.read_text() == "".join(lines)


def test_another_setting_is_refused_before_any_work(tmp_path: Path) -> None:
    run_job(Toy({"a": "x"}), tmp_path, progress=False)
    (tmp_path / ".rcstat-output.json").write_text('{"command": "toy", "files": []}')
    check_run_folder(tmp_path, "toy", {"width": 3})
    with pytest.raises(RunMismatchError, match="width: 3 in the run, 4 now"):
        check_run_folder(tmp_path, "toy", {"width": 4})
    with pytest.raises(ValueError, match="holds the output of `rcstat toy`"):
        check_run_folder(tmp_path, "heads", {})
    other = Toy({"a": "x"})  # other parameters: another model
    with pytest.raises(RunMismatchError, match=r"model\.weights"):
        run_job(other, tmp_path, progress=False)


@pytest.mark.parametrize("count", [2, 3])
def test_shards_merge_into_the_single_process_files(tmp_path: Path, count: int) -> None:
    texts = {f"k{i}": "ab"[i % 2] * (i + 1) for i in range(7)}
    model = torch.nn.Linear(2, 2)
    single = tmp_path / "single"
    run_job(Toy(texts, model=model), single, progress=False)
    out = tmp_path / "dp"
    results = [
        run_job(Toy(texts, model=model), out, shard=Shard(i, count, source="--shard"),
                settings={"n": i}, progress=False)
        for i in reversed(range(count))
    ]  # fmt: skip
    assert [r.merged for r in results] == [False] * (count - 1) + [True]
    assert sorted(k for r in results for k in (i.key for i in r.items)) == sorted(texts)
    for name in ("cells.csv", "log.jsonl"):
        assert (out / name).read_bytes() == (single / name).read_bytes()


@dataclass
class PerExample(Toy):
    """Example ``i`` (text ``t``) is ``len(t)`` items ``<k>/<j>``: items and examples differ."""

    def items(self) -> list[Item]:
        return [
            Item(f"{k}/{j}", f"h-{t}-{j}", i, t)
            for i, (k, t) in enumerate(self.texts.items())
            for j in range(len(t))
        ]


@pytest.mark.parametrize("count", [2, 3])
def test_shards_take_whole_examples_round_robin(tmp_path: Path, count: int) -> None:
    """Several items per example: shard ``i`` of ``count`` holds every item of the examples
    ``i, i + count, …`` and no other; the parts merge into the single-process files."""
    texts = {"k0": "aaa", "k1": "b", "k2": "cc", "k3": "ddd", "k4": "ee", "k5": "f"}
    keys = {k: [f"{k}/{j}" for j in range(len(t))] for k, t in texts.items()}
    model = torch.nn.Linear(2, 2)
    for i in range(count):
        job = PerExample(texts, model=model)
        done = run_job(job, None, shard=Shard(i, count, source="--shard"), progress=False)
        want = [key for e, k in enumerate(texts) if e % count == i for key in keys[k]]
        assert [item.key for item in done.items] == want
        assert job.ran == want
    single = tmp_path / "single"
    run_job(PerExample(texts, model=model), single, progress=False)
    out = tmp_path / "dp"
    for i in range(count):
        run_job(PerExample(texts, model=model), out, shard=Shard(i, count, source="--shard"),
                progress=False)  # fmt: skip
    for name in ("cells.csv", "log.jsonl"):
        assert (out / name).read_bytes() == (single / name).read_bytes()


def test_without_a_folder_the_rows_come_back() -> None:
    done = run_job(Toy({"a": "x", "b": "y"}, fail={"b"}), None, progress=False)
    assert done.folder is None and done.errors == {"b": "ValueError: no"}
    assert len(done.rows["cells.csv"]) == 3 and len(done.rows["log.jsonl"]) == 2


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    class Twice(Toy):
        def items(self) -> list[Item]:
            return [Item("a", "h", 0), Item("a", "h", 1)]

    with pytest.raises(ValueError, match="duplicate item key 'a'"):
        run_job(Twice({}), tmp_path, progress=False)


def test_every_registered_kind_names_its_job_and_summary() -> None:
    for kind in JOBS:
        job = job_kind(kind)
        assert job.kind == kind == job.files.kind
        assert job.files.commit in job.files.rows
        assert callable(run_summary(kind))
    for lookup in (job_kind, run_summary):
        with pytest.raises(ValueError, match="not a job of rcstat"):
            lookup("bench nothing")
