"""Dataset-scale head analysis (paper §5.1, Fig. 4c/d, supplement Figs 1–6).

``rcstat.heads.collect(model, tokenizer, examples)`` runs :func:`rcstat.analyze` over a
dataset into a long table (one row per example, layer and head),
``rcstat.heads.summarize(frame)`` gives each head's distribution over the examples, the head
counts, the layer-depth profile and the ranking stability, and ``rcstat.heads.compare(a, b)``
tests whether one dataset recruits more high-RC heads than another. The ``plot_*`` functions
draw the figures. :class:`HeadsConfig` with :func:`rcstat.heads.run.run` is ``rcstat heads``
as a library call (:mod:`rcstat.heads.run`).

Names are resolved lazily (PEP 562): importing ``rcstat.heads`` (or the CLI module) does not
import torch or transformers. ``rcstat.heads.collect`` is the *function*; the module of the
same name is reached with ``from rcstat.heads.collection import ...``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rcstat.heads.collection import JsonlExample, collect, load_jsonl, read_heads
    from rcstat.heads.plots import (
        plot_comparison,
        plot_head_distributions,
        plot_median_heatmap,
        plot_percentile_bands,
    )
    from rcstat.heads.results import HeadsResult
    from rcstat.heads.run import HeadsConfig
    from rcstat.heads.summary import Comparison, HeadSummary, MannWhitney, compare, summarize
    from rcstat.report.plots import save_figure

__all__ = [
    "Comparison",
    "HeadSummary",
    "HeadsConfig",
    "HeadsResult",
    "JsonlExample",
    "MannWhitney",
    "collect",
    "compare",
    "load_jsonl",
    "plot_comparison",
    "plot_head_distributions",
    "plot_median_heatmap",
    "plot_percentile_bands",
    "read_heads",
    "save_figure",
    "summarize",
]

_HOMES = {
    **dict.fromkeys(
        ("JsonlExample", "collect", "load_jsonl", "read_heads"), "rcstat.heads.collection"
    ),
    **dict.fromkeys(
        ("Comparison", "HeadSummary", "MannWhitney", "compare", "summarize"),
        "rcstat.heads.summary",
    ),
    **dict.fromkeys(
        (
            "plot_comparison",
            "plot_head_distributions",
            "plot_median_heatmap",
            "plot_percentile_bands",
        ),
        "rcstat.heads.plots",
    ),
    "save_figure": "rcstat.report.plots",
    "HeadsConfig": "rcstat.heads.run",
    "HeadsResult": "rcstat.heads.results",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(import_module(_HOMES[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rcstat.heads' has no attribute {name!r}")
