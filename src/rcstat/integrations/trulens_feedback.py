"""rcstat's grounding score as a TruLens feedback function (``pip install "rcstat[trulens]"``).

:class:`Groundedness` is the feedback function itself, a plain callable that needs no TruLens:
``Groundedness(...)(context, response, question)`` returns ``(score, meta)``, TruLens' form of a
score with its reasons — ``score`` is ``Grounder.ground(...).score`` (higher = supported, in
``[0, 1]``) and ``meta`` holds ``reason`` (the verdict and the unsupported spans),
``threshold``, ``verdict`` and ``spans``. :func:`trulens_feedback` wraps it in a TruLens
``Metric`` (the 2.x name of ``Feedback``) whose selectors read the three texts from dataset
columns, for ``trulens.core.BatchEvaluator`` (TruLens' offline evaluation loop, no app and no
database), or from the spans of an instrumented app when ``selectors`` are given.

TruLens is imported only by :func:`trulens_feedback`, with
:class:`~rcstat.integrations.core.MissingFrameworkError` naming the extra when it is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rcstat.integrations.core import GroundingScorer, reason, require

if TYPE_CHECKING:
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.options import GroundingOptions

__all__ = ["DEFAULT_COLUMNS", "DEFAULT_NAME", "Groundedness", "trulens_feedback"]

#: The feedback's name (its column in TruLens' results).
DEFAULT_NAME = "rcstat_grounding"
#: Dataset column of each argument of :class:`Groundedness`, by default.
DEFAULT_COLUMNS = {"context": "contexts", "response": "response", "question": "query"}


class Groundedness:
    """rcstat's grounding score as a TruLens feedback function (higher = supported).

    Parameters
    ----------
    grounder
        A ready :class:`~rcstat.grounding.Grounder`; or none, and the next three build one on
        the first call.
    model, device, options
        As :class:`~rcstat.integrations.core.GroundingScorer`.
    scorer
        A :class:`~rcstat.integrations.core.GroundingScorer` to share instead.
    """

    def __init__(
        self,
        grounder: Grounder | None = None,
        *,
        model: str | None = None,
        device: str | None = None,
        options: GroundingOptions | dict[str, Any] | None = None,
        scorer: GroundingScorer | None = None,
    ) -> None:
        if scorer is not None and (grounder, model, device, options) != (None, None, None, None):
            raise ValueError("give a scorer or what builds one, not both")
        self.scorer = scorer or GroundingScorer(
            grounder=grounder, model=model, device=device, options=options
        )
        self.__name__ = DEFAULT_NAME  # TruLens names an implementation by it

    def __call__(
        self, context: str | Sequence[str], response: str, question: str | None = None
    ) -> tuple[float, dict[str, Any]]:
        """``(score, meta)`` of ``response`` against ``context`` (a text or a list of
        passages, joined by a blank line), ``question`` the question it answers."""
        grounding = self.scorer.ground(context, response, question)
        meta = {
            "reason": reason(grounding),
            "threshold": float(grounding.threshold),
            "verdict": grounding.verdict,
            "spans": [span.text for span in grounding.spans],
        }
        return float(grounding.score), meta


def trulens_feedback(
    grounder: Grounder | None = None,
    *,
    model: str | None = None,
    device: str | None = None,
    options: GroundingOptions | dict[str, Any] | None = None,
    name: str = DEFAULT_NAME,
    columns: Mapping[str, str | None] | None = None,
    selectors: Mapping[str, Any] | None = None,
) -> Any:
    """A TruLens ``Metric`` of :class:`Groundedness`.

    Parameters
    ----------
    grounder, model, device, options
        As :class:`Groundedness`.
    name
        The feedback's name.
    columns
        Dataset column of each argument (``context``, ``response``, ``question``) over
        :data:`DEFAULT_COLUMNS`, for ``BatchEvaluator``; every row must hold each named
        column (a row whose ``question`` is None is grounded without one; a row without a
        context or response is skipped); ``"question": None`` leaves the question out.
    selectors
        TruLens ``Selector`` of each argument instead (e.g. the retrieved contexts and the
        output of an instrumented app's spans); ``columns`` is then unused.

    Returns
    -------
    trulens.core.Metric
        Its ``implementation`` is the :class:`Groundedness` instance.
    """
    trulens = require("trulens.core", "trulens")
    function = Groundedness(grounder, model=model, device=device, options=options)
    if selectors is None:
        unknown = sorted(set(columns or {}) - set(DEFAULT_COLUMNS))
        if unknown:
            raise ValueError(f"columns has unknown argument(s) {unknown}; use {DEFAULT_COLUMNS}")
        chosen: dict[str, str | None] = {**DEFAULT_COLUMNS, **(columns or {})}
        selectors = {
            arg: trulens.Selector.from_column(
                column, collect_list=True, ignore_none_values=arg != "question"
            )
            for arg, column in chosen.items()
            if column is not None
        }
    return trulens.Metric(
        implementation=function,
        name=name,
        selectors=dict(selectors),
        min_score_val=0,
        max_score_val=1,
        description="rcstat grounding score: higher = better supported by the context",
    )
