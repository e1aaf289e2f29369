"""rcstat as a metric of RAG-evaluation frameworks (docs/integrations.md).

One module per framework, each an optional extra that needs no LLM key and no network:

* :mod:`rcstat.integrations.ragas_metric` — ``RagasGrounding``, a ragas collections metric
  (``pip install "rcstat[ragas]"``);
* :mod:`rcstat.integrations.deepeval_metric` — ``DeepEvalGrounding``, a
  ``deepeval.metrics.BaseMetric`` (``pip install "rcstat[deepeval]"``);
* :mod:`rcstat.integrations.trulens_feedback` — ``trulens_feedback()``, a TruLens
  ``Feedback`` (``pip install "rcstat[trulens]"``).

All three score with one :class:`~rcstat.integrations.core.GroundingScorer`: the
:class:`~rcstat.grounding.Grounder` built once, lazily, from a model name (default: the
embedded model) or given ready-made; every score is ``Grounder.ground(...).score``. The modules
are named after their role, not after the framework, so that ``import ragas`` inside them can
never find the module itself; each imports its framework only when its metric is first built.
This package does no work at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcstat.lazy import lazy_names

if TYPE_CHECKING:
    from rcstat.integrations.core import GroundingScorer, MissingFrameworkError

__all__ = ["GroundingScorer", "MissingFrameworkError"]

_HOMES = {
    "GroundingScorer": "rcstat.integrations.core",
    "MissingFrameworkError": "rcstat.integrations.core",
}

__getattr__ = lazy_names(__name__, _HOMES)


def __dir__() -> list[str]:
    return sorted(__all__)
