"""Shards of a data-parallel run: detection from launchers, assignment, GPUs per process."""

from __future__ import annotations

import argparse

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rcstat.runs.devices import Devices
from rcstat.runs.shards import Shard, detect_shard, parse_shard, process_gpus


@given(st.integers(0, 200), st.integers(1, 12), st.integers(0, 50))
def test_shards_are_disjoint_covering_and_prefix_stable(n: int, count: int, more: int) -> None:
    items = list(range(n))
    shards = [Shard(i, count, source="--shard").take(items) for i in range(count)]
    assert sorted(x for s in shards for x in s) == items  # disjoint and covering
    assert max(map(len, shards)) - min(map(len, shards)) <= 1  # balanced
    grown = [Shard(i, count, source="--shard").take(list(range(n + more))) for i in range(count)]
    for before, after in zip(shards, grown, strict=True):
        assert after[: len(before)] == before  # a larger --n only appends to each shard


def test_parse_shard() -> None:
    assert parse_shard("2/4") == Shard(2, 4, source="--shard")
    assert parse_shard(" 0 / 1 ").count == 1
    assert Shard(3, 12, source="--shard").name == "03-of-12"  # folders sort in rank order
    for bad, message in (("4/4", "0 <= i < N"), ("1/0", "0 <= i < N"), ("a/2", "expected i/N")):
        with pytest.raises(ValueError, match=message):
            parse_shard(bad)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, Shard()),
        ({"RANK": "0", "WORLD_SIZE": "1"}, Shard()),  # torchrun with one process
        (
            {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
            Shard(3, 4, 1, 2, "torchrun"),
        ),
        (  # srun step: SLURM's variables
            {
                "SLURM_STEP_ID": "0",
                "SLURM_PROCID": "5",
                "SLURM_NTASKS": "8",
                "SLURM_LOCALID": "1",
                "SLURM_NODEID": "2",
                "SLURM_STEP_TASKS_PER_NODE": "2(x2),4",
            },
            Shard(5, 8, 1, 4, "slurm"),
        ),
        # an salloc / sbatch shell without srun does not shard
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, Shard()),
        (  # torchrun inside a SLURM allocation: torchrun's variables win
            {"RANK": "1", "WORLD_SIZE": "2", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}
            | {"SLURM_NTASKS": "1"},
            Shard(1, 2, 0, 1, "torchrun"),
        ),
    ],
)
def test_detect_shard(env: dict[str, str], expected: Shard) -> None:
    assert detect_shard(env) == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK / WORLD_SIZE = 2 / 2"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
        (
            {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "0"},
            "SLURM_PROCID / SLURM_NTASKS",
        ),
    ],
)
def test_detect_shard_refuses_inconsistent_variables(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        detect_shard(env)


@pytest.mark.parametrize(
    ("local", "local_count", "visible", "gpus"),
    [
        (0, 1, 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        (1, 2, 8, [4, 5, 6, 7]),  # two model groups of four GPUs
        (3, 8, 8, [3]),  # one GPU each
        (2, 3, 8, [4, 5]),  # eight GPUs for three processes: two each, two left over
        (0, 2, 1, [0]),  # each process sees only its own GPU (SLURM's binding)
        (3, 4, 2, [1]),  # more processes than GPUs: shared
        (0, 2, 0, []),
    ],
)
def test_process_gpus(local: int, local_count: int, visible: int, gpus: list[int]) -> None:
    shard = Shard(local, local_count, local, local_count, "torchrun")
    assert process_gpus(shard, visible) == gpus


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine")
def test_the_devices_of_a_shard_without_cuda_are_unchanged() -> None:
    ns = argparse.Namespace(device=None, device_map=None, dtype=None)
    devices = Devices.from_namespace(ns)
    assert devices.for_shard(Shard(1, 2, 1, 2, "torchrun")) == devices
    assert devices.for_shard(Shard()).load_kwargs() == {"device": None, "dtype": None}


def test_the_devices_of_a_shard_are_its_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class Properties:
        total_memory = 80 << 30

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: Properties())
    shard = Shard(3, 4, 1, 2, "torchrun")  # second process of its machine: GPUs 2 and 3
    one = Devices().for_shard(shard)
    assert one.load_kwargs() == {"device": "cuda:2", "dtype": None}
    split = Devices(device_map="auto").for_shard(shard).load_kwargs()
    assert split["device_map"] == "auto" and set(split["max_memory"]) == {2, 3}
    assert Devices(device="cuda:0").for_shard(shard).load_kwargs()["device"] == "cuda:0"
    assert Devices(device="cpu").for_shard(shard).load_kwargs()["device"] is None
