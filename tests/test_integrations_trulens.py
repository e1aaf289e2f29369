"""rcstat's TruLens feedback against the real TruLens (skipped where it is not installed: the
``rag`` environment of docs/integrations.md installs it).

The score is ``Grounder.ground`` of the same texts and its explanation names the unsupported
spans; TruLens' offline loop (``BatchEvaluator``: a dataset, no app, no database, no network)
runs with only this feedback.
"""

from __future__ import annotations

import pytest

from rcstat.grounding import Grounder
from rcstat.integrations.trulens_feedback import Groundedness
from tests.test_integrations_core import PASSAGES, QUESTION, RESPONSE, ROWS, tiny_grounder

pytest.importorskip("trulens.core", reason="needs trulens-core (pip install 'rcstat[trulens]')")

from trulens.core import BatchEvaluator, Metric

from rcstat.integrations.trulens_feedback import trulens_feedback


@pytest.fixture(scope="module")
def strict() -> Grounder:
    return tiny_grounder(0.5)


def test_feedback_is_a_trulens_metric(strict: Grounder) -> None:
    feedback = trulens_feedback(strict)
    assert isinstance(feedback, Metric)
    assert feedback.name == "rcstat_grounding"
    assert isinstance(feedback.imp, Groundedness)
    score, _ = feedback.imp(PASSAGES, RESPONSE, QUESTION)
    assert score == strict.ground("\n\n".join(PASSAGES), RESPONSE, QUESTION).score
    with pytest.raises(ValueError, match="unknown argument"):
        trulens_feedback(strict, columns={"answer": "x"})


@pytest.mark.parametrize("workers", [1, 2])
def test_batch_evaluator_loop(strict: Grounder, workers: int) -> None:
    rows = [{"query": q, "response": r, "contexts": c} for c, r, q in ROWS]
    frame = BatchEvaluator(metrics=[trulens_feedback(strict)], max_workers=workers).evaluate(rows)
    assert len(frame) == len(ROWS)
    for (contexts, response, question), (_, row) in zip(ROWS, frame.iterrows(), strict=True):
        ref = strict.ground("\n\n".join(contexts), response, question)
        assert row["rcstat_grounding"] == ref.score
        meta = row["rcstat_grounding_explanation"]
        assert meta["spans"] == [s.text for s in ref.spans] and ref.spans
        assert all(repr(s.text) in meta["reason"] for s in ref.spans)
        assert meta["threshold"] == 0.5 and meta["verdict"] == "unsupported"


def test_batch_columns_and_no_question(strict: Grounder) -> None:
    rows = [{"passages": PASSAGES, "answer": RESPONSE}]
    feedback = trulens_feedback(
        strict, columns={"context": "passages", "response": "answer", "question": None}
    )
    frame = BatchEvaluator(metrics=[feedback], max_workers=1).evaluate(rows)
    assert frame["rcstat_grounding"][0] == strict.ground("\n\n".join(PASSAGES), RESPONSE).score
