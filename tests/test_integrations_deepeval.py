"""rcstat's DeepEval metric against the real DeepEval (skipped where it is not installed: the
``rag`` environment of docs/integrations.md installs it).

The score is ``Grounder.ground`` of the same texts, ``reason`` names the unsupported spans,
``is_successful`` follows the threshold, and ``deepeval.evaluate`` runs offline with only this
metric, in its async and its sync mode (run from a temporary folder: DeepEval writes
``.deepeval/`` into the working directory).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest

from rcstat.grounding import Grounder
from rcstat.integrations.core import GroundingScorer
from tests.test_integrations_core import PASSAGES, QUESTION, RESPONSE, ROWS, tiny_grounder

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
pytest.importorskip("deepeval", reason="needs deepeval (pip install 'rcstat[deepeval]')")

from deepeval.test_case import LLMTestCase

from rcstat.integrations.deepeval_metric import DeepEvalGrounding


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
    monkeypatch.setenv("DEEPEVAL_NO_INSPECT_PROMPT", "1")
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def strict() -> Grounder:
    return tiny_grounder(0.5)


@pytest.fixture(scope="module")
def lenient() -> Grounder:
    return tiny_grounder(0.0)


def _case(contexts: list[str], response: str, question: Any) -> LLMTestCase:
    return LLMTestCase(input=question or "", actual_output=response, retrieval_context=contexts)


def test_measure_equals_grounder(strict: Grounder) -> None:
    from deepeval.metrics import BaseMetric

    metric = DeepEvalGrounding(strict)
    assert isinstance(metric, BaseMetric)
    for contexts, response, question in ROWS:
        ref = strict.ground("\n\n".join(contexts), response, question)
        assert metric.measure(_case(contexts, response, question)) == ref.score
        assert metric.score == ref.score
        assert metric.threshold == ref.threshold == 0.5
        assert metric.is_successful() is (ref.score >= 0.5) is False
        assert all(repr(span.text) in metric.reason for span in ref.spans)


def test_context_when_no_retrieval_context(strict: Grounder) -> None:
    metric = DeepEvalGrounding(strict)
    case = LLMTestCase(input=QUESTION, actual_output=RESPONSE, context=PASSAGES)
    assert metric.measure(case) == strict.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION).score
    with pytest.raises(ValueError, match="neither retrieval_context nor context"):
        metric.measure(LLMTestCase(input=QUESTION, actual_output=RESPONSE))


def test_a_measure_equals_measure(strict: Grounder) -> None:
    import asyncio

    metric = DeepEvalGrounding(strict)
    case = _case(PASSAGES, RESPONSE, QUESTION)
    assert asyncio.run(metric.a_measure(case)) == DeepEvalGrounding(strict).measure(case)


def test_is_successful_follows_the_threshold(strict: Grounder, lenient: Grounder) -> None:
    case = _case(PASSAGES, RESPONSE, QUESTION)
    flagged = DeepEvalGrounding(strict)
    flagged.measure(case)
    assert not flagged.is_successful() and flagged.reason.startswith("unsupported")
    assert "unsupported spans:" in flagged.reason
    passed = DeepEvalGrounding(lenient)
    passed.measure(case)
    assert passed.is_successful() and passed.success
    assert passed.reason.endswith("no unsupported span")
    # the metric's threshold is the grounder's option: the verdict and the spans agree with it
    score = passed.score
    at = DeepEvalGrounding(scorer=GroundingScorer(grounder=tiny_grounder(score)), threshold=score)
    at.measure(case)
    assert at.is_successful()
    above = math.nextafter(score, 1.0)
    built = DeepEvalGrounding(
        threshold=above, options={"profile": strict.profile, "top_k": strict.top_k}
    )
    assert built.scorer.options.threshold == above
    with pytest.raises(ValueError, match="not both"):
        DeepEvalGrounding(strict, threshold=0.3)


def test_copies_share_the_scorer(strict: Grounder) -> None:
    """DeepEval rebuilds each metric from its attributes per test case: the grounder stays one."""
    from deepeval.metrics.utils.metrics import copy_metrics

    metric = DeepEvalGrounding(strict)
    metric.measure(_case(PASSAGES, RESPONSE, QUESTION))
    (copy,) = copy_metrics([metric])
    assert copy is not metric and copy.scorer is metric.scorer


@pytest.mark.parametrize("run_async", [True, False])
def test_evaluate_loop(strict: Grounder, run_async: bool) -> None:
    from deepeval import evaluate
    from deepeval.evaluate.configs import AsyncConfig, DisplayConfig

    cases = [_case(*row) for row in ROWS]
    result = evaluate(
        cases,
        [DeepEvalGrounding(strict)],
        async_config=AsyncConfig(run_async=run_async),
        display_config=DisplayConfig(print_results=False, show_indicator=False),
    )
    by_output = {t.actual_output: t for t in result.test_results}
    assert len(by_output) == len(ROWS)
    for contexts, response, question in ROWS:
        ref = strict.ground("\n\n".join(contexts), response, question)
        (data,) = by_output[response].metrics_data
        assert data.name == "rcstat grounding"
        assert data.score == ref.score
        assert data.threshold == ref.threshold
        assert data.success is False
        assert all(repr(span.text) in data.reason for span in ref.spans)
