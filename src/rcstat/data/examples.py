"""The typed, frozen examples the loaders return.

* :class:`QAExample` — a prompt (``context``), a ``question`` and reference ``answers``; used
  by the KV-compression and head-analysis tasks (SQuAD v2, QMSum, 2WikiMultihopQA).
* :class:`AttributionExample` — candidate passages (``chunks``), an ``answer`` text and the
  annotated spans of that answer with their gold chunk (:class:`AttributedSpan`); used by the
  attribution task (QuoteSum, VERI-GRAN).
* :class:`GroundingExample` — a ``context`` (source document), a ``response`` written from it,
  a binary ``label`` (``True`` = hallucinated / inconsistent), the cross-validation ``group``
  and, where annotated, labelled character spans of the response (:class:`LabeledSpan`); used
  by the grounding task (FaithBench, SummEdits).

Every example carries ``id`` (the upstream id where the dataset has one, else one derived from
the file and record), ``dataset`` (the name as used by :func:`rcstat.data.load_dataset`) and
``meta`` (dataset-specific extras, documented by each loader; being a dict, it makes the
example unhashable). Spans are ``[start, end)`` character offsets with ``0 <= start < end``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AttributedSpan", "AttributionExample", "GroundingExample", "LabeledSpan", "QAExample"]


def _check_span(start: int, end: int) -> None:
    """Refuse a span that is not ``0 <= start < end``."""
    if not 0 <= start < end:
        raise ValueError(f"span needs 0 <= start < end, got [{start}, {end})")


def _check_inside(what: str, start: int, end: int, where: str, text: str) -> None:
    """Refuse a span ``[start, end)`` that ends past ``text``: ``what`` names the span in the
    message, ``where`` the text (``"unit [0, 3) exceeds the answer (2 chars)"``)."""
    if end > len(text):
        raise ValueError(f"{what} [{start}, {end}) exceeds the {where} ({len(text)} chars)")


@dataclass(frozen=True)
class QAExample:
    """A question-answering example: prompt context, question and reference answers.

    Parameters
    ----------
    context : str
        The text the model reads before the question (document, transcript, paragraphs).
    question : str
        The question or query.
    answers : tuple of str
        Reference answers (all acceptable); ``()`` for an unanswerable SQuAD v2 question.
    id, dataset, meta
        As in every example (see the module docstring).
    """

    id: str
    context: str
    question: str
    answers: tuple[str, ...]
    dataset: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttributedSpan:
    """One annotated span of an answer and the chunk it is attributed to.

    Parameters
    ----------
    start, end : int
        ``[start, end)`` character offsets of the span in :attr:`AttributionExample.answer`.
    gold_chunk : int
        0-based index into :attr:`AttributionExample.chunks` of the gold source.
    """

    start: int
    end: int
    gold_chunk: int

    def __post_init__(self) -> None:
        _check_span(self.start, self.end)
        if self.gold_chunk < 0:
            raise ValueError(f"gold_chunk must be >= 0, got {self.gold_chunk}")


@dataclass(frozen=True)
class AttributionExample:
    """An attribution example: candidate chunks, an answer and its attributed spans.

    Parameters
    ----------
    question : str
        The question the answer responds to.
    chunks : tuple of str
        The candidate passages ``p_1..p_N`` (paper eq. 10).
    answer : str
        The answer text with the span markup removed.
    units : tuple of AttributedSpan
        The annotated spans of `answer` (the attribution units), in text order; ``()`` when
        the record carries no markup.
    id, dataset, meta
        As in every example (see the module docstring).

    Raises
    ------
    ValueError
        If a unit lies outside `answer` or points past the last chunk.
    """

    id: str
    question: str
    chunks: tuple[str, ...]
    answer: str
    units: tuple[AttributedSpan, ...]
    dataset: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for unit in self.units:
            _check_inside("unit", unit.start, unit.end, "answer", self.answer)
            if unit.gold_chunk >= len(self.chunks):
                raise ValueError(
                    f"unit gold_chunk {unit.gold_chunk} out of range for {len(self.chunks)} chunks"
                )

    @property
    def unit_texts(self) -> tuple[str, ...]:
        """The text of each unit, ``answer[start:end]``."""
        return tuple(self.answer[u.start : u.end] for u in self.units)


# Span labels starting with this make a FaithBench response hallucinated (upstream "worst").
_UNWANTED_PREFIX = "Unwanted"


@dataclass(frozen=True)
class LabeledSpan:
    """One human-annotated span of a response, with its labels.

    Parameters
    ----------
    start, end : int
        ``[start, end)`` character offsets of the span in :attr:`GroundingExample.response`.
    labels : tuple of str
        The annotator's labels for the span, in upstream order (FaithBench: ``"Unwanted"``,
        ``"Unwanted.Intrinsic"``, ``"Unwanted.Extrinsic"``, ``"Questionable"``, ``"Benign"``).
    annotator : str
        The annotator's id (``""`` when the record has none); several annotators may mark
        overlapping spans of one response.
    source_start, source_end : int or None
        ``[source_start, source_end)`` in :attr:`GroundingExample.context` of the passage the
        annotator linked to the span, or both ``None``.
    """

    start: int
    end: int
    labels: tuple[str, ...]
    annotator: str = ""
    source_start: int | None = None
    source_end: int | None = None

    def __post_init__(self) -> None:
        _check_span(self.start, self.end)
        if (self.source_start is None) != (self.source_end is None):
            raise ValueError("source_start and source_end must both be set or both be None")
        if self.source_start is not None and self.source_end is not None:
            if not 0 <= self.source_start < self.source_end:
                raise ValueError(
                    "source span needs 0 <= source_start < source_end, got "
                    f"[{self.source_start}, {self.source_end})"
                )

    def hallucinated(self, questionable: bool = False) -> bool:
        """Whether a label is ``Unwanted*`` (or, with `questionable`, ``Questionable``)."""
        return any(
            label.startswith(_UNWANTED_PREFIX) or (questionable and label == "Questionable")
            for label in self.labels
        )


@dataclass(frozen=True)
class GroundingExample:
    """A grounding example: is `response` supported by `context`?

    Parameters
    ----------
    id : str
        Unique within a load: ``"<batch>:<sample_id>"`` (FaithBench), ``"<domain>:<id>"``
        (SummEdits).
    context : str
        The source document the response was written from.
    response : str
        The response (a summary) to judge; it may come from any model.
    label : bool
        ``True`` when the response is hallucinated / inconsistent with `context`.
    group : str
        Cross-validation group: examples that share it must stay in one fold (FaithBench: all
        summaries of one source document; SummEdits: all edits of one seed summary). A short
        hash of the grouping text, equal across files for equal texts.
    spans : tuple of LabeledSpan
        Annotated spans of `response` in upstream order (``()`` when none or not annotated).
    dataset, meta
        As in every example (see the module docstring).

    Raises
    ------
    ValueError
        If a span lies outside `response` or its source span outside `context`.
    """

    id: str
    context: str
    response: str
    label: bool
    group: str
    dataset: str
    spans: tuple[LabeledSpan, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for span in self.spans:
            _check_inside("span", span.start, span.end, "response", self.response)
            if span.source_start is not None and span.source_end is not None:
                _check_inside(
                    "source span", span.source_start, span.source_end, "context", self.context
                )

    @property
    def span_texts(self) -> tuple[str, ...]:
        """The text of each span, ``response[start:end]``."""
        return tuple(self.response[s.start : s.end] for s in self.spans)
