"""rcstat.runs.parts: parts of a data-parallel run and their merge, on hand-written row files
(no model)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcstat.runs.manifest import RunMismatchError
from rcstat.runs.parts import (
    PARTS,
    RunFiles,
    finish_part,
    merge_if_last,
    merge_parts,
    read_parts,
    start_part,
)
from rcstat.runs.rows import RowFile, append_csv_row, append_jsonl
from rcstat.runs.shards import Shard

FILES = RunFiles(
    "toy",
    (RowFile("rows.csv", "key", ("key", "value")), RowFile("log.jsonl", "key", commit=True)),
    copied=("config.json",),
    folder="blobs",
    key_file=lambda key: f"{key}.bin",
)
MANIFEST = {"kind": "toy", "rcstat": "1", "model": {"name": "m"}, "tokenizer": "t", "options": {}}


def _keys(n: int) -> list[str]:
    return [f"k{i}" for i in range(n)]


def _work(folder: Path, key: str, *, rows: int = 2, commit: bool = True) -> None:
    """What a run writes for one key: its rows, a blob, then the committing line."""
    for j in range(rows):
        append_csv_row(folder / "rows.csv", ("key", "value"), {"key": key, "value": f"{key}.{j}"})
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "blobs" / f"{key}.bin").write_bytes(key.encode())
    if commit:
        append_jsonl(folder / "log.jsonl", {"key": key, "error": None})


def _start(out: Path, shard: Shard, keys: list[str], manifest: dict | None = None) -> Path:
    plan = shard.take(list(enumerate(keys)))
    folder = start_part(out, FILES, shard, plan, {"note": shard.index})
    if not (folder / "run.json").is_file():  # what open_run does for a new part
        (folder / "run.json").write_text(json.dumps(manifest or MANIFEST))
        (folder / "config.json").write_text('{"window": 8}')
    return folder


def _single(out: Path, keys: list[str]) -> None:
    """The files one process writes for ``keys``."""
    out.mkdir(parents=True)
    for key in keys:
        _work(out, key)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 12), count=st.integers(1, 4), order=st.randoms())
def test_merge_equals_one_process_whatever_the_order_of_work(
    tmp_path_factory: pytest.TempPathFactory, n: int, count: int, order: random.Random
) -> None:
    root = tmp_path_factory.mktemp("merge")
    keys = _keys(n)
    _single(root / "one", keys)
    out = root / "dp"
    for index in range(count):
        shard = Shard(index, count, source="--shard")
        folder = _start(out, shard, keys)
        mine = shard.take(keys)
        order.shuffle(mine)  # e.g. retried keys appended at the end
        for key in mine:
            _work(folder, key)
    result = merge_parts(out, FILES)
    assert not result.partial and result.keys == n
    for name in ("rows.csv", "log.jsonl"):
        one, dp = root / "one" / name, out / name
        assert dp.read_bytes() == one.read_bytes() if one.exists() else not dp.exists()
    assert sorted(p.name for p in (out / "blobs").glob("*")) == sorted(f"{k}.bin" for k in keys)
    assert json.loads((out / "run.json").read_text()) == MANIFEST
    assert (out / "config.json").read_text() == '{"window": 8}'


def test_an_incomplete_run_is_refused_or_merged_as_partial(tmp_path: Path) -> None:
    keys = _keys(6)
    out = tmp_path / "run"
    first = _start(out, Shard(0, 3, source="--shard"), keys)
    for key in ["k0", "k3"]:
        _work(first, key)
    second = _start(out, Shard(1, 3, source="--shard"), keys)
    _work(second, "k1")
    _work(second, "k4", commit=False)  # rows written, never committed (killed)
    with pytest.raises(ValueError, match=r"shard 1/3: 1 key\(s\) not done; shard 2/3: no part yet"):
        merge_parts(out, FILES)
    assert not merge_parts(out, FILES, when_complete=True).merged
    assert not (out / "rows.csv").exists()
    cut = second / "log.jsonl"
    cut.write_text(cut.read_text() + '{"key": "k4", "err')  # a write cut short
    before = cut.read_bytes()
    result = merge_parts(out, FILES, partial=True)
    assert result.partial and result.missing == {0: 0, 1: 1, 2: -1}
    assert cut.read_bytes() == before  # parts are read, never changed
    merged = (out / "rows.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in merged[1:]] == ["k0", "k0", "k1", "k1", "k3", "k3"]
    assert finish_part(first, FILES) == 3 and finish_part(second, FILES) is None


def test_the_last_part_merges_once(tmp_path: Path) -> None:
    keys = _keys(4)
    out = tmp_path / "run"
    parts = [_start(out, Shard(i, 2, source="--shard"), keys) for i in range(2)]
    for key in ["k0", "k2"]:
        _work(parts[0], key)
    assert not merge_if_last(out, parts[0], FILES)  # shard 1 not done
    for key in ["k1", "k3"]:
        _work(parts[1], key)
    assert merge_if_last(out, parts[1], FILES)
    assert not merge_if_last(out, parts[0], FILES)  # nothing changed since: no second merge
    assert json.loads((parts[0] / "shard.json").read_text())["complete"]
    assert [p.settings for p in read_parts(out)] == [{"note": 0}, {"note": 1}]


def test_parts_must_come_from_one_run(tmp_path: Path) -> None:
    keys = _keys(4)
    out = tmp_path / "run"
    for i in range(2):
        _work(_start(out, Shard(i, 2, source="--shard"), keys), f"k{i}")
        _work(out / PARTS / f"{i}-of-2", f"k{i + 2}")
    other = {**MANIFEST, "options": {"max_new_tokens": 8}}
    (out / PARTS / "1-of-2" / "run.json").write_text(json.dumps(other))
    with pytest.raises(RunMismatchError, match=r"max_new_tokens: .*absent"):
        merge_parts(out, FILES)
    (out / PARTS / "1-of-2" / "run.json").write_text(json.dumps({**MANIFEST, "kind": "heads"}))
    with pytest.raises(ValueError, match="holds a `heads` run, not `toy`"):
        merge_parts(out, FILES)
    (out / PARTS / "1-of-2" / "run.json").write_text(json.dumps(MANIFEST))
    state = json.loads((out / PARTS / "1-of-2" / "shard.json").read_text())
    state["plan"].append([0, "k0"])  # shard 0's key
    (out / PARTS / "1-of-2" / "shard.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="'k0' is planned by shards 0 and 1"):
        merge_parts(out, FILES)


def test_a_new_part_starts_from_the_merged_rows(tmp_path: Path) -> None:
    keys = _keys(5)
    out = tmp_path / "run"
    _single(out, keys[:3])  # a single-process run did k0..k2
    (out / "run.json").write_text(json.dumps(MANIFEST))
    parts = [_start(out, Shard(i, 2, source="--shard"), keys) for i in range(2)]
    for part in parts:  # seeded: the manifest and the rows of the part's own keys
        assert json.loads((part / "run.json").read_text()) == MANIFEST
    assert (parts[0] / "rows.csv").read_text().count("k0,") == 2
    assert "k1" not in (parts[0] / "rows.csv").read_text()
    assert (parts[1] / "blobs" / "k1.bin").is_file()
    _work(parts[0], "k4")
    _work(parts[1], "k3")
    merge_parts(out, FILES)
    _single(tmp_path / "one", keys)
    for name in ("rows.csv", "log.jsonl"):
        assert (out / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    # another number of shards after the merge recomputes nothing: seeded whole
    thirds = [_start(out, Shard(i, 3, source="--shard"), keys) for i in range(3)]
    assert all(finish_part(part, FILES) == 3 for part in thirds)
    with pytest.raises(ValueError, match=r"parts of \[2, 3\] shards"):
        read_parts(out)
    assert merge_parts(out, FILES, count=3).keys == 5
    assert (out / "rows.csv").read_bytes() == (tmp_path / "one" / "rows.csv").read_bytes()


def test_merged_rows_of_keys_no_part_holds_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _single(out, ["old"])  # rows of an example no longer asked for
    (out / "run.json").write_text(json.dumps(MANIFEST))
    part = _start(out, Shard(0, 2, source="--shard"), ["k0", "k1"])
    _work(part, "k0")
    _start(out, Shard(1, 2, source="--shard"), ["k0", "k1"])
    _work(out / PARTS / "1-of-2", "k1")
    merge_parts(out, FILES)
    keys = [json.loads(line)["key"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert keys == ["k0", "k1", "old"]
    (out / "run.json").write_text(json.dumps({**MANIFEST, "tokenizer": "other"}))
    with pytest.raises(RunMismatchError, match="already holds merged rows"):
        merge_parts(out, FILES)


def test_a_plan_with_repeated_keys_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repeats keys"):
        start_part(tmp_path, FILES, Shard(0, 2, source="--shard"), [(0, "a"), (2, "a")])
    with pytest.raises(ValueError, match="no parts"):
        read_parts(tmp_path / "nothing")
