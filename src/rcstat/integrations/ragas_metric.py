"""rcstat's grounding score as a ragas metric (``pip install "rcstat[ragas]"``).

Two classes over one :class:`~rcstat.integrations.core.GroundingScorer`, no LLM and no
embeddings:

* ``RagasGrounding`` — a metric of ragas' collections (``ragas.metrics.collections``
  ``BaseMetric``): ``await metric.ascore(response=..., retrieved_contexts=[...],
  user_input=...)`` returns a ``MetricResult`` whose ``value`` is ``Grounder.ground(...).score``
  and whose ``reason`` names the unsupported spans; it runs in ragas' experiment loop
  (``@experiment`` … ``.arun(dataset)``);
* ``RagasGroundingLegacy`` — the same score as a ``SingleTurnMetric``, the kind of metric that
  ``ragas.evaluate``/``aevaluate`` take (columns ``response``, ``retrieved_contexts`` and
  optionally ``user_input``).

The classes subclass ragas' own, so they are built when first read (PEP 562 ``__getattr__``):
this module imports without ragas, and reading a class without it raises
:class:`~rcstat.integrations.core.MissingFrameworkError` naming the extra. Ground calls are
serialised by the scorer and run on a worker thread, so ragas' event loop stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from rcstat.integrations.core import GroundingScorer, reason, require

if TYPE_CHECKING:
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.options import GroundingOptions

# the classes are built when first read (module __getattr__)
__all__ = ["DEFAULT_NAME", "RagasGrounding", "RagasGroundingLegacy"]  # noqa: F822

#: The metric's name (its column in ragas' results).
DEFAULT_NAME = "rcstat_grounding"


class _ScoredMetric:
    """The constructor both metric classes share: ragas' base class built from
    :meth:`base_arguments` (the metric's ``name`` and what its kind of metric needs), then the
    scorer (parameters as :class:`RagasGrounding`)."""

    def __init__(
        self,
        grounder: Grounder | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        options: GroundingOptions | dict[str, Any] | None = None,
        name: str = DEFAULT_NAME,
    ) -> None:
        super().__init__(**self.base_arguments(name))
        self.scorer = GroundingScorer(
            grounder=grounder, model=model, device=device, options=options
        )

    def base_arguments(self, name: str) -> dict[str, Any]:
        """The keyword arguments of ragas' base class for a metric called ``name``."""
        raise NotImplementedError


@cache
def _classes() -> dict[str, type]:
    """Build the two metric classes over ragas' bases (once; ragas imported here)."""
    base = require("ragas.metrics.collections.base", "ragas").BaseMetric
    result_type = require("ragas.metrics.result", "ragas").MetricResult
    legacy = require("ragas.metrics.base", "ragas")

    class RagasGrounding(_ScoredMetric, base):  # type: ignore[misc,valid-type]
        """rcstat's grounding score as a ragas collections metric (higher = supported).

        Parameters
        ----------
        grounder
            A ready :class:`~rcstat.grounding.Grounder`; or none, and the next three build one
            on the first score.
        model, device, options
            As :class:`~rcstat.integrations.core.GroundingScorer` (default: the embedded
            model on the CPU, default options).
        name
            The metric's name.
        """

        def base_arguments(self, name: str) -> dict[str, Any]:
            """``name`` and the score's range, ``[0, 1]``."""
            return {"name": name, "allowed_values": (0.0, 1.0)}

        async def ascore(
            self,
            response: str,
            retrieved_contexts: Sequence[str] | str,
            user_input: str | None = None,
        ) -> Any:
            """The ``MetricResult`` of ``response`` against the joined ``retrieved_contexts``
            (``user_input``: the question): value ``Grounder.ground(...).score``."""
            grounding = await asyncio.to_thread(
                self.scorer.ground, retrieved_contexts, response, user_input
            )
            return result_type(value=float(grounding.score), reason=reason(grounding))

    class RagasGroundingLegacy(_ScoredMetric, legacy.SingleTurnMetric):  # type: ignore[name-defined]
        """rcstat's grounding score for ``ragas.evaluate`` (a ``SingleTurnMetric``).

        Parameters as :class:`RagasGrounding`.
        """

        output_type = legacy.MetricOutputType.CONTINUOUS

        def base_arguments(self, name: str) -> dict[str, Any]:
            """``name`` and the columns a sample holds (the question optional)."""
            return {
                "name": name,
                "_required_columns": {
                    legacy.MetricType.SINGLE_TURN: {
                        "response",
                        "retrieved_contexts",
                        "user_input:optional",
                    }
                },
            }

        def init(self, run_config: Any) -> None:
            """Nothing to set up: no LLM, no embeddings."""

        async def _single_turn_ascore(self, sample: Any, callbacks: Any) -> float:
            grounding = await asyncio.to_thread(
                self.scorer.ground,
                sample.retrieved_contexts or [],
                sample.response,
                sample.user_input,
            )
            return float(grounding.score)

    classes: dict[str, type] = {
        "RagasGrounding": RagasGrounding,
        "RagasGroundingLegacy": RagasGroundingLegacy,
    }
    for name, cls in classes.items():
        cls.__module__, cls.__qualname__ = __name__, name
    return classes


def __getattr__(name: str) -> Any:
    if name in ("RagasGrounding", "RagasGroundingLegacy"):
        return _classes()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
