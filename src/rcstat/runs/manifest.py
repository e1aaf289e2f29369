"""What determines the rows of a run: the manifest, and the hashes it is made of.

A run folder's manifest (:data:`MANIFEST_FILE`, ``run.json``) records everything that
determines its rows: the kind of run, the rcstat version, the model (its name, the identity of
its weight files — or of its parameters when it has no local files — and its dtype), the
tokenizer (the sha256 of its serialised vocabulary, rules and chat template) and every option
that changes a row. :func:`open_run` refuses a folder whose manifest differs in any of them
with a :class:`RunMismatchError` that names each field with both values, and a folder holding
rows but no manifest. The module imports only the standard library at import time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from rcstat.files import write_atomic

__all__ = [
    "MANIFEST_FILE",
    "RunManifest",
    "RunMismatchError",
    "check_options",
    "compared_fields",
    "content_hash",
    "describe_model",
    "differences",
    "hash_cache_path",
    "model_label",
    "open_run",
    "rcstat_version",
    "read_json_file",
    "read_manifest",
    "tokenizer_digest",
]

#: The manifest of a run folder.
MANIFEST_FILE = "run.json"
_WEIGHT_SUFFIXES = (".safetensors", ".gguf")
_CHUNK = 1 << 23  # 8 MiB per read when hashing files


class RunMismatchError(ValueError):
    """A run folder holds rows made with other settings (or of another kind of run)."""


def _plain(value: Any) -> Any:
    """``value`` as JSON-able data: dataclasses as dicts, tuples as lists, paths as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def content_hash(value: Any) -> str:
    """The sha256 (hex) of ``value``'s canonical JSON (sorted keys, tuples as lists).

    >>> content_hash({"question": "Q", "context": "C"}) == content_hash({"context": "C",
    ...                                                                   "question": "Q"})
    True
    >>> content_hash(("a", "b")) == content_hash(["a", "b"]) != content_hash(["b", "a"])
    True
    """
    text = json.dumps(_plain(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rcstat_version() -> str:
    """The installed rcstat version (package metadata)."""
    try:
        return metadata.version("rcstat")
    except metadata.PackageNotFoundError:
        return "unknown"


def tokenizer_digest(tokenizer: Any) -> str:
    """The sha256 of a tokenizer's behaviour: its serialised backend (vocabulary, merges,
    normaliser, pre-tokenizer, post-processor, added tokens) — or its vocabulary for a slow
    tokenizer — its chat template and its special tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        rules: Any = backend.to_str()
    else:
        rules = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    state = {
        "rules": rules,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "special_tokens": {
            k: str(v) for k, v in sorted(getattr(tokenizer, "special_tokens_map", {}).items())
        },
    }
    return content_hash(state)


def _weight_files(model: Any) -> list[Path]:
    """The safetensors / GGUF files the model was loaded from (empty: not a local path)."""
    source = str(getattr(model, "name_or_path", "") or "")
    if not source:
        return []
    path = Path(source).expanduser()
    if path.is_file() and path.suffix in _WEIGHT_SUFFIXES:
        return [path]
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in _WEIGHT_SUFFIXES and p.is_file())
    return []


def hash_cache_path() -> Path:
    """The file that keeps the sha256 of weight files between commands, beside the converted
    models of :func:`rcstat.load_model`: ``$RCSTAT_CACHE_DIR/file-hashes.json``, else
    ``~/.cache/rcstat/file-hashes.json``."""
    root = os.environ.get("RCSTAT_CACHE_DIR") or "~/.cache/rcstat"
    return Path(root).expanduser() / "file-hashes.json"


def _read_hash_cache(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return (
        {str(k): v for k, v in data.items() if isinstance(v, dict)}
        if isinstance(data, dict)
        else {}
    )


def _file_records(
    paths: Sequence[Path], known: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``{path, size, mtime_ns, sha256}`` of each file. A sha256 is read again only when the
    file's size or modification time differ from those recorded with it, in ``known`` (an
    earlier manifest's files) or in the hash cache (:func:`hash_cache_path`, updated here)."""
    if not paths:
        return []
    cache_path = hash_cache_path()
    cache = _read_hash_cache(cache_path)
    records, hashed = [], False
    for path in paths:
        stat = path.stat()
        key = str(path.absolute())  # symlinks kept: the file name is part of the identity
        old = known.get(key) or cache.get(key)
        if old and old.get("size") == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns:
            records.append({"path": key, **{k: old[k] for k in ("size", "mtime_ns", "sha256")}})
            continue
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
        record = {"path": key, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        records.append({**record, "sha256": digest.hexdigest()})
        hashed = True
    if hashed or any(r["path"] not in cache for r in records):
        kept = {k: v for k, v in cache.items() if Path(k).exists()}  # forget removed files
        kept.update({r["path"]: {k: r[k] for k in ("size", "mtime_ns", "sha256")} for r in records})
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cache_path, json.dumps(kept, indent=1) + "\n")
        except OSError:  # a read-only cache: the hashes are recomputed next time
            pass
    return records


def _hub_revision(model: Any) -> str | None:
    """``hub:<id>@<commit>`` for a model loaded from the Hugging Face hub (the commit of its
    snapshot pins every file), else None."""
    config = getattr(model, "config", None)
    commit = getattr(config, "_commit_hash", None)
    source = str(getattr(model, "name_or_path", "") or "")
    if not commit or not source or Path(source).expanduser().exists():
        return None
    return f"hub:{source}@{commit}"


def _parameter_digest(model: Any) -> str:
    """The sha256 of every tensor of ``model.state_dict()`` (name, dtype, shape and bytes)."""
    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().contiguous().reshape(-1)
            if flat.numel() <= 1:  # any stride counts as contiguous here; a byte view needs 1
                flat = flat.clone(memory_format=torch.contiguous_format)
            digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
            digest.update(flat.view(torch.uint8).cpu().numpy().tobytes())
    return digest.hexdigest()


def model_label(model: str | os.PathLike[str] | None) -> str:
    """The name a run records for a ``--model`` value: the default model's name for ``None``,
    the absolute path of a local file or folder, else the hub id as given."""
    from rcstat.defaults import DEFAULT_MODEL_NAME

    if model is None:
        return DEFAULT_MODEL_NAME
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else os.fspath(model)


def describe_model(
    model: Any, name: str | None = None, *, known_files: Sequence[Mapping[str, Any]] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The model's identity for a manifest, and the weight files hashed for it.

    Parameters
    ----------
    model
        A loaded model (``name_or_path`` names where it came from).
    name : str, optional
        The name the run was given (a hub id, a path, the default model's name); default
        ``model.name_or_path``.
    known_files : sequence of dict
        File records of an earlier manifest: a file whose size and modification time are
        unchanged keeps its recorded sha256 instead of being read again.

    Returns
    -------
    identity : dict
        ``{"name", "weights", "dtype"}``: ``weights`` is the sha256 over the sha256 of each
        safetensors / GGUF file of a local path (by file name, so a moved folder keeps it);
        for a model of the hub, ``hub:<id>@<commit>`` (its snapshot's revision); else
        ``params:`` and the sha256 of the parameters and buffers (a model without files).
    files : list of dict
        ``{path, size, mtime_ns, sha256}`` of each weight file (empty without files).

    Notes
    -----
    A file's sha256 is computed once per size and modification time: it is kept in the
    manifest and in the hash cache beside the converted models (:func:`hash_cache_path`), so
    a command's fixed cost does not grow with the model (no parameter is read to name it).
    """
    known = {str(r.get("path")): r for r in known_files}
    files = _file_records(_weight_files(model), known)
    if files:
        combined = hashlib.sha256()
        for record in files:
            combined.update(f"{Path(record['path']).name}\0{record['sha256']}\n".encode())
        weights = combined.hexdigest()
    else:
        weights = _hub_revision(model) or "params:" + _parameter_digest(model)
    dtype = str(getattr(model, "dtype", "")).removeprefix("torch.")
    identity = {"name": name or str(getattr(model, "name_or_path", "") or "?"), "weights": weights}
    return {**identity, "dtype": dtype}, files


# ----------------------------------------------------------------------------- manifest


@dataclass
class RunManifest:
    """What determines the rows of a run (compared on resume) plus notes (never compared).

    Parameters
    ----------
    kind : str
        The kind of run (``"heads"``, ``"bench kv"``, ``"bench attribution"``).
    model : dict
        :func:`describe_model`'s identity.
    tokenizer : str
        :func:`tokenizer_digest`.
    options : dict
        Every option that changes a row (JSON-able values).
    rcstat : str
        The rcstat version.
    notes : dict
        Recorded but not compared: the hashed weight files (reused on resume).
    """

    kind: str
    model: dict[str, Any]
    tokenizer: str
    options: dict[str, Any]
    rcstat: str = field(default_factory=rcstat_version)
    notes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        out: str | Path,
        kind: str,
        model: Any,
        tokenizer: Any,
        options: Mapping[str, Any],
        *,
        model_name: str | None = None,
    ) -> RunManifest:
        """Describe a run into ``out`` (reusing the weight hashes of ``out``'s manifest)."""
        previous = read_manifest(Path(out)) or {}
        known = previous.get("notes", {}).get("weight_files", [])
        identity, files = describe_model(model, model_name, known_files=known)
        notes: dict[str, Any] = {"weight_files": files}
        return cls(
            kind=kind,
            model=identity,
            tokenizer=tokenizer_digest(tokenizer),
            options=_plain(dict(options)),
            notes=notes,
        )

    def compared(self) -> dict[str, Any]:
        """The fields compared on resume, flattened (``options.`` dropped from names)."""
        return _flatten({k: v for k, v in self.to_dict().items() if k != "notes"})

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rcstat": self.rcstat,
            "model": self.model,
            "tokenizer": self.tokenizer,
            "options": self.options,
            "notes": self.notes,
        }


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            inner = "" if name == "options" else f"{name}."
            flat.update(_flatten(value, inner))
        else:
            flat[name] = value
    return flat


def compared_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The compared fields of a manifest read from disk (:meth:`RunManifest.compared`)."""
    return RunManifest(
        kind=data["kind"],
        model=data.get("model", {}),
        tokenizer=data.get("tokenizer", ""),
        options=data.get("options", {}),
        rcstat=data.get("rcstat", ""),
    ).compared()


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The manifest of the run folder ``out`` (None when it has none).

    Raises
    ------
    RunMismatchError
        ``run.json`` is not readable JSON or not a manifest of rcstat.
    """
    path = out / MANIFEST_FILE
    data = read_json_file(path, "a readable run manifest")
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise RunMismatchError(f"{path}: not a run manifest of rcstat")
    return data


def read_json_file(path: Path, what: str) -> Any:
    """The JSON value in the file ``path``; None when there is no such file.

    Raises
    ------
    RunMismatchError
        The file is not readable JSON: ``"<path>: not <what> (<reason>)"``.
    """
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise RunMismatchError(f"{path}: not {what} ({err})") from err


def _show(value: Any) -> str:
    if isinstance(value, str) and len(value) >= 64:  # a digest: its head is enough
        return value[: value.find(":") + 13] + "…"
    return json.dumps(value, ensure_ascii=False)


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``"name: OLD in the run, NEW now"`` for every field whose values differ."""
    missing = object()
    lines = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, missing), new.get(name, missing)
        if a != b:
            shown_a = "(absent)" if a is missing else _show(a)
            shown_b = "(absent)" if b is missing else _show(b)
            lines.append(f"{name}: {shown_a} in the run, {shown_b} now")
    return lines


def _refuse(out: Path, kind: str, old_kind: str, found: list[str]) -> RunMismatchError:
    if old_kind != kind:
        return RunMismatchError(
            f"{out} holds a `{old_kind}` run, not a `{kind}` run; choose another output folder"
        )
    return RunMismatchError(
        f"{out} holds a `{kind}` run made with other settings ("
        + "; ".join(found)
        + "); resume it with the same settings or choose another output folder "
        "(a run folder is resumed, never mixed)"
    )


def check_options(out: str | Path, kind: str, options: Mapping[str, Any]) -> None:
    """Refuse early — before a model is loaded — a run folder whose manifest has another kind
    or other values for ``options`` (a subset of the run's options suffices)."""
    out = Path(out)
    previous = read_manifest(out)
    if previous is None:
        return
    if previous["kind"] != kind:
        raise _refuse(out, kind, previous["kind"], [])
    old = previous.get("options", {})
    new = _plain(dict(options))
    found = differences({k: old.get(k) for k in new}, new)
    if found:
        raise _refuse(out, kind, kind, found)


def open_run(out: str | Path, manifest: RunManifest, *, rows: Sequence[str]) -> None:
    """Start or resume the run of ``manifest`` in ``out``.

    A folder without a manifest is started (``run.json`` written) unless it already holds
    one of the row files ``rows`` (rows of unknown settings are never resumed). A folder with a
    manifest is resumed when every compared field is equal, else :class:`RunMismatchError`
    names each difference; the notes of the manifest are refreshed.
    """
    out = Path(out)
    previous = read_manifest(out)
    if previous is None:
        present = [name for name in rows if (out / name).is_file()]
        if present:
            raise RunMismatchError(
                f"{out} holds {', '.join(present)} but no {MANIFEST_FILE} (written by an "
                "earlier rcstat that did not record its settings): its rows cannot be "
                "checked, so they are not resumed; choose another output folder"
            )
    else:
        found = differences(compared_fields(previous), manifest.compared())
        if found:
            raise _refuse(out, manifest.kind, previous["kind"], found)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / MANIFEST_FILE, json.dumps(manifest.to_dict(), indent=1) + "\n")
