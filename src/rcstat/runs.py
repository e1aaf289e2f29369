"""Resumable runs: a manifest of what determines the rows, and row files that survive Ctrl-C.

A resumable run (``rcstat heads``, ``rcstat bench kv``, ``rcstat bench attribution``) grows row
files in its folder one example at a time, so that calling it again with the same arguments
continues where it stopped. Three rules keep such a folder from mixing, losing or hiding
results:

* **A manifest** (:data:`MANIFEST_FILE`, ``run.json``) records everything that determines the
  rows: the kind of run, the rcstat version, the model (its name, the sha256 of its weight
  files — or of its parameters when it has no local files — and its dtype), the tokenizer (the
  sha256 of its serialised vocabulary, rules and chat template) and every option that changes
  a row. :func:`open_run` refuses a folder whose manifest differs in any of them with a
  :class:`RunMismatchError` that names each field with both values, and a folder holding rows
  but no manifest.
* **Examples are known by id and content.** Each example's rows carry :func:`content_hash` of
  the inputs that produced them; :func:`resume_plan` drops the rows of an example whose content
  changed under the same id (it is computed again) and, unless told otherwise, those of failed
  items (they are retried).
* **Row files are append-only, one write per example** (:func:`append_jsonl`,
  :func:`append_csv_row`), so an interruption can only cut the last line:
  :func:`read_jsonl` / :func:`read_csv_rows` drop a cut last line with a warning naming the
  file and the line, and raise :class:`RowFileError` naming them for a bad line anywhere else.
  Rows are dropped by rewriting a file through a temporary sibling and ``os.replace``.

Warnings go through the ``rcstat.runs`` logger (printed on standard error when logging is not
configured). The module imports only the standard library at import time.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "EXAMPLE_HASH",
    "MANIFEST_FILE",
    "ResumePlan",
    "RowFileError",
    "RunManifest",
    "RunMismatchError",
    "append_csv_row",
    "append_jsonl",
    "check_options",
    "content_hash",
    "describe_model",
    "drop_cut_last_line",
    "model_label",
    "open_run",
    "rcstat_version",
    "read_csv_rows",
    "read_jsonl",
    "replace_file",
    "resume_plan",
    "tokenizer_digest",
    "write_csv_rows",
    "write_jsonl",
]

logger = logging.getLogger("rcstat.runs")

#: The manifest of a run folder.
MANIFEST_FILE = "run.json"
#: The field of a row that holds the content hash of its example.
EXAMPLE_HASH = "example_hash"
_WEIGHT_SUFFIXES = (".safetensors", ".gguf")
_CHUNK = 1 << 23  # 8 MiB per read when hashing files


class RunMismatchError(ValueError):
    """A run folder holds rows made with other settings (or of another kind of run)."""


class RowFileError(ValueError):
    """A row file has a malformed line that is not the last one (not an interrupted write)."""


# ------------------------------------------------------------------------------ hashing


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


def _file_record(path: Path, known: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``{path, size, mtime_ns, sha256}`` of a file; the sha256 of ``known`` is reused when
    the size and modification time are unchanged (a resumed run does not hash again)."""
    stat = path.stat()
    key = str(path.absolute())  # symlinks kept: the file name is part of the identity
    old = known.get(key)
    if old and old.get("size") == stat.st_size and old.get("mtime_ns") == stat.st_mtime_ns:
        return dict(old)
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return {
        "path": key,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": digest.hexdigest(),
    }


def _parameter_digest(model: Any) -> str:
    """The sha256 of every tensor of ``model.state_dict()`` (name, dtype, shape and bytes)."""
    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            flat = tensor.detach().reshape(-1)
            digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
            digest.update(flat.contiguous().view(torch.uint8).cpu().numpy().tobytes())
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
        safetensors / GGUF file of a local path (by file name, so a moved folder keeps it),
        else ``params:`` and the sha256 of the parameters and buffers.
    files : list of dict
        ``{path, size, mtime_ns, sha256}`` of each file hashed (empty for parameters).
    """
    known = {str(r.get("path")): r for r in known_files}
    files = [_file_record(path, known) for path in _weight_files(model)]
    if files:
        combined = hashlib.sha256()
        for record in files:
            combined.update(f"{Path(record['path']).name}\0{record['sha256']}\n".encode())
        weights = combined.hexdigest()
    else:
        weights = "params:" + _parameter_digest(model)
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
        previous = _read_manifest(Path(out)) or {}
        known = previous.get("notes", {}).get("weight_files", [])
        identity, files = describe_model(model, model_name, known_files=known)
        return cls(
            kind=kind,
            model=identity,
            tokenizer=tokenizer_digest(tokenizer),
            options=_plain(dict(options)),
            notes={"weight_files": files},
        )

    def compared(self) -> dict[str, Any]:
        """The fields compared on resume, flattened (``options.`` dropped from names)."""
        return _flatten(
            {
                "kind": self.kind,
                "rcstat": self.rcstat,
                "model": self.model,
                "tokenizer": self.tokenizer,
                "options": self.options,
            }
        )

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


def _read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise RunMismatchError(f"{path}: not a readable run manifest ({err})") from err
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise RunMismatchError(f"{path}: not a run manifest of rcstat")
    return data


def _show(value: Any) -> str:
    if isinstance(value, str) and len(value) >= 64:  # a digest: its head is enough
        return value[: value.find(":") + 13] + "…"
    return json.dumps(value, ensure_ascii=False)


def _differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    missing = object()
    lines = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, missing), new.get(name, missing)
        if a != b:
            shown_a = "(absent)" if a is missing else _show(a)
            shown_b = "(absent)" if b is missing else _show(b)
            lines.append(f"{name}: {shown_a} in the run, {shown_b} now")
    return lines


def _refuse(out: Path, kind: str, old_kind: str, differences: list[str]) -> RunMismatchError:
    if old_kind != kind:
        return RunMismatchError(
            f"{out} holds a `{old_kind}` run, not a `{kind}` run; choose another output folder"
        )
    return RunMismatchError(
        f"{out} holds a `{kind}` run made with other settings ("
        + "; ".join(differences)
        + "); resume it with the same settings or choose another output folder "
        "(a run folder is resumed, never mixed)"
    )


def check_options(out: str | Path, kind: str, options: Mapping[str, Any]) -> None:
    """Refuse early — before a model is loaded — a run folder whose manifest has another kind
    or other values for ``options`` (a subset of the run's options suffices)."""
    out = Path(out)
    previous = _read_manifest(out)
    if previous is None:
        return
    if previous["kind"] != kind:
        raise _refuse(out, kind, previous["kind"], [])
    old = previous.get("options", {})
    new = _plain(dict(options))
    differences = _differences({k: old.get(k) for k in new}, new)
    if differences:
        raise _refuse(out, kind, kind, differences)


def open_run(out: str | Path, manifest: RunManifest, *, rows: Sequence[str]) -> None:
    """Start or resume the run of ``manifest`` in ``out``.

    A folder without a manifest is started (``run.json`` written) unless it already holds
    one of the row files ``rows`` (rows of unknown settings are never resumed). A folder with a
    manifest is resumed when every compared field is equal, else :class:`RunMismatchError`
    names each difference; the notes of the manifest are refreshed.
    """
    out = Path(out)
    previous = _read_manifest(out)
    if previous is None:
        present = [name for name in rows if (out / name).is_file()]
        if present:
            raise RunMismatchError(
                f"{out} holds {', '.join(present)} but no {MANIFEST_FILE} (written by an "
                "earlier rcstat that did not record its settings): its rows cannot be "
                "checked, so they are not resumed; choose another output folder"
            )
    else:
        old = RunManifest(
            kind=previous["kind"],
            model=previous.get("model", {}),
            tokenizer=previous.get("tokenizer", ""),
            options=previous.get("options", {}),
            rcstat=previous.get("rcstat", ""),
        )
        differences = _differences(old.compared(), manifest.compared())
        if differences:
            raise _refuse(out, manifest.kind, old.kind, differences)
    out.mkdir(parents=True, exist_ok=True)
    replace_file(out / MANIFEST_FILE, json.dumps(manifest.to_dict(), indent=1) + "\n")


# ---------------------------------------------------------------------------- row files


def replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary sibling, then ``os.replace``)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as sink:
            sink.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _truncate(path: Path, offset: int, line: int, why: str) -> None:
    with path.open("r+b") as handle:
        handle.truncate(offset)
    logger.warning("%s, line %d: %s; dropped (its example is computed again)", path, line, why)


def drop_cut_last_line(path: Path) -> None:
    """Drop a last line without its newline (a write cut by an interruption), with a warning
    naming the file and the line."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        start = data.rfind(b"\n") + 1
        _truncate(path, start, data.count(b"\n") + 1, "cut-off last line (an interrupted write)")


def read_jsonl(path: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The records of a JSON-lines row file (empty when absent).

    A last line that is not a JSON object (a write cut by an interruption) is removed from the
    file with a warning naming the file and the line; a complete last line missing only its
    newline gets it back. With ``repair=False`` the file is only read (a cut last line is
    skipped): for files another process may be writing.

    Raises
    ------
    RowFileError
        A line before the last one is not a JSON object (the message names file and line).
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records: list[dict[str, Any]] = []
    offset = 0
    for number, line in enumerate(lines):
        if line.strip():
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"a JSON {type(record).__name__}, not an object")
            except ValueError as err:
                if number == last:
                    if repair:
                        why = "cut-off last line (an interrupted write)"
                        _truncate(path, offset, number + 1, why)
                    return records
                raise RowFileError(
                    f"{path}, line {number + 1}: not a row of this run ({err}); remove or fix "
                    "that line to resume, or choose another output folder"
                ) from err
            records.append(record)
        offset += len(line) + 1
    if repair and data and not data.endswith(b"\n"):
        with path.open("ab") as handle:
            handle.write(b"\n")
    return records


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one record as one line, in one write, flushed."""
    line = json.dumps(record, ensure_ascii=False, allow_nan=True) + "\n"
    with path.open("a", encoding="utf-8") as sink:
        sink.write(line)
        sink.flush()


def write_jsonl(path: Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Replace a JSON-lines file atomically."""
    text = "".join(json.dumps(r, ensure_ascii=False, allow_nan=True) + "\n" for r in records)
    replace_file(path, text)


def read_csv_rows(
    path: Path, columns: Sequence[str], *, repair: bool = True
) -> list[dict[str, str]]:
    """The rows of a CSV row file with header ``columns`` (empty when absent).

    A last record that is cut (no final newline, or too few fields) is removed with a warning
    naming the file and the line; with ``repair=False`` it is only skipped (the file is read,
    never changed).

    Raises
    ------
    RowFileError
        The header is not ``columns``, or a record before the last one has the wrong number
        of fields (the message names file and line).
    """
    if not path.is_file() or path.stat().st_size == 0:
        return []
    data = path.read_bytes()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 0x0A]  # line → byte offset
    text = data.decode("utf-8", errors="replace")
    physical = len(starts) - (1 if data.endswith(b"\n") else 0)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    records: list[tuple[int, list[str]]] = []  # (first line, fields)
    line = 1
    try:
        for fields in reader:
            records.append((line, fields))
            line = reader.line_num + 1
    except csv.Error as err:
        if reader.line_num < physical:  # malformed before the end: not an interrupted write
            raise RowFileError(
                f"{path}, line {reader.line_num}: not a CSV row ({err}); remove or fix that "
                "line to resume, or choose another output folder"
            ) from err
        records.append((line, []))  # a quoted field left open by a cut write
        cut_at_end = True
    else:
        cut_at_end = False
    if not records or records[0][1] != list(columns):
        raise RowFileError(
            f"{path}, line 1: header {records[0][1] if records else []} is not "
            f"{list(columns)}; not a row file of this run"
        )
    rows: list[dict[str, str]] = []
    body = records[1:]
    for index, (first, fields) in enumerate(body):
        is_last = index == len(body) - 1
        if not fields and not (is_last and cut_at_end):
            continue
        cut = len(fields) != len(columns)
        if is_last and (cut or cut_at_end or not data.endswith(b"\n")):
            if repair:
                _truncate(path, starts[first - 1], first, "cut-off last row (an interrupted write)")
            return rows
        if cut:
            raise RowFileError(
                f"{path}, line {first}: {len(fields)} fields, expected {len(columns)}; "
                "remove or fix that line to resume, or choose another output folder"
            )
        rows.append(dict(zip(columns, fields, strict=True)))
    return rows


def _csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def append_csv_row(path: Path, columns: Sequence[str], row: Mapping[str, Any]) -> None:
    """Append one CSV row in one write (the header first when the file is new or empty)."""
    header = not path.is_file() or path.stat().st_size == 0
    with path.open("a", encoding="utf-8", newline="") as sink:
        sink.write(_csv_text(columns, [row], header))
        sink.flush()


def write_csv_rows(path: Path, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> None:
    """Replace a CSV row file atomically."""
    replace_file(path, _csv_text(columns, rows, True))


# ------------------------------------------------------------------------------ resuming


@dataclass(frozen=True)
class ResumePlan:
    """What a resumed run keeps and what it computes again.

    Attributes
    ----------
    keep : list of dict
        Records still valid: this call's finished items with unchanged content (and failed
        ones when not retried), and every record of items this call does not ask for.
    done : set of str
        Keys that need no work.
    changed, retried, duplicates : list of str
        Keys whose records were dropped: the example's content changed, the item failed and
        is retried, or a repeated record of a key.
    """

    keep: list[dict[str, Any]]
    done: set[str]
    changed: list[str]
    retried: list[str]
    duplicates: list[str]

    @property
    def dropped(self) -> int:
        return len(self.changed) + len(self.retried) + len(self.duplicates)


def resume_plan(
    records: Iterable[Mapping[str, Any]],
    wanted: Mapping[str, str],
    *,
    key: str,
    retry_failed: bool = True,
    failed: str = "error",
    hash_field: str = EXAMPLE_HASH,
) -> ResumePlan:
    """Sort a run's records into kept and dropped for the items ``wanted`` (key → hash).

    A record of a wanted key is kept when its ``hash_field`` is the wanted hash and it
    did not fail (its ``failed`` field is empty) — or failed and ``retry_failed`` is off; the
    first such record of a key wins. Records of other keys are kept as they are.
    """
    keep: list[dict[str, Any]] = []
    done: set[str] = set()
    changed: list[str] = []
    retried: list[str] = []
    duplicates: list[str] = []
    for record in records:
        name = str(record.get(key))
        if name not in wanted:
            keep.append(dict(record))  # an item this call does not ask for: left as it is
        elif record.get(hash_field) != wanted[name]:
            changed.append(name)
        elif name in done:
            duplicates.append(name)
        elif record.get(failed) and retry_failed:
            retried.append(name)
        else:
            keep.append(dict(record))
            done.add(name)
    if changed:
        logger.warning(
            "%d item(s) whose example changed since their rows were written are computed "
            "again (first: %s)",
            len(set(changed)),
            changed[0],
        )
    if retried:
        logger.warning("%d failed item(s) are tried again (first: %s)", len(retried), retried[0])
    return ResumePlan(keep, done, changed, retried, duplicates)


def resume_jsonl(
    path: Path, wanted: Mapping[str, str], *, key: str, retry_failed: bool = True
) -> set[str]:
    """Resume a run's JSON-lines rows: drop the records :func:`resume_plan` drops (rewriting
    ``path`` when any is dropped) and return the keys that need no work."""
    plan = resume_plan(read_jsonl(path), wanted, key=key, retry_failed=retry_failed)
    if plan.dropped:
        write_jsonl(path, plan.keep)
    return plan.done
