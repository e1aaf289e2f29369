"""``rcstat bench kv``, ``attribution`` and ``grounding``: resumable benchmarks over a dataset.

Each benchmark is a submodule with ``register(bench_sub)``, ``from_namespace(ns)`` (its
library config, checked before any model loads), ``run(config, loader)`` (one call to the
library's ``rcstat.evaluation.bench.<name>.run``, its result returned) and ``held(result)``
(the examples the run folder holds). This module adds the ``bench`` command, dispatches and
prints the result's lines, first saying when the folder holds more examples than ``--n``
asks for; the model is loaded through :func:`load_model_quietly` (a progress line, no
transformers bars).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rcstat.cli._common import add_command, folder_note, load_model_quietly, say
from rcstat.cli.bench import attribution, grounding, kv

NAME = "bench"
BENCHES: dict[str, ModuleType] = {"kv": kv, "attribution": attribution, "grounding": grounding}


def register(sub: Any) -> None:
    """Add ``bench kv``, ``bench attribution`` and ``bench grounding`` to ``sub``."""
    bench = add_command(sub, NAME, "benchmarks over a dataset", model=False)
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    for module in BENCHES.values():
        module.register(bench_sub)


@dataclass(frozen=True)
class BenchArgs:
    """A benchmark's name and its checked library config."""

    bench: str
    config: Any

    @property
    def out(self) -> Path:
        """The run folder (named when a run is interrupted)."""
        return Path(self.config.out)


def from_namespace(ns: argparse.Namespace) -> BenchArgs:
    """The checked config of the benchmark named by ``ns.bench``."""
    return BenchArgs(ns.bench, BENCHES[ns.bench].from_namespace(ns))


def run(args: BenchArgs) -> int:
    """Run the benchmark of ``args`` (made by :func:`from_namespace`)."""
    module = BENCHES[args.bench]
    result = module.run(args.config, load_model_quietly)
    note = folder_note(module.held(result), args.config.n)
    for line in ([] if note is None else [note]) + result.lines():
        say(line)
    return 0
