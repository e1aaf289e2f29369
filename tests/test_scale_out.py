"""Data-parallel runs end to end on the CPU: ``torchrun --nproc_per_node 2`` (and processes
started by hand with torchrun's variables) on the tiny model, against a single-process run of
the same command.

Every run here is a subprocess with one thread (``OMP_NUM_THREADS=1``, torchrun's own setting
for several processes per machine), so that the single-process reference computes with the
same kernels and the merged files can be compared byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rcstat.press.extra import has_kvpress
from tests.test_cli_ground import _faithbench_documents, _make_profile
from tests.test_data import _quotesum_record, _squad_doc, _write_json, _write_jsonl

# processes launched one after another, minutes in all
pytestmark = pytest.mark.long(seconds=260)

_ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    return {**env, **_ENV, **extra}


def _cli(*args: str, nproc: int = 1, **env: str) -> subprocess.CompletedProcess[str]:
    """``rcstat ARGS`` as one process, or under ``torchrun --nproc_per_node nproc``."""
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    command = [*launcher, "-m", "rcstat", *args]
    done = subprocess.run(command, env=_env(**env), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _jsonl(path: Path, count: int, words: int = 4) -> Path:
    records = [
        {
            "id": f"ex{i}",
            "context": f"The cat number {i} sat on the warm mat near door {i}. " * words,
            "question": f"Where did cat {i} sit?",
            "answer": f"On the mat near door {i}.",
        }
        for i in range(count)
    ]
    return _write_jsonl(path, records)


def _without_seconds(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False).drop(columns="seconds")


def _check_parts(out: Path, count: int, row_file: str, key: str, wanted: set[str]) -> None:
    """Parts of ``count`` shards: disjoint plans covering ``wanted``, each row file with the
    merged file's header."""
    parts = sorted((out / "parts").glob(f"*-of-{count}"))
    assert [p.name for p in parts] == [f"{i}-of-{count}" for i in range(count)]
    plans = [{k for _, k in json.loads((p / "shard.json").read_text())["plan"]} for p in parts]
    assert set().union(*plans) == wanted and sum(map(len, plans)) == len(wanted)
    merged_head = (out / row_file).read_text().splitlines()[0]
    for part, plan in zip(parts, plans, strict=True):
        text = (part / row_file).read_text().splitlines()
        if row_file.endswith(".csv"):
            assert text[0] == merged_head
        else:
            assert {str(json.loads(line)[key]) for line in text} <= plan


def test_torchrun_heads_merges_into_the_single_process_files(
    model_dir: Path, tmp_path: Path
) -> None:
    data = _jsonl(tmp_path / "data.jsonl", 5)
    args = ["heads", "--model", str(model_dir), "--dataset", "jsonl", "--data", str(data)]
    _cli(*args, "--out", str(tmp_path / "one"))
    done = _cli(*args, "--out", str(tmp_path / "dp"), nproc=2)
    one, dp = tmp_path / "one", tmp_path / "dp"
    assert (dp / "heads.csv").read_bytes() == (one / "heads.csv").read_bytes()
    pd.testing.assert_frame_equal(
        _without_seconds(dp / "examples.csv"), _without_seconds(one / "examples.csv")
    )
    for name in ("summary.json", "percentiles.csv", "counts.csv"):
        assert (dp / name).read_bytes() == (one / name).read_bytes(), name
    manifest = {k: v for k, v in json.loads((dp / "run.json").read_text()).items()}
    assert manifest == json.loads((one / "run.json").read_text())
    _check_parts(dp, 2, "heads.csv", "example", {f"ex{i}" for i in range(5)})
    assert "shard 0/2 (torchrun)" in done.stdout or "shard 1/2 (torchrun)" in done.stdout
    assert done.stdout.count("results written to") == 1  # the last process summarises


def _rank(args: list[str], rank: int, world: int) -> subprocess.Popen[str]:
    """One process of a data-parallel run started by hand, with torchrun's variables."""
    env = _env(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    return subprocess.Popen(
        [sys.executable, "-m", "rcstat", *args],
        env={**env, "LOCAL_WORLD_SIZE": str(world)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


#: A rank that dies by SIGKILL when it starts analysing example ``KILL_AT + 1`` of its part:
#: killed mid-run at a known point, whatever the machine's speed or load.
_KILLED_AT_SCRIPT = """
import os, signal, sys
import rcstat.heads.collection as collection
from rcstat.cli import main

real, calls, kill_at = collection.analyze, [], int(os.environ["KILL_AT"])

def analyze(*args, **kwargs):
    calls.append(1)
    if len(calls) > kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)

collection.analyze = analyze
sys.exit(main(sys.argv[1:]))
"""


def _rank_killed_at(args: list[str], rank: int, world: int, kill_at: int) -> subprocess.Popen[str]:
    """:func:`_rank`, but the process kills itself (SIGKILL) after ``kill_at`` examples."""
    env = _env(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    return subprocess.Popen(
        [sys.executable, "-c", _KILLED_AT_SCRIPT, *args],
        env={**env, "LOCAL_WORLD_SIZE": str(world), "KILL_AT": str(kill_at)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def test_a_killed_rank_resumes_without_duplicates_or_gaps(model_dir: Path, tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "data.jsonl", 16, words=7)
    args = ["heads", "--model", str(model_dir), "--dataset", "jsonl", "--data", str(data)]
    _cli(*args, "--out", str(tmp_path / "one"))
    out = tmp_path / "dp"
    run = [*args, "--out", str(out)]
    first, second = _rank(run, 0, 2), _rank_killed_at(run, 1, 2, kill_at=3)
    log = out / "parts" / "1-of-2" / "examples.csv"
    output, _ = second.communicate(timeout=300)
    assert second.returncode == -signal.SIGKILL, output
    done = _lines(log) - 1
    assert done == 3, "rank 1 was not killed mid-run, after its third example"
    with (out / "parts" / "1-of-2" / "heads.csv").open("a") as cut:  # a write cut short
        cut.write("ex99,0,1,0.5")
    output, _ = first.communicate(timeout=300)
    assert first.returncode == 0, output
    assert "part done" in output and not (out / "heads.csv").exists()  # rank 1 is missing
    resumed = _rank(run, 1, 2)
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, output
    assert f"heads: {8 - done}/{8 - done}" in output  # only what was not done
    assert "results written to" in output  # the last process merged
    merged = pd.read_csv(out / "heads.csv", dtype={"example": str})
    assert not merged.duplicated(["example", "layer", "head"]).any()
    assert (merged.groupby("example").size() == 12).all()  # 3 layers × 4 heads, no gaps
    assert (out / "heads.csv").read_bytes() == (tmp_path / "one" / "heads.csv").read_bytes()
    assert _lines(out / "examples.csv") == 17


_GLOO_SCRIPT = """
import json, sys
import torch
import torch.distributed as dist
import rcstat
from rcstat.heads.collection import collect, load_jsonl
from rcstat.runs.shards import detect_shard

dist.init_process_group("gloo")
shard = detect_shard()
model, tokenizer = rcstat.load_model(sys.argv[1])
frame = collect(model, tokenizer, load_jsonl(sys.argv[2]), out=sys.argv[3], shard=shard,
                progress=False)
merged = torch.tensor([int(frame.attrs["merged"])])
dist.all_reduce(merged)  # exactly one process merges
if dist.get_rank() == 0:
    print(json.dumps({"source": shard.source, "count": shard.count, "merged": int(merged)}))
dist.destroy_process_group()
"""


def test_a_gloo_process_group_gives_the_shard(model_dir: Path, tmp_path: Path) -> None:
    data = _jsonl(tmp_path / "data.jsonl", 3)
    script = tmp_path / "collect.py"
    script.write_text(_GLOO_SCRIPT)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*launch, str(script), str(model_dir), str(data), str(tmp_path / "dp")]
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"source": "torch.distributed", "count": 2, "merged": 1}
    frame = pd.read_csv(tmp_path / "dp" / "heads.csv", dtype={"example": str})
    assert list(frame["example"].unique()) == ["ex0", "ex1", "ex2"]


def test_torchrun_bench_attribution_equals_one_process(model_dir: Path, tmp_path: Path) -> None:
    records = [
        _quotesum_record(qid=f"AMBIG_x_{i}", unique_id=f"AMBIG_x_{i}_0") for i in range(1, 6)
    ]
    data = _write_jsonl(tmp_path / "dev.jsonl", records)
    args = ["bench", "attribution", "--model", str(model_dir), "--dataset", "quotesum"]
    args += ["--data", str(data), "--k", "1,5,all"]
    _cli(*args, "--out", str(tmp_path / "one"))
    _cli(*args, "--out", str(tmp_path / "dp"), nproc=2)
    one, dp = tmp_path / "one", tmp_path / "dp"
    for name in ("predictions.jsonl", "units.csv", "accuracy.csv", "table1.csv", "run.json"):
        assert (dp / name).read_bytes() == (one / name).read_bytes(), name
    _check_parts(dp, 2, "predictions.jsonl", "example", {f"AMBIG_x_{i}_0" for i in range(1, 6)})


def test_torchrun_bench_grounding_equals_one_process(model_dir: Path, tmp_path: Path) -> None:
    data = _faithbench_documents(tmp_path / "faithbench")
    profile = _make_profile(tmp_path / "profile.json", 0)
    args = ["bench", "grounding", "--model", str(model_dir), "--resamples", "20"]
    args += ["--dataset", "faithbench", "--data", str(data), "--profile", str(profile)]
    _cli(*args, "--out", str(tmp_path / "one"))
    _cli(*args, "--out", str(tmp_path / "dp"), nproc=2)
    one, dp = tmp_path / "one", tmp_path / "dp"
    for name in ("predictions.jsonl", "scores.csv", "metrics.csv", "report.json"):
        assert (dp / name).read_bytes() == (one / name).read_bytes(), name
    tokens = sorted(p.name for p in (one / "tokens").iterdir())
    assert tokens and sorted(p.name for p in (dp / "tokens").iterdir()) == tokens
    for name in tokens:
        assert (dp / "tokens" / name).read_bytes() == (one / "tokens" / name).read_bytes()


@pytest.mark.press
@pytest.mark.skipif(not has_kvpress(), reason="needs the rcstat[press] extra (kvpress)")
def test_torchrun_bench_kv_equals_one_process(model_dir: Path, tmp_path: Path) -> None:
    data = _write_json(tmp_path / "dev.json", _squad_doc())  # two questions, one each
    args = ["bench", "kv", "--model", str(model_dir), "--dataset", "squad_v2", "--data", str(data)]
    args += ["--presses", "knorm,rcstat", "--ratios", "0.5", "--thresholds", "1.0"]
    args += ["--window", "4", "--max-new-tokens", "3"]
    _cli(*args, "--out", str(tmp_path / "one"))
    _cli(*args, "--out", str(tmp_path / "dp"), nproc=2)
    # shard 1 last: it summarises with the head scatter shard 0 left in its part
    for shard in ("0/2", "1/2"):
        _cli(*args, "--out", str(tmp_path / "by_hand"), "--shard", shard)
    one = tmp_path / "one"
    names = ("predictions.jsonl", "results.csv", "summary.csv", "head_scatter.csv", "config.json")
    for dp in (tmp_path / "dp", tmp_path / "by_hand"):
        for name in names:
            assert (dp / name).read_bytes() == (one / name).read_bytes(), (dp.name, name)
