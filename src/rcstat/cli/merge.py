"""``rcstat merge RUN``: merge the parts of a data-parallel run and rebuild its summaries.

The processes of a run launched with torchrun / accelerate / srun / ``--shard`` each write a
part under ``RUN/parts/``; the last to finish merges them. This command does the same by hand:
after a run whose last process was killed, to look at what is done so far (``--partial``), or
to choose between parts of different shard counts (``--shards``). The kind of run is looked up
in :data:`rcstat.evaluation.bench.registry.JOBS`; the summaries are those the run's own command
writes, with the settings it recorded in its parts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.cli._common import add_command, check_output_folder, console, optional_count, say

NAME = "merge"


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``merge`` sub-command to ``sub``."""
    p = add_command(
        sub,
        NAME,
        "merge the parts of a data-parallel run (heads, bench) and rebuild its summaries",
        "Merge RUN/parts/<i>-of-<N>/ into the files a single-process run writes in RUN, then "
        "rebuild the run's summaries. The last process of a run does this by itself.",
        model=False,
    )
    p.add_argument("run", help="the --out folder of a data-parallel run")
    p.add_argument(
        "--shards", type=int, default=None, help="merge the parts of N shards (when several N)"
    )
    p.add_argument(
        "--partial",
        action="store_true",
        help="merge what is done although shards are missing or unfinished (reported as such)",
    )
    return p


@dataclass
class MergeArgs:
    """Arguments of ``rcstat merge`` (checked)."""

    run: Path
    shards: int | None
    partial: bool

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> MergeArgs:
        shards = optional_count("--shards", ns.shards)
        run = Path(ns.run)
        if not (run / "parts").is_dir():
            raise ValueError(f"{run} has no parts/ folder: not the --out of a data-parallel run")
        return cls(run, shards, ns.partial)


#: The checked arguments of ``rcstat merge``.
from_namespace = MergeArgs.from_namespace


def run(args: MergeArgs) -> int:
    """Merge, summarise, and say what is missing when the merge is partial."""
    from rcstat.evaluation.bench.registry import job_kind, run_summary
    from rcstat.runs.manifest import read_manifest
    from rcstat.runs.parts import merge_parts, read_parts

    parts = read_parts(args.run, count=args.shards)
    manifest = read_manifest(parts[0].folder) or {}
    job = job_kind(str(manifest.get("kind")))
    check_output_folder(args.run, job.kind)  # the kind is the output marker's command
    result = merge_parts(args.run, job.files, count=parts[0].count, partial=args.partial)
    console.print(
        f"merged {result.parts} part(s) of {parts[0].count} shard(s) into {escape(str(args.run))}"
    )
    for line in run_summary(job.kind)(args.run, parts[0].settings).lines():
        say(line)
    if result.partial:
        lacking = ", ".join(
            f"shard {i}: " + ("no part" if n < 0 else f"{n} not done")
            for i, n in sorted(result.missing.items())
            if n
        )
        console.print(f"[yellow]partial merge[/yellow]: {escape(lacking)}")
    return 0
