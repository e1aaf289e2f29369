"""Parts of a data-parallel run and their merge into the files of a single-process run.

A resumable run (:mod:`rcstat.runs.job`) shared by ``N`` processes (:mod:`rcstat.runs.shards`) keeps
one **part** per shard under its folder::

    RUN/                      the merged run: the files a single process writes
      run.json  heads.csv …
      parts/
        0-of-2/               shard 0's own resumable run folder
          run.json  heads.csv …  shard.json
        1-of-2/ …

Rules
-----
* **A part is a run folder** of the same kind, with the same manifest and row files (same
  headers) as the merged run, plus ``shard.json``: the shard, its **plan** (every key it owns
  with the key's position in the single-process order) and whether it is complete. A killed
  process resumes its part like any run; a new part starts from the rows the merged run
  already holds for its keys (:func:`start_part`), so a run can go on with another number of
  processes, or a single-process run with several, without computing anything twice.
* **Complete** means every planned key has its committing row (the last row file a run writes
  for a key, e.g. ``examples.csv`` or ``predictions.jsonl``), success or recorded failure.
* **The merge** (:func:`merge_parts`; run by the last process to complete its part, or by
  ``rcstat merge RUN``) checks that the parts cover shards ``0 … N-1`` and agree on their
  manifests, that their keys are disjoint and, unless ``partial``, that all are complete; it
  then writes each row file of the merged run with the rows of every part, sorted by planned
  position (the single-process order), keeping the merged run's own rows of keys no part
  holds. Only committed keys are merged. Parts are read, never changed, and stay after the
  merge. Concurrent merges are serialised by a lock file (POSIX ``flock``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rcstat.runs.manifest import (
    MANIFEST_FILE,
    RunMismatchError,
    compared_fields,
    differences,
    read_json_file,
)
from rcstat.runs.rows import RowFile, write_json
from rcstat.runs.shards import Shard

__all__ = [
    "PARTS",
    "SHARD_FILE",
    "MergeResult",
    "Part",
    "RunFiles",
    "finish_part",
    "merge_if_last",
    "merge_parts",
    "part_folder",
    "read_parts",
    "start_part",
]

#: The folder of a run that holds its parts.
PARTS = "parts"
#: A part's plan and state.
SHARD_FILE = "shard.json"
_LOCK = ".merge.lock"
_MERGED = "merged.json"


@dataclass(frozen=True)
class RunFiles:
    """What a kind of run keeps: row files (one of them ``commit``), files copied from part 0
    (written once per run, e.g. ``config.json``) and a folder of per-key files
    (``key_file(key)`` names a key's file in it)."""

    kind: str
    rows: tuple[RowFile, ...]
    copied: tuple[str, ...] = ()
    folder: str | None = None
    key_file: Callable[[str], str] | None = None

    @property
    def commit(self) -> RowFile:
        return next(r for r in self.rows if r.commit)

    def row_names(self) -> tuple[str, ...]:
        """Every file a run grows (for ``staged_output(keep=…)``)."""
        names = (MANIFEST_FILE, *self.copied, *(r.name for r in self.rows))
        return names + ((self.folder,) if self.folder else ()) + (PARTS,)


@dataclass(frozen=True)
class Part:
    """One part as found on disk."""

    folder: Path
    index: int
    count: int
    plan: dict[str, int]  # key -> position in the single-process order
    complete: bool
    settings: dict[str, Any]


def part_folder(out: Path, shard: Shard) -> Path:
    """The folder of ``shard``'s part of the run in ``out``."""
    return out / PARTS / shard.name


def _read_json(path: Path) -> dict[str, Any] | None:
    data = read_json_file(path, "readable JSON")
    return data if isinstance(data, dict) else None


def start_part(
    out: str | Path,
    files: RunFiles,
    shard: Shard,
    plan: Sequence[tuple[int, str]],
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """Create or resume this shard's part of the run in ``out``; return its folder.

    ``plan`` lists ``(position, key)`` of every key the shard owns (``position``: where the
    key's rows stand in a single-process run). ``settings`` (JSON-able) are what the merge
    needs to summarise the run (recorded, not compared). A new part is seeded with the rows
    that ``out``'s merged files hold for its keys, and ``out``'s manifest (the run then
    resumes them, or refuses them with the manifest's differences).
    """
    out = Path(out)
    folder = part_folder(out, shard)
    folder.mkdir(parents=True, exist_ok=True)
    keys = [key for _, key in plan]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{shard}: the plan repeats keys; example ids must be unique")
    if not (folder / MANIFEST_FILE).is_file() and (out / MANIFEST_FILE).is_file():
        _seed(out, folder, files, set(keys))
    write_json(
        folder / SHARD_FILE,
        {
            "index": shard.index,
            "count": shard.count,
            "plan": [[int(position), key] for position, key in plan],
            "complete": False,
            "settings": dict(settings or {}),
        },
        indent=None,  # the plan may hold many keys
    )
    return folder


def _seed(out: Path, folder: Path, files: RunFiles, keys: set[str]) -> None:
    """Copy ``out``'s manifest and its committed rows of ``keys`` into a new part."""
    keys &= _committed(out, files)
    for row_file in files.rows:
        rows = [r for r in row_file.read(out) if str(r.get(row_file.key)) in keys]
        if rows:
            row_file.write(folder, rows)
    for name in files.copied:
        if (out / name).is_file():
            shutil.copy2(out / name, folder / name)
    if files.folder and files.key_file and (out / files.folder).is_dir():
        for key in keys:
            source = out / files.folder / files.key_file(key)
            if source.is_file():
                (folder / files.folder).mkdir(exist_ok=True)
                shutil.copy2(source, folder / files.folder / source.name)
    shutil.copy2(out / MANIFEST_FILE, folder / MANIFEST_FILE)  # last: the seed is whole


def _committed(folder: Path, files: RunFiles) -> set[str]:
    """The keys with a committing row in ``folder`` (read only)."""
    commit = files.commit
    return {str(r.get(commit.key)) for r in commit.read(folder)}


def merge_if_last(out: str | Path, folder: Path, files: RunFiles) -> bool:
    """For a process whose part in ``folder`` is done: mark it complete and, when every part
    is, merge the run in ``out``; return whether this call merged it."""
    count = finish_part(folder, files)
    return count is not None and merge_parts(out, files, count=count, when_complete=True).merged


def finish_part(folder: Path, files: RunFiles) -> int | None:
    """Mark the part complete when every planned key is committed; return its shard count
    when it is, else None."""
    state = _read_json(folder / SHARD_FILE)
    if state is None:
        raise RunMismatchError(f"{folder} has no {SHARD_FILE}: not a part of a run")
    committed = _committed(folder, files)
    complete = all(key in committed for _, key in state["plan"])
    if complete != state.get("complete"):
        write_json(folder / SHARD_FILE, {**state, "complete": complete}, indent=None)
    return int(state["count"]) if complete else None


def read_parts(out: str | Path, *, count: int | None = None) -> list[Part]:
    """The parts of the run in ``out`` with ``count`` shards (default: the only count there).

    Raises
    ------
    ValueError
        No parts, several shard counts and no ``count``, or a malformed ``shard.json``.
    """
    root = Path(out) / PARTS
    found: dict[int, list[Part]] = {}
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        state = _read_json(folder / SHARD_FILE)
        if state is None:
            continue
        try:
            part = Part(
                folder,
                int(state["index"]),
                int(state["count"]),
                {str(key): int(position) for position, key in state["plan"]},
                bool(state.get("complete")),
                dict(state.get("settings", {})),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{folder / SHARD_FILE}: not a shard file of rcstat ({err})") from err
        found.setdefault(part.count, []).append(part)
    if not found:
        raise ValueError(f"{out} has no parts ({PARTS}/*/{SHARD_FILE}); nothing to merge")
    if count is None:
        if len(found) > 1:
            raise ValueError(
                f"{out} holds parts of {sorted(found)} shards; say which to merge (--shards N)"
            )
        count = next(iter(found))
    if count not in found:
        raise ValueError(f"{out} holds no parts of {count} shards (found: {sorted(found)})")
    return sorted(found[count], key=lambda p: p.index)


@dataclass
class MergeResult:
    """What a merge wrote: the keys per part, those still missing, and whether it was done."""

    parts: int
    keys: int
    missing: dict[int, int] = field(default_factory=dict)  # shard -> planned keys not done
    merged: bool = True

    @property
    def partial(self) -> bool:
        return any(self.missing.values())


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / _LOCK).open("a") as handle:
        try:
            import fcntl
        except ImportError:  # Windows: no flock; merges are rare and idempotent
            yield
            return
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _state(parts: Sequence[Part], files: RunFiles) -> list[list[Any]]:
    """Size and modification time of every part's row files (what a merge was made of)."""
    state = []
    for part in parts:
        for name in (MANIFEST_FILE, *(r.name for r in files.rows)):
            path = part.folder / name
            stat = path.stat() if path.is_file() else None
            state.append([part.index, name, stat and stat.st_size, stat and stat.st_mtime_ns])
    return state


def merge_parts(
    out: str | Path,
    files: RunFiles,
    *,
    count: int | None = None,
    partial: bool = False,
    when_complete: bool = False,
) -> MergeResult:
    """Merge the parts of the run in ``out`` into its files (see the module notes).

    Parameters
    ----------
    count : int, optional
        The number of shards whose parts are merged (default: the only one present).
    partial : bool
        Merge the committed rows of incomplete or missing parts too (the result says which
        keys are missing); otherwise an incomplete run is an error.
    when_complete : bool
        For the processes of the run: return without merging (``merged=False``) while a part
        is incomplete, and skip a merge already made of the same part files.

    Raises
    ------
    ValueError
        Parts missing, of another kind, with other settings, overlapping, or incomplete (not
        ``partial``); merged files of other settings than the parts.
    """
    out = Path(out)
    with _locked(out / PARTS):
        parts = read_parts(out, count=count)
        count = parts[0].count
        owner, position = _owners(parts)
        missing_shards = sorted(set(range(count)) - {p.index for p in parts})
        committed = {p.index: _committed(p.folder, files) for p in parts}
        missing = {p.index: sum(k not in committed[p.index] for k in p.plan) for p in parts}
        result = MergeResult(len(parts), sum(len(p.plan) for p in parts), missing)
        if missing_shards or any(missing.values()):
            if when_complete:
                result.merged = False
                return result
            if not partial:
                raise ValueError(_incomplete(out, missing_shards, missing, count))
            result.missing.update(dict.fromkeys(missing_shards, -1))
        manifest = _common_manifest(parts, files)
        state = _state(parts, files)
        previous = _read_json(out / PARTS / _MERGED)
        if when_complete and previous is not None and previous.get("state") == state:
            result.merged = False
            return result
        _check_merged_manifest(out, manifest)
        _write_rows(out, parts, files, owner, position, committed)
        for name in files.copied:
            if (parts[0].folder / name).is_file():
                shutil.copy2(parts[0].folder / name, out / name)
        if files.folder:
            for part in parts:
                source = part.folder / files.folder
                if source.is_dir():
                    (out / files.folder).mkdir(exist_ok=True)
                    for path in sorted(source.iterdir()):
                        shutil.copy2(path, out / files.folder / path.name)
        write_json(out / MANIFEST_FILE, manifest)
        write_json(out / PARTS / _MERGED, {"state": state, "partial": result.partial})
    return result


def _incomplete(out: Path, shards: list[int], missing: dict[int, int], count: int) -> str:
    lacking = {i: f"{n} key(s) not done" for i, n in missing.items() if n}
    lacking.update(dict.fromkeys(shards, "no part yet"))
    what = [f"shard {i}/{count}: {lacking[i]}" for i in sorted(lacking)]
    return (
        f"{out}: the run is not complete ({'; '.join(what)}); run the missing shards with the "
        "same command, or merge what is done with --partial"
    )


def _common_manifest(parts: Sequence[Part], files: RunFiles) -> dict[str, Any]:
    """The parts' manifest (they must agree on every compared field)."""
    manifests = []
    for part in parts:
        data = _read_json(part.folder / MANIFEST_FILE)
        if data is None:
            raise ValueError(f"{part.folder} has no {MANIFEST_FILE}: the shard never started")
        if data.get("kind") != files.kind:
            raise ValueError(f"{part.folder} holds a `{data.get('kind')}` run, not `{files.kind}`")
        manifests.append(data)
    first = compared_fields(manifests[0])
    for part, data in zip(parts[1:], manifests[1:], strict=True):
        found = differences(first, compared_fields(data))
        if found:
            raise RunMismatchError(
                f"{part.folder} was made with other settings than {parts[0].folder} ("
                + "; ".join(found)
                + "); the parts of one run must share model, tokenizer and options"
            )
    return manifests[0]


def _check_merged_manifest(out: Path, manifest: Mapping[str, Any]) -> None:
    existing = _read_json(out / MANIFEST_FILE)
    if existing is None:
        return
    found = differences(compared_fields(existing), compared_fields(manifest))
    if found:
        raise RunMismatchError(
            f"{out} already holds merged rows made with other settings than its parts ("
            + "; ".join(found)
            + "); merge them into another folder"
        )


def _owners(parts: Sequence[Part]) -> tuple[dict[str, int], dict[str, int]]:
    """The shard and the planned position of every key (a key planned twice is an error)."""
    position: dict[str, int] = {}
    owner: dict[str, int] = {}
    for part in parts:
        for key, at in part.plan.items():
            if key in owner:
                raise ValueError(
                    f"key {key!r} is planned by shards {owner[key]} and {part.index}: the parts "
                    "do not come from one run"
                )
            owner[key], position[key] = part.index, at
    return owner, position


def _write_rows(
    out: Path,
    parts: Sequence[Part],
    files: RunFiles,
    owner: Mapping[str, int],
    position: Mapping[str, int],
    committed: Mapping[int, set[str]],
) -> None:
    """Every row file: committed part rows by planned position, then the merged run's own
    rows of keys no part holds (in their order)."""
    held = set().union(*committed.values())
    for row_file in files.rows:
        rows: list[tuple[float, int, int, dict[str, Any]]] = []
        for part in parts:
            for number, row in enumerate(row_file.read(part.folder)):
                key = str(row.get(row_file.key))
                if key in committed[part.index] and owner.get(key, part.index) == part.index:
                    rows.append((position.get(key, float("inf")), part.index, number, row))
        ordered = [row for *_, row in sorted(rows, key=lambda item: item[:3])]
        own = [r for r in row_file.read(out) if str(r.get(row_file.key)) not in held]
        if ordered or own or (out / row_file.name).is_file():
            row_file.write(out, ordered + own)
