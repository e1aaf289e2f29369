"""``rcstat merge RUN``: merge the parts of a data-parallel run and rebuild its summaries.

The processes of a run launched with torchrun / accelerate / srun / ``--shard`` each write a
part under ``RUN/parts/``; the last to finish merges them. This command does the same by hand:
after a run whose last process was killed, to look at what is done so far (``--partial``), or
to choose between parts of different shard counts (``--shards``). The summaries are those the
run's own command writes, with the settings it recorded in its parts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.markup import escape

from rcstat.cli._common import HelpFormatter, check_output_folder, console, optional_count

NAME = "merge"
# kind of run -> the output marker's command (rcstat.cli.heads / bench)
_COMMANDS = {
    "heads": "heads",
    "bench kv": "bench kv",
    "bench attribution": "bench attribution",
    "bench grounding": "bench grounding",
}


def register(sub: Any) -> argparse.ArgumentParser:
    """Add the ``merge`` sub-command to ``sub``."""
    p = sub.add_parser(
        NAME,
        formatter_class=HelpFormatter,
        help="merge the parts of a data-parallel run (heads, bench) and rebuild its summaries",
        description=(
            "Merge RUN/parts/<i>-of-<N>/ into the files a single-process run writes in RUN, "
            "then rebuild the run's summaries. The last process of a run does this by itself."
        ),
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


def from_namespace(ns: argparse.Namespace) -> MergeArgs:
    return MergeArgs.from_namespace(ns)


def _files_and_summary(kind: str) -> tuple[Any, Any]:
    """The run files and the summary function of a kind of run."""
    if kind == "heads":
        from rcstat.cli.heads import summarize_run
        from rcstat.heads.collection import RUN_FILES

        return RUN_FILES, summarize_run
    from rcstat.cli import bench

    if kind == "bench kv":
        from rcstat.evaluation.kv_bench import RUN_FILES as KV_FILES

        return KV_FILES, bench.summarize_kv
    if kind == "bench attribution":
        from rcstat.evaluation.attribution_bench import RUN_FILES as ATTRIBUTION_FILES

        return ATTRIBUTION_FILES, bench.summarize_attribution
    from rcstat.evaluation.grounding_bench import RUN_FILES as GROUNDING_FILES

    return GROUNDING_FILES, bench.summarize_grounding


def run(args: MergeArgs) -> int:
    """Merge, summarise, and say what is missing when the merge is partial."""
    import json

    from rcstat.runs.manifest import MANIFEST_FILE
    from rcstat.runs.parts import merge_parts, read_parts

    parts = read_parts(args.run, count=args.shards)
    manifest = json.loads((parts[0].folder / MANIFEST_FILE).read_text(encoding="utf-8"))
    kind = manifest.get("kind")
    if kind not in _COMMANDS:
        raise ValueError(f"{parts[0].folder}: a `{kind}` run has no merge")
    check_output_folder(args.run, _COMMANDS[kind])
    files, summarize = _files_and_summary(kind)
    result = merge_parts(args.run, files, count=parts[0].count, partial=args.partial)
    console.print(
        f"merged {result.parts} part(s) of {parts[0].count} shard(s) into {escape(str(args.run))}"
    )
    code = int(summarize(args.run, parts[0].settings))
    if result.partial:
        lacking = ", ".join(
            f"shard {i}: " + ("no part" if n < 0 else f"{n} not done")
            for i, n in sorted(result.missing.items())
            if n
        )
        console.print(f"[yellow]partial merge[/yellow]: {escape(lacking)}")
    return code
