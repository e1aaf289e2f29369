"""rcstat's ragas metrics against the real ragas (skipped where it is not installed: the
``rag`` environment of docs/integrations.md installs it).

The score is ``Grounder.ground`` of the same texts; both of ragas' evaluation loops run offline
with only rcstat's metric: the experiment loop (``@experiment`` … ``arun``) with the
collections metric, and ``ragas.evaluate`` with the legacy one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rcstat.grounding import Grounder
from tests.test_integrations_core import PASSAGES, QUESTION, RESPONSE, ROWS, tiny_grounder

pytest.importorskip("ragas", reason="needs ragas (pip install 'rcstat[ragas]')")

from rcstat.integrations.ragas_metric import RagasGrounding, RagasGroundingLegacy


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")


@pytest.fixture(scope="module")
def strict() -> Grounder:
    return tiny_grounder(0.5)


def _reference(grounder: Grounder, contexts: list[str], response: str, question: Any) -> Any:
    return grounder.ground("\n\n".join(contexts), response, question)


def test_ascore_equals_grounder(strict: Grounder) -> None:
    from ragas.metrics.collections.base import BaseMetric
    from ragas.metrics.result import MetricResult

    metric = RagasGrounding(strict)
    assert isinstance(metric, BaseMetric)
    assert metric.name == "rcstat_grounding"
    for contexts, response, question in ROWS:
        result = asyncio.run(
            metric.ascore(response=response, retrieved_contexts=contexts, user_input=question)
        )
        ref = _reference(strict, contexts, response, question)
        assert isinstance(result, MetricResult)
        assert result.value == ref.score
        for span in ref.spans:
            assert repr(span.text) in result.reason
    # the synchronous wrapper and a single string as the context
    assert metric.score(response=RESPONSE, retrieved_contexts="\n\n".join(PASSAGES)).value == (
        strict.ground("\n\n".join(PASSAGES), RESPONSE).score
    )


def test_reason_names_unsupported_spans(strict: Grounder) -> None:
    result = RagasGrounding(strict).score(
        response=RESPONSE, retrieved_contexts=PASSAGES, user_input=QUESTION
    )
    ref = _reference(strict, PASSAGES, RESPONSE, QUESTION)
    assert ref.spans
    assert result.reason.startswith("unsupported")
    assert all(repr(span.text) in result.reason for span in ref.spans)


def test_experiment_loop(strict: Grounder) -> None:
    """ragas' own loop for collections metrics: a Dataset and an @experiment, in memory."""
    from ragas import Dataset, experiment

    metric = RagasGrounding(strict)
    dataset = Dataset(name="pairs", backend="inmemory")
    for i, (contexts, response, question) in enumerate(ROWS):
        dataset.append({"id": i, "question": question, "response": response, "contexts": contexts})

    @experiment()
    async def grounding_run(row: dict[str, Any]) -> dict[str, Any]:
        result = await metric.ascore(
            response=row["response"],
            retrieved_contexts=row["contexts"],
            user_input=row["question"],
        )
        return {"id": row["id"], "score": result.value, "reason": result.reason}

    run = asyncio.run(grounding_run.arun(dataset, name="rcstat"))
    scores = {row["id"]: row["score"] for row in run}
    assert len(scores) == len(ROWS)  # the loop swallows a failed row: none may fail
    for i, (contexts, response, question) in enumerate(ROWS):
        assert scores[i] == _reference(strict, contexts, response, question).score


def test_evaluate_loop(strict: Grounder) -> None:
    """ragas.evaluate with only rcstat's metric: no LLM, no embeddings, no network."""
    from ragas import EvaluationDataset, evaluate
    from ragas.metrics.base import SingleTurnMetric

    metric = RagasGroundingLegacy(strict)
    assert isinstance(metric, SingleTurnMetric)
    dataset = EvaluationDataset.from_list(
        [
            {"user_input": q, "response": r, "retrieved_contexts": c}
            if q is not None
            else {"response": r, "retrieved_contexts": c}
            for c, r, q in ROWS
        ]
    )
    result = evaluate(dataset, metrics=[metric], show_progress=False, raise_exceptions=True)
    frame = result.to_pandas()
    assert list(frame["rcstat_grounding"]) == [
        _reference(strict, c, r, q).score for c, r, q in ROWS
    ]
