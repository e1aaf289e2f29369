"""Tests of rcstat.runs.manifest: hashes, model identity, manifests compared on resume.

Oracles: manifests that differ in one field at a time; weight files copied, moved and
rewritten on disk.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from rcstat.runs.manifest import (
    MANIFEST_FILE,
    RunManifest,
    RunMismatchError,
    check_options,
    content_hash,
    describe_model,
    model_label,
    open_run,
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
