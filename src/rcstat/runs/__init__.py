"""Resumable, sharded, mergeable runs: one package for every dataset job of rcstat.

* :mod:`~rcstat.runs.manifest` — what determines a run's rows (``run.json``), and the hashes
  it is made of; a folder made with other settings is refused with each difference named.
* :mod:`~rcstat.runs.rows` — row files that survive Ctrl-C (JSON lines or CSV, one write per
  item), atomic rewrites, and the plan of a resumed run.
* :mod:`~rcstat.runs.shards` — which share of the examples a process of a data-parallel run
  takes; :mod:`~rcstat.runs.devices` — where its model runs (its GPUs).
* :mod:`~rcstat.runs.parts` — the parts of a sharded run and their merge into the files of a
  single-process run.
* :mod:`~rcstat.runs.folder` — output-folder safety (rcstat writes only folders it owns).
* :mod:`~rcstat.runs.job` — the :class:`Job` interface,
  and the one driver :func:`run_job`.

Every module imports only the standard library at import time (torch when a device is asked
for).
"""

from rcstat.runs.devices import DEVICE_MAPS, DTYPES, Devices
from rcstat.runs.folder import (
    OUTPUT_MARKER,
    check_output_folder,
    check_writable,
    claim_output_folder,
    staged_output,
)
from rcstat.runs.job import (
    Item,
    Job,
    JobRun,
    check_run_folder,
    run_job,
)
from rcstat.runs.manifest import (
    MANIFEST_FILE,
    RunManifest,
    RunMismatchError,
    check_options,
    content_hash,
    describe_model,
    model_label,
    open_run,
    rcstat_version,
    tokenizer_digest,
)
from rcstat.runs.parts import (
    PARTS,
    SHARD_FILE,
    MergeResult,
    Part,
    RunFiles,
    finish_part,
    merge_if_last,
    merge_parts,
    part_folder,
    read_parts,
    start_part,
)
from rcstat.runs.rows import (
    EXAMPLE_HASH,
    ResumePlan,
    RowFile,
    RowFileError,
    append_csv_row,
    append_jsonl,
    drop_cut_last_line,
    read_csv_rows,
    read_jsonl,
    resume_plan,
    write_csv_rows,
    write_json,
    write_jsonl,
)
from rcstat.runs.shards import Shard, detect_shard, parse_shard, process_gpus

__all__ = [
    "DEVICE_MAPS",
    "DTYPES",
    "EXAMPLE_HASH",
    "MANIFEST_FILE",
    "OUTPUT_MARKER",
    "PARTS",
    "SHARD_FILE",
    "Devices",
    "Item",
    "Job",
    "JobRun",
    "MergeResult",
    "Part",
    "ResumePlan",
    "RowFile",
    "RowFileError",
    "RunFiles",
    "RunManifest",
    "RunMismatchError",
    "Shard",
    "append_csv_row",
    "append_jsonl",
    "check_options",
    "check_output_folder",
    "check_run_folder",
    "check_writable",
    "claim_output_folder",
    "content_hash",
    "describe_model",
    "detect_shard",
    "drop_cut_last_line",
    "finish_part",
    "merge_if_last",
    "merge_parts",
    "model_label",
    "open_run",
    "parse_shard",
    "part_folder",
    "process_gpus",
    "rcstat_version",
    "read_csv_rows",
    "read_jsonl",
    "read_parts",
    "resume_plan",
    "run_job",
    "staged_output",
    "start_part",
    "tokenizer_digest",
    "write_csv_rows",
    "write_json",
    "write_jsonl",
]
