"""rcstat's grounding score as a DeepEval metric (``pip install "rcstat[deepeval]"``).

``DeepEvalGrounding`` is a ``deepeval.metrics.BaseMetric`` over one
:class:`~rcstat.integrations.core.GroundingScorer`, no LLM judge: ``measure(test_case)`` grounds
``test_case.actual_output`` against its ``retrieval_context`` (else its ``context``), with its
``input`` as the question, and sets ``score`` (``Grounder.ground(...).score``, higher =
supported), ``threshold`` (the grounding's own: the one given, else the detector's for that
kind of response), ``success`` (``score >= threshold``, DeepEval's rule) and ``reason`` (the
verdict and the unsupported spans). ``a_measure`` runs the same on a worker thread, so it serves
``deepeval.evaluate`` in its async mode too.

The class subclasses DeepEval's, so it is built when first read (PEP 562 ``__getattr__``): this
module imports without deepeval, and reading the class without it raises
:class:`~rcstat.integrations.core.MissingFrameworkError` naming the extra. DeepEval sends
telemetry unless ``DEEPEVAL_TELEMETRY_OPT_OUT=YES`` is set (docs/integrations.md).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from rcstat.grounding.options import GroundingOptions
from rcstat.integrations.core import GroundingScorer, reason, require, succeeded

if TYPE_CHECKING:
    from rcstat.grounding.grounder import Grounder

# the class is built when first read (module __getattr__)
__all__ = ["DeepEvalGrounding"]  # noqa: F822


def _options(
    options: GroundingOptions | dict[str, Any] | None, threshold: float | None
) -> GroundingOptions | dict[str, Any] | None:
    """``options`` with the metric's ``threshold`` (which wins), as the grounder's option."""
    if threshold is None:
        return options
    if isinstance(options, dict):
        return {**options, "threshold": threshold}
    return replace(options or GroundingOptions(), threshold=threshold)


@cache
def _class() -> type:
    """Build the metric class over DeepEval's base (once; deepeval imported here)."""
    base = require("deepeval.metrics", "deepeval").BaseMetric
    test_case = require("deepeval.test_case", "deepeval")
    # DeepEval 4 names the fields SingleTurnParams; earlier releases LLMTestCaseParams
    params = getattr(test_case, "SingleTurnParams", None) or test_case.LLMTestCaseParams

    class DeepEvalGrounding(base):  # type: ignore[misc,valid-type]
        """rcstat's grounding score as a DeepEval metric (higher = supported).

        Parameters
        ----------
        grounder
            A ready :class:`~rcstat.grounding.Grounder` (its threshold is the metric's); or
            none, and ``model``, ``device`` and ``options`` build one on the first measure.
        threshold
            The verdict's threshold in ``[0, 1]``, set as the grounder's ``threshold`` option
            (so the verdict, the spans and ``is_successful`` agree); None: the grounder's own.
        model, device, options
            As :class:`~rcstat.integrations.core.GroundingScorer`.
        scorer
            A :class:`~rcstat.integrations.core.GroundingScorer` to share instead (DeepEval's
            ``evaluate`` rebuilds each metric from its attributes for every test case: the
            copies share this one, so the model loads once); ``threshold`` is then only the
            attribute's first value.
        include_reason, async_mode, verbose_mode
            DeepEval's switches.
        """

        _required_params: ClassVar[list[Any]] = [params.ACTUAL_OUTPUT]

        def __init__(
            self,
            grounder: Grounder | None = None,
            *,
            threshold: float | None = None,
            model: str | None = None,
            device: str | None = None,
            options: GroundingOptions | dict[str, Any] | None = None,
            scorer: GroundingScorer | None = None,
            include_reason: bool = True,
            async_mode: bool = True,
            verbose_mode: bool = False,
        ) -> None:
            if scorer is not None:
                if (grounder, model, device, options) != (None, None, None, None):
                    raise ValueError("give a scorer or what builds one, not both")
                self.scorer = scorer
            elif grounder is not None and threshold is not None:
                raise ValueError(
                    "give the threshold to the grounder (Grounder(..., threshold=...)) or build "
                    "the grounder here from model/options, not both"
                )
            else:
                self.scorer = GroundingScorer(
                    grounder=grounder,
                    model=model,
                    device=device,
                    options=_options(options, threshold),
                )
            self._threshold = threshold
            self.include_reason = include_reason
            self.async_mode = async_mode
            self.verbose_mode = verbose_mode
            self.evaluation_model = "rcstat (no LLM judge)"
            self.grounding: Any = None
            self.error: str | None = None

        @property
        def threshold(self) -> float:
            """The last measured response's threshold; before any, the one given, else the
            grounder's default (read when ``deepeval.evaluate`` checks it: the model loads
            then)."""
            if self._threshold is None:
                self._threshold = float(self.scorer.get().threshold)
            return self._threshold

        @threshold.setter
        def threshold(self, value: float | None) -> None:
            self._threshold = value

        def measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
            """Ground ``test_case`` and set ``score``, ``threshold``, ``success``, ``reason``."""
            context = test_case.retrieval_context or test_case.context
            if not context:
                raise ValueError(
                    "the test case has neither retrieval_context nor context to ground "
                    "actual_output against"
                )
            try:
                grounding = self.scorer.ground(context, test_case.actual_output, test_case.input)
            except Exception as err:
                self.error = str(err)
                self.success = False
                raise
            self.grounding = grounding
            self.error = None
            self.score = float(grounding.score)
            self.threshold = float(grounding.threshold)
            self.reason = reason(grounding) if self.include_reason else None
            self.success = succeeded(grounding)
            return self.score

        async def a_measure(self, test_case: Any, *args: Any, **kwargs: Any) -> float:
            """:meth:`measure` on a worker thread."""
            return await asyncio.to_thread(self.measure, test_case)

        def is_successful(self) -> bool:
            """Whether the last measured response passed: ``score >= threshold``."""
            if self.error is not None or self.grounding is None:
                return False
            return bool(succeeded(self.grounding))

        @property
        def __name__(self) -> str:  # DeepEval names metrics by this property
            return "rcstat grounding"

    DeepEvalGrounding.__module__, DeepEvalGrounding.__qualname__ = __name__, "DeepEvalGrounding"
    return DeepEvalGrounding


def __getattr__(name: str) -> Any:
    if name == "DeepEvalGrounding":
        return _class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
