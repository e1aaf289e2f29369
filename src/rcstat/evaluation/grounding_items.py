"""The items of the grounding benchmark: (context, question, response, label) built from each
dataset — FaithBench / SummEdits / labelled pairs as they come, and two SQuAD v2 constructions:
supporting vs unrelated context (``squad-contrast``) and the answer's sentence copied vs its
answer changed (``squad-swaps``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rcstat.attribution import split_sentences
from rcstat.data import GroundingExample, QAExample
from rcstat.grounding.swaps import find_facts
from rcstat.runs.manifest import content_hash

__all__ = [
    "SUMMARY_INSTRUCTION",
    "GroundingItem",
    "contrast_items",
    "grounding_items",
    "swap_items",
]

#: The instruction the responses of the summarization datasets are teacher-forced after.
SUMMARY_INSTRUCTION = "Summarize the passage above."
_STORED = ("hhem-2.1", "hhem-2.1-english", "gpt-3.5-turbo", "gpt-4-turbo", "gpt_4o")


@dataclass(frozen=True)
class GroundingItem:
    """One (context, question, response) to measure, with its label and group.

    ``label`` is True when the response is unsupported (hallucinated / inconsistent / the
    unrelated context of a contrast pair); ``pair`` joins the two items of a contrast pair.
    """

    id: str
    context: str
    question: str
    response: str
    label: bool
    group: str
    by: str = ""
    pair: str = ""
    spans: tuple[tuple[int, int], ...] = ()
    detectors: dict[str, float] = field(default_factory=dict)

    def hash(self) -> str:
        """Content hash of what determines the item's row."""
        return content_hash(
            [self.context, self.question, self.response, self.label, self.group, self.spans]
        )


def grounding_items(examples: Sequence[GroundingExample]) -> list[GroundingItem]:
    """FaithBench / SummEdits / RAGTruth / labelled-pairs examples as items; the unwanted spans
    (FaithBench) or every labelled span (RAGTruth, pairs) become the span labels; the breakdown
    key is FaithBench's summarizer, SummEdits' domain or RAGTruth's task; a RAGTruth task's
    instruction or a pair's own question (in ``meta``) replaces the summarization
    instruction."""
    items = []
    for e in examples:
        spans = tuple(
            (s.start, s.end)
            for s in e.spans
            if e.dataset != "faithbench" or any(lb.startswith("Unwanted") for lb in s.labels)
        )
        items.append(
            GroundingItem(
                id=e.id,
                context=e.context,
                question=str(e.meta.get("question", SUMMARY_INSTRUCTION)),
                response=e.response,
                label=bool(e.label),
                group=str(e.group),
                by=str(e.meta.get("summarizer", e.meta.get("domain", e.meta.get("task", "")))),
                spans=spans,
                detectors={
                    k: float(v) for k, v in e.meta.get("detectors", {}).items() if k in _STORED
                },
            )
        )
    return items


def contrast_items(examples: Sequence[QAExample]) -> list[GroundingItem]:
    """Supporting-vs-unrelated pairs: each answerable question with its gold answer, once
    after its own context and once after the context of another article (the example half
    the list away whose context differs), same question and answer."""
    answerable = [e for e in examples if e.answers]
    if len(answerable) < 2:
        raise ValueError("squad-contrast needs at least two answerable examples")
    items = []
    for i, e in enumerate(answerable):
        j = (i + len(answerable) // 2) % len(answerable)
        while answerable[j].context == e.context:
            j = (j + 1) % len(answerable)
            if j == i:
                raise ValueError("squad-contrast needs examples from two different contexts")
        for label, context in ((False, e.context), (True, answerable[j].context)):
            items.append(
                GroundingItem(
                    id=f"{e.id}:{'unrelated' if label else 'supporting'}",
                    context=context,
                    question=e.question,
                    response=e.answers[0],
                    label=label,
                    group=e.id,
                    pair=e.id,
                )
            )
    return items


def swap_items(examples: Sequence[QAExample]) -> list[GroundingItem]:
    """Copied vs changed facts (SQuAD v2): for each answerable question whose answer is a
    number or a proper name (:func:`~rcstat.grounding.swaps.find_facts`), the context sentence
    that holds the answer, as written (supported), and the same sentence with the answer
    replaced by the answer of the same kind of another question from another context, one
    that does not occur in this context (unsupported); the question is asked."""
    answered = []
    for e in examples:
        if not e.answers:
            continue
        answer = e.answers[0]
        facts = find_facts("so " + answer)  # not at a sentence start: a lone name counts
        if len(facts) == 1 and facts[0].text == answer:
            sentence = next((s.text for s in split_sentences(e.context) if answer in s.text), None)
            if sentence is not None:
                answered.append((e, answer, facts[0].kind, sentence))
    items = []
    for i, (e, answer, kind, sentence) in enumerate(answered):
        others = [
            a
            for o, a, k, _ in answered
            if k == kind and o.context != e.context and a not in e.context
        ]
        if not others:
            continue
        replacement = others[i % len(others)]
        for label, text in ((False, sentence), (True, sentence.replace(answer, replacement, 1))):
            items.append(
                GroundingItem(
                    id=f"{e.id}:{'changed' if label else 'copied'}",
                    context=e.context,
                    question=e.question,
                    response=text,
                    label=label,
                    group=e.id,
                    by=kind,
                    pair=e.id,
                )
            )
    if not items:
        raise ValueError(
            "squad-swaps needs answers that are numbers or names in at least two contexts"
        )
    return items
