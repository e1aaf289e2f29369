"""The choices of the benchmarks' options, importable without torch (the configs check them
before any heavy import)."""

from __future__ import annotations

__all__ = [
    "GROUNDING_DATASETS",
    "LAYOUTS",
    "PAIR_DATASETS",
    "SCOPED_DATASETS",
    "SPAN_DATASETS",
]

#: How the sources are written into the prompt of the attribution benchmark
#: (:mod:`rcstat.evaluation.bench.attribution`).
LAYOUTS = ("numbered", "numbered-text", "plain")
#: The datasets of ``rcstat bench grounding`` (:mod:`rcstat.evaluation.bench.grounding`).
GROUNDING_DATASETS = (
    "ragtruth",
    "faithbench",
    "summedits",
    "jsonl",
    "squad-contrast",
    "squad-swaps",
)
#: The grounding datasets of (supported, unsupported) pairs of one answer or one sentence
#: (SQuAD v2 constructions: their summary compares the two items of each pair).
PAIR_DATASETS = ("squad-contrast", "squad-swaps")
#: The grounding datasets whose responses carry annotated spans: per-token files and
#: span-level metrics.
SPAN_DATASETS = ("ragtruth", "faithbench", "jsonl")
#: The grounding datasets whose metrics are also given for each breakdown key (RAGTruth's
#: tasks).
SCOPED_DATASETS = ("ragtruth",)
