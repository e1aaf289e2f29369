"""One driver for every resumable dataset job: shard → manifest → resume → loop → append → merge.

A dataset job (``rcstat heads``, ``rcstat bench kv|attribution|grounding``, ``rcstat ground
--pairs``) is a :class:`Job`:
its kind, its row files (:class:`~rcstat.runs.parts.RunFiles`), the options that change its
rows (:meth:`Job.manifest_options`), its work items (:meth:`Job.items`: a key, the content hash
of what determines the item's rows, and the example it belongs to), how one item is run
(:meth:`Job.run_one`: the rows it adds to each row file). :func:`run_job` does the rest, the
same way for every job:

1. **Shard**: with a :class:`~rcstat.runs.shards.Shard` of several, this process takes the
   items of every ``count``-th example (round robin over examples, so that every item of an
   example stays in one process) and works in its part ``out/parts/<i>-of-<N>/``
   (:func:`~rcstat.runs.parts.start_part`).
2. **Manifest**: :class:`~rcstat.runs.manifest.RunManifest` of the model, the tokenizer and the
   options; a folder made with other settings is refused, each difference named
   (:func:`~rcstat.runs.manifest.open_run`).
3. **Resume**: the commit file's rows (one per finished item, success or recorded failure) are
   sorted by :func:`~rcstat.runs.rows.resume_plan`; an item whose rows in another row file are
   incomplete (an interruption between two writes) is computed again, and rows without a
   commit are dropped.
4. **Loop and append**: each item's rows are appended, the commit row last.
5. **Merge**: the process that completes the last part merges the run
   (:func:`~rcstat.runs.parts.merge_if_last`).

This module knows no job by name: the registry of job kinds (``rcstat merge`` looks a run's
kind up there) sits beside the jobs, in :mod:`rcstat.evaluation.bench.registry`. A job makes
rows; its summary — tables and figures — belongs to the evaluation layer that renders it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from rcstat.progress import progress as show_progress
from rcstat.runs.devices import Devices
from rcstat.runs.folder import check_output_folder
from rcstat.runs.manifest import RunManifest, check_options, open_run
from rcstat.runs.parts import RunFiles, merge_if_last, part_folder, start_part
from rcstat.runs.rows import RowFile, resume_plan
from rcstat.runs.shards import Shard, parse_shard

__all__ = [
    "Config",
    "Item",
    "Job",
    "JobRun",
    "check_run_folder",
    "config_values",
    "resume_rows",
    "run_job",
]


@dataclass(frozen=True)
class Item:
    """One unit of work: its rows' ``key``, the content ``hash`` of what determines them, the
    position ``example`` of the example it belongs to (what a shard takes) and the job's own
    ``data``."""

    key: str
    hash: str
    example: int
    data: Any = None


class Job(ABC):
    """A resumable, shardable, mergeable dataset job (see the module notes).

    Subclasses set :attr:`kind` and :attr:`files` and implement the abstract methods;
    :meth:`check`, :meth:`begin` and :meth:`expected_rows` are optional hooks.
    """

    #: The kind of run recorded in the manifest (a key of
    #: :data:`rcstat.evaluation.bench.registry.JOBS`).
    kind: ClassVar[str]
    #: The row files of a run and the files its parts and their merge carry.
    files: ClassVar[RunFiles]

    @abstractmethod
    def source(self) -> tuple[Any, Any, str | None]:
        """The model, the tokenizer and the model's name for the manifest."""

    @abstractmethod
    def manifest_options(self) -> dict[str, Any]:
        """Every option that changes a row (JSON-able), compared on resume."""

    @abstractmethod
    def items(self) -> Sequence[Item]:
        """Every work item, in the order of a single-process run (keys unique)."""

    @abstractmethod
    def run_one(self, item: Item, folder: Path | None) -> dict[str, list[dict[str, Any]]]:
        """Run one item: its rows per row-file name (the commit file's row included; a
        failure is recorded in that row's error field, never raised). ``folder`` (None without
        an output folder) is where per-key files go."""

    def run_batch(
        self, items: Sequence[Item], folder: Path | None
    ) -> list[dict[str, list[dict[str, Any]]]]:
        """Run several items together (e.g. in one forward pass): what :meth:`run_one` gives
        for each, in order. By default one after another; a job that batches overrides it
        and :meth:`batch_size`."""
        return [self.run_one(item, folder) for item in items]

    def batch_size(self) -> int:
        """Items given to each :meth:`run_batch` (their rows are written after it)."""
        return 1

    def progress_label(self) -> tuple[str, str]:
        """The progress line's description and unit."""
        return self.kind, "item"

    def check(self, manifest: RunManifest) -> None:  # noqa: B027 (an optional hook)
        """Refuse, before anything is written, a run whose manifest does not suit the job."""

    def begin(self, folder: Path) -> None:  # noqa: B027 (an optional hook)
        """Write what a run writes once per call, after its manifest (e.g. ``config.json``)."""

    def expected_rows(self) -> dict[str, int]:
        """Rows per successful item of each non-commit row file (an item with fewer was cut by
        an interruption and is computed again)."""
        return {}


@dataclass
class JobRun:
    """What :func:`run_job` did.

    Attributes
    ----------
    folder : Path or None
        Where the rows went: the run folder, this shard's part, or None (no output folder).
    items : list of Item
        This process's items.
    ran : int
        Items run by this call.
    errors : dict
        Key → error message of the items that failed in this call.
    rows : dict
        Without an output folder, the rows computed, per row-file name.
    merged : bool
        Whether this process merged the parts of a sharded run.
    split : bool
        Whether the run is shared between several processes.
    """

    folder: Path | None
    items: list[Item]
    ran: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    merged: bool = False
    split: bool = False


class Config(ABC):
    """A dataclass of a command's or a job's options, built from a plain mapping by
    :meth:`from_dict` and checked by its one validator, :meth:`check`."""

    #: The fields that :meth:`from_dict` reads as paths.
    PATHS: ClassVar[tuple[str, ...]] = ("out",)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """A checked config from a mapping of field names (missing: the defaults; as
        :func:`config_values` reads them: ``devices`` and an embedded options dataclass as
        mappings of their fields, ``shard`` as ``"i/N"``, :attr:`PATHS` as paths).

        Raises
        ------
        ValueError
            An unknown field, or a value out of its range (the message names the option).
        """
        config = cls(**config_values(cls, cls.prepared(dict(data)), paths=cls.PATHS))
        config.check_values()
        config.check()
        return config

    @classmethod
    def from_flags(cls, flags: Any, **given: Any) -> Self:
        """The checked config of the command line (lm-evaluation-harness's ``from_cli``):
        ``flags`` has an attribute named as each field (an argparse namespace, whose flags
        default to None), ``given`` the fields its flags make another way (parsed lists,
        nested options); None keeps the field's default, and every message names the flag
        (:meth:`check_flags`). ``devices`` and ``shard`` are the caller's (several flags and
        the launcher's environment make them)."""
        values = {
            item.name: getattr(flags, item.name, None)
            for item in fields(cls)  # type: ignore[arg-type]  # a dataclass subclass
            if item.name not in ("devices", "shard")
        }
        values.update(given)
        present = {k: v for k, v in values.items() if v is not None}
        config = cls(**config_values(cls, present, paths=cls.PATHS))
        config.check_values()
        config.check_flags()
        return config

    @classmethod
    def default(cls, name: str) -> Any:
        """The default of the field ``name`` (what ``--help`` shows for a flag that defaults to
        None so that the config holds the default)."""
        for item in fields(cls):  # type: ignore[arg-type]  # a dataclass subclass
            if item.name == name:
                factory = item.default_factory
                return factory() if factory is not MISSING else item.default
        raise KeyError(f"{cls.__name__} has no field {name!r}")

    @classmethod
    def prepared(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The mapping :meth:`from_dict` reads, with the values that a plain mapping holds in
        another shape converted (e.g. a list for a tuple); as it is by default."""
        return data

    def check_values(self) -> None:  # noqa: B027 (optional: most configs have none)
        """The checks of single values that a command line makes as it reads its flags, made
        here for :meth:`from_dict` (``ValueError`` naming the field); none by default."""

    @abstractmethod
    def check(self) -> None:
        """Every option in its range and the options that go together (``ValueError`` naming
        the option)."""

    def check_flags(self) -> None:
        """:meth:`check` as the command line makes it (messages naming the flags); the same by
        default."""
        self.check()


def config_values(
    config: type, data: Mapping[str, Any], *, paths: Sequence[str] = ("out",)
) -> dict[str, Any]:
    """The keyword arguments of a job's config dataclass from a plain mapping: ``devices`` as
    a mapping of :class:`~rcstat.runs.devices.Devices` fields (checked), ``shard`` as
    ``"i/N"``, an options dataclass the config embeds as a mapping of its fields, the fields
    named in ``paths`` as paths.

    Raises
    ------
    ValueError
        A key that is not a field of ``config`` (the message lists the fields), or a device or
        shard that does not exist.
    """
    known = {f.name for f in fields(config)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown option(s) {unknown}; known: {sorted(known)}")
    values = dict(data)
    if isinstance(values.get("devices"), Mapping):
        values["devices"] = Devices.from_dict(values["devices"])
    if isinstance(values.get("shard"), str):
        values["shard"] = parse_shard(values["shard"])
    for item in fields(config):  # a nested options dataclass (e.g. GroundingOptions) as a mapping
        kind = item.default_factory
        if isinstance(values.get(item.name), Mapping) and is_dataclass(kind):
            allowed = {f.name for f in fields(kind)}
            extra = sorted(set(values[item.name]) - allowed)
            if extra:
                raise ValueError(f"unknown {item.name} {extra}; known: {sorted(allowed)}")
            values[item.name] = kind(**values[item.name])
    for name in paths:
        if values.get(name) is not None:
            values[name] = Path(values[name])
    return values


def check_run_folder(
    out: Path, kind: str, options: Mapping[str, Any], shard: Shard | None = None
) -> None:
    """Refuse, before a model loads, an output folder of another command, or a run folder —
    or this shard's part of it — whose manifest has another kind or other ``options`` (a
    subset of the run's options suffices; see :func:`~rcstat.runs.manifest.check_options`)."""
    check_output_folder(out, kind)  # a job's kind is the command that owns its folder
    check_options(out, kind, options)
    if shard is not None and shard.split:
        check_options(part_folder(out, shard), kind, options)


def _unique(items: Sequence[Item]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.key in seen:  # resuming keys on the key: it must be unique
            raise ValueError(f"duplicate item key {item.key!r}; example ids must be unique")
        seen.add(item.key)


def run_job(
    job: Job,
    out: str | Path | None,
    *,
    shard: Shard | None = None,
    retry_failed: bool = True,
    settings: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> JobRun:
    """Run (or resume) ``job`` into ``out`` (see the module notes).

    Parameters
    ----------
    job : Job
        The job.
    out : str or Path, optional
        The run folder; None runs every item and returns the rows (nothing resumed).
    shard : Shard, optional
        This process's shard of a data-parallel run.
    retry_failed : bool, default True
        Run again the items recorded as failed.
    settings : mapping, optional
        With a shard, recorded in its part for whoever summarises the merged run.
    progress : bool, default True
        Show progress on standard error.

    Raises
    ------
    RunMismatchError
        ``out`` (or this shard's part) holds a run with other settings, or rows without a
        manifest.
    RowFileError
        A malformed row that is not the last one of its file.
    """
    items = list(job.items())
    _unique(items)
    split = shard is not None and shard.split
    if split:
        assert shard is not None
        mine = [(at, it) for at, it in enumerate(items) if it.example % shard.count == shard.index]
        items = [it for _, it in mine]
    run = JobRun(None, items, split=split)
    if out is None:
        for batch in _progress(job, items, progress):
            for item, produced in zip(batch, job.run_batch(batch, None), strict=True):
                for name, rows in produced.items():
                    run.rows.setdefault(name, []).extend(rows)
                _note_error(job.files, run, item, run.rows)
        run.ran = len(items)
        return run
    root = Path(out)
    folder = root
    if split:
        assert shard is not None
        folder = start_part(root, job.files, shard, [(at, it.key) for at, it in mine], settings)
    model, tokenizer, model_name = job.source()
    manifest = RunManifest.build(
        folder, job.kind, model, tokenizer, job.manifest_options(), model_name=model_name
    )
    job.check(manifest)
    open_run(folder, manifest, rows=(*job.files.copied, *(r.name for r in job.files.rows)))
    job.begin(folder)
    wanted = {item.key: item.hash for item in items}
    done = resume_rows(folder, job.files, wanted, retry_failed, job.expected_rows())
    todo = [item for item in items if item.key not in done]
    order = sorted(job.files.rows, key=lambda r: r.commit)  # the commit file last
    for batch in _progress(job, todo, progress):
        for item, produced in zip(batch, job.run_batch(batch, folder), strict=True):
            for row_file in order:
                rows = produced.get(row_file.name, [])
                if rows:
                    row_file.append(folder, rows)
            _note_error(job.files, run, item, produced)
    run.folder, run.ran = folder, len(todo)
    if split:
        run.merged = merge_if_last(root, folder, job.files)
    return run


def _progress(job: Job, items: list[Item], enabled: bool) -> Iterator[list[Item]]:
    """``items`` in runs of :meth:`Job.batch_size`, their progress counted in items."""
    desc, unit = job.progress_label()
    size = max(1, job.batch_size())
    batches = [items[at : at + size] for at in range(0, len(items), size)]
    return show_progress(batches, total=len(items), desc=desc, unit=unit, enabled=enabled, size=len)


def _note_error(
    files: RunFiles, run: JobRun, item: Item, rows: Mapping[str, list[dict[str, Any]]]
) -> None:
    commit = files.commit
    for row in rows.get(commit.name, [])[-1:]:
        if row.get(commit.error_field) and str(row.get(commit.key)) == item.key:
            run.errors[item.key] = str(row[commit.error_field])


def resume_rows(
    folder: Path,
    files: RunFiles,
    wanted: Mapping[str, str],
    retry_failed: bool,
    expected: Mapping[str, int],
) -> set[str]:
    """Resume the row files of ``folder`` for the items ``wanted`` (key → hash); return the
    keys that need no work.

    The commit file's rows are sorted by :func:`~rcstat.runs.rows.resume_plan`; a kept
    success whose rows in a row file of ``expected`` are not ``expected[name]`` (cut by an
    interruption) is dropped too, and every row of another row file whose key has no kept
    success is dropped. A file is rewritten (atomically) only when a row is dropped.
    """
    commit = files.commit
    records = commit.read_for_resume(folder)
    plan = resume_plan(
        records,
        wanted,
        key=commit.key,
        retry_failed=retry_failed,
        failed=commit.error_field,
        hash_field=commit.hash_field,
    )
    others: dict[RowFile, list[dict[str, Any]]] = {
        row_file: row_file.read_for_resume(folder) for row_file in files.rows if not row_file.commit
    }
    counts = {row_file.name: _count(rows, row_file.key) for row_file, rows in others.items()}

    def whole(record: Mapping[str, Any]) -> bool:
        if record.get(commit.error_field):
            return True
        key = str(record.get(commit.key))
        return all(counts.get(name, {}).get(key) == n for name, n in expected.items())

    keep = [record for record in plan.keep if whole(record)]
    if len(keep) != len(records):
        commit.write(folder, keep)
    good = {str(r.get(commit.key)) for r in keep if not r.get(commit.error_field)}
    for row_file, rows in others.items():
        kept = [row for row in rows if str(row.get(row_file.key)) in good]
        if len(kept) != len(rows):
            row_file.write(folder, kept)
    return {str(r.get(commit.key)) for r in keep}


def _count(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        name = str(row.get(key))
        counts[name] = counts.get(name, 0) + 1
    return counts
