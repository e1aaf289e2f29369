"""Tests of rcstat.runs.manifest: hashes, model identity, manifests compared on resume.

Oracles: manifests that differ in one field at a time; weight files copied, moved and
rewritten on disk.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from rcstat.runs import manifest as manifest_module
from rcstat.runs.manifest import (
    MANIFEST_FILE,
    RunManifest,
    RunMismatchError,
    check_options,
    content_hash,
    describe_model,
    hash_cache_path,
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


def test_parameter_digest_reads_a_one_element_tensor_of_any_stride() -> None:
    """A one-element tensor sliced from a larger one keeps its stride (4 here), which a view
    as bytes refuses; its digest is that of the same value laid out plainly."""

    class Holder:
        def __init__(self, value: torch.Tensor) -> None:
            self.value = value

        def state_dict(self) -> dict[str, torch.Tensor]:
            return {"w": self.value}

    sliced = torch.arange(8).view(2, 4)[:1, 1]
    assert sliced.stride() == (4,)
    digest = manifest_module._parameter_digest
    assert digest(Holder(sliced)) == digest(Holder(torch.tensor([1])))
    assert digest(Holder(sliced)) != digest(Holder(torch.tensor([2])))


def test_weight_hashes_are_cached_beside_the_models(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("RCSTAT_CACHE_DIR", str(tmp_path / "cache"))
    loaded = AutoModelForCausalLM.from_pretrained(model_dir)
    identity, files = describe_model(loaded, "tiny")
    cache = json.loads(hash_cache_path().read_text())
    assert hash_cache_path() == tmp_path / "cache" / "file-hashes.json"
    assert cache[files[0]["path"]]["sha256"] == files[0]["sha256"]
    # The next command reads the cache, not the file (a planted hash shows it)...
    cache[files[0]["path"]]["sha256"] = "1" * 64
    hash_cache_path().write_text(json.dumps(cache))
    assert describe_model(loaded, "tiny")[1][0]["sha256"] == "1" * 64
    # ...until the file's modification time changes: then it is hashed again.
    path = Path(files[0]["path"])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    assert describe_model(loaded, "tiny")[0]["weights"] == identity["weights"]
    assert json.loads(hash_cache_path().read_text())[str(path)]["sha256"] == files[0]["sha256"]


def test_a_hub_model_is_named_by_its_revision_not_its_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = copy.deepcopy(tiny_model("llama"))  # the shared tiny model stays as it is
    tok = make_tiny_tokenizer()
    old = RunManifest.build(tmp_path, "heads", model, tok, {"n": 1}, model_name="org/tiny")
    open_run(tmp_path, old, rows=[])  # a run made before hub revisions: by parameters
    assert old.model["weights"].startswith("params:")
    model.name_or_path, model.config._commit_hash = "org/tiny", "c0ffee"
    new = RunManifest.build(tmp_path, "heads", model, tok, {"n": 1}, model_name="org/tiny")
    assert new.model["weights"] == "hub:org/tiny@c0ffee"
    with pytest.raises(RunMismatchError, match=r"model\.weights: params:"):
        open_run(tmp_path, new, rows=[])  # no rule keeps an earlier naming resuming
    # Named by revision, the parameters are never read again.
    monkeypatch.setattr(manifest_module, "_parameter_digest", None)
    assert describe_model(model)[0]["weights"] == "hub:org/tiny@c0ffee"
    # An old run of other parameters is refused, naming the weights.
    monkeypatch.undo()
    other = tmp_path / "other"
    before = RunManifest.build(
        other, "heads", tiny_model("llama"), tok, {"n": 1}, model_name="org/tiny"
    )
    open_run(other, before, rows=[])
    with torch.no_grad():
        model.model.norm.weight[0] += 1e-3
    changed = RunManifest.build(other, "heads", model, tok, {"n": 1}, model_name="org/tiny")
    with pytest.raises(RunMismatchError, match=r"model\.weights: params:"):
        open_run(other, changed, rows=[])


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
