"""Dataset-scale head analysis (paper §5.1, Fig. 4c/d, supplement Figs 1–6).

``rcstat.heads.collect(model, tokenizer, examples)`` runs :func:`rcstat.analyze` over a
dataset into a long table (one row per example, layer and head),
``rcstat.heads.summarize(frame)`` gives each head's distribution over the examples, the head
counts, the layer-depth profile and the ranking stability, and ``rcstat.heads.compare(a, b)``
tests whether one dataset recruits more high-RC heads than another. The figures are drawn by
:mod:`rcstat.report.heads_plots` (``plot_percentile_bands(summary)`` and the others).
``rcstat heads`` as a library call, with the run folder's summary and figures, is
:mod:`rcstat.evaluation.bench.heads`.

Names are resolved lazily (PEP 562): importing ``rcstat.heads`` (or the CLI module) does not
import torch or transformers. ``rcstat.heads.collect`` is the *function*; the module of the
same name is reached with ``from rcstat.heads.collection import ...``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcstat.heads.collection import JsonlExample, collect, load_jsonl
    from rcstat.heads.comparison import Comparison, MannWhitney, compare
    from rcstat.heads.summary import HeadSummary, summarize
    from rcstat.heads.table import read_heads

__all__ = [
    "Comparison",
    "HeadSummary",
    "JsonlExample",
    "MannWhitney",
    "collect",
    "compare",
    "load_jsonl",
    "read_heads",
    "summarize",
]

_HOMES = {
    **dict.fromkeys(("JsonlExample", "collect", "load_jsonl"), "rcstat.heads.collection"),
    "read_heads": "rcstat.heads.table",
    **dict.fromkeys(("HeadSummary", "summarize"), "rcstat.heads.summary"),
    **dict.fromkeys(("Comparison", "MannWhitney", "compare"), "rcstat.heads.comparison"),
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rcstat.heads' has no attribute {name!r}")
