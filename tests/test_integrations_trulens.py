"""rcstat's TruLens feedback against the real TruLens (skipped where it is not installed: the
``rag`` environment of docs/integrations.md installs it).

The score is ``Grounder.ground`` of the same texts and its explanation names the unsupported
spans; TruLens' offline loop (``BatchEvaluator``: a dataset, no app, no database, no network)
runs with only this feedback, and so does an instrumented app's recorder (``TruApp``, its
spans in a local SQLite file).
"""

from __future__ import annotations

from pathlib import Path

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


def test_app_recorder_loop(strict: Grounder, tmp_path: Path) -> None:
    """The feedback inside an instrumented app: TruApp records each call (OTel spans into a
    local SQLite file) and computes the feedback on the retrieval span's contexts, the record's
    output and input."""
    pytest.importorskip("trulens.feedback", reason="needs trulens-feedback (feedback computation)")
    from trulens.apps.app import TruApp
    from trulens.core import Selector, TruSession
    from trulens.core.otel.instrument import instrument
    from trulens.otel.semconv.trace import SpanAttributes

    retrieval = SpanAttributes.RETRIEVAL

    class RAG:
        def __init__(self) -> None:
            self.contexts = {response: contexts for contexts, response, _ in ROWS}

        @instrument(
            span_type=SpanAttributes.SpanType.RETRIEVAL,
            attributes={retrieval.QUERY_TEXT: "query", retrieval.RETRIEVED_CONTEXTS: "return"},
        )
        def retrieve(self, query: str, response: str) -> list[str]:
            return list(self.contexts[response])

        @instrument()
        def answer(self, query: str, response: str) -> str:
            self.retrieve(query, response)
            return response  # the "generation": the row's response

    session = TruSession(database_url=f"sqlite:///{tmp_path / 'trulens.sqlite'}")
    feedback = trulens_feedback(
        strict,
        selectors={
            "context": Selector.select_context(collect_list=True),
            "response": Selector.select_record_output(),
            "question": Selector.select_record_input(),
        },
    )
    app = RAG()
    recorder = TruApp(app, app_name="rcstat-test", app_version="v1", feedbacks=[feedback])
    with recorder:
        for _, response, question in ROWS:
            app.answer(question or "", response)
    session.force_flush()
    recorder.compute_feedbacks()
    session.force_flush()
    records, names = session.get_records_and_feedback(app_name="rcstat-test")
    assert names == ["rcstat_grounding"]
    scores = dict(zip(records["output"], records["rcstat_grounding"], strict=True))
    assert len(scores) == len(ROWS)
    for contexts, response, question in ROWS:
        assert scores[response] == strict.ground("\n\n".join(contexts), response, question).score
