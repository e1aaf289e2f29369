"""The typed, frozen examples the loaders return.

* :class:`QAExample` — a prompt (``context``), a ``question`` and reference ``answers``; used
  by the KV-compression and head-analysis tasks (SQuAD v2, QMSum, 2WikiMultihopQA).
* :class:`AttributionExample` — candidate passages (``chunks``), an ``answer`` text and the
  annotated spans of that answer with their gold chunk (:class:`AttributedSpan`); used by the
  attribution task (QuoteSum, VERI-GRAN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AttributedSpan", "AttributionExample", "QAExample"]


@dataclass(frozen=True)
class QAExample:
    """A question-answering example: prompt context, question and reference answers.

    Parameters
    ----------
    id : str
        Upstream id where the dataset has one, else one derived from the file and record.
    context : str
        The text the model reads before the question (document, transcript, paragraphs).
    question : str
        The question or query.
    answers : tuple of str
        Reference answers (all acceptable); ``()`` for an unanswerable SQuAD v2 question.
    dataset : str
        The dataset name as used by :func:`rcstat.data.load_dataset`.
    meta : dict
        Dataset-specific extras (documented by each loader). Being a dict, it makes the
        example unhashable.
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
        if not 0 <= self.start < self.end:
            raise ValueError(f"span needs 0 <= start < end, got [{self.start}, {self.end})")
        if self.gold_chunk < 0:
            raise ValueError(f"gold_chunk must be >= 0, got {self.gold_chunk}")


@dataclass(frozen=True)
class AttributionExample:
    """An attribution example: candidate chunks, an answer and its attributed spans.

    Parameters
    ----------
    id : str
        Upstream id where the dataset has one, else one derived from the file and record.
    question : str
        The question the answer responds to.
    chunks : tuple of str
        The candidate passages ``p_1..p_N`` (paper eq. 10).
    answer : str
        The answer text with the span markup removed.
    units : tuple of AttributedSpan
        The annotated spans of `answer` (the attribution units), in text order; ``()`` when
        the record carries no markup.
    dataset : str
        The dataset name as used by :func:`rcstat.data.load_dataset`.
    meta : dict
        Dataset-specific extras (documented by each loader).

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
            if unit.end > len(self.answer):
                raise ValueError(
                    f"unit [{unit.start}, {unit.end}) exceeds the answer ({len(self.answer)} chars)"
                )
            if unit.gold_chunk >= len(self.chunks):
                raise ValueError(
                    f"unit gold_chunk {unit.gold_chunk} out of range for {len(self.chunks)} chunks"
                )

    @property
    def unit_texts(self) -> tuple[str, ...]:
        """The text of each unit, ``answer[start:end]``."""
        return tuple(self.answer[u.start : u.end] for u in self.units)
