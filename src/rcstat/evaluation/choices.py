"""The choices of the benchmarks' options, importable without torch (the configs check them
before any heavy import)."""

from __future__ import annotations

__all__ = ["GROUNDING_DATASETS", "LAYOUTS"]

#: How the sources are written into the prompt of the attribution benchmark
#: (:mod:`rcstat.evaluation.attribution_bench`).
LAYOUTS = ("numbered", "numbered-text", "plain")
#: The datasets of ``rcstat bench grounding`` (:mod:`rcstat.evaluation.grounding_bench`).
GROUNDING_DATASETS = (
    "ragtruth",
    "faithbench",
    "summedits",
    "jsonl",
    "squad-contrast",
    "squad-swaps",
)
