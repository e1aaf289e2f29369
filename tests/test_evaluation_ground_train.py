"""``rcstat.evaluation.ground_train``'s library functions (the command: test_cli_ground_train)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace
from typing import Any

import pytest

from rcstat.evaluation.ground_train import SWAPS, swap_responses
from rcstat.grounding.swaps import swap_pairs

DOCUMENTS = [
    "The Eiffel Tower was finished in 1889 by Gustave Eiffel. It is 330 metres tall.",
    "Apollo 11 landed in 1969 with Neil Armstrong aboard. The mission lasted 8 days in total.",
    "Marie Curie won the Nobel Prize in 1903 and again in 1911. She worked in Warsaw and Paris.",
]


@pytest.fixture
def documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every dataset holds :data:`DOCUMENTS` as its examples' contexts."""

    def load_dataset(name: str, path: str | None = None, **options: Any) -> list[Any]:
        return [SimpleNamespace(context=text) for text in DOCUMENTS]

    monkeypatch.setattr("rcstat.data.load_dataset", load_dataset)


@pytest.mark.usefixtures("documents")
def test_swap_responses_are_each_pairs_copy_then_its_edit() -> None:
    pairs = swap_pairs(DOCUMENTS, per_context=2, seed=0)
    responses = swap_responses([("a", None)])
    assert pairs and len(responses) == 2 * len(pairs)
    assert swap_responses([("a", None), ("b", "file")]) == responses  # each document once
    for i, pair in enumerate(pairs):
        copy, edit = responses[2 * i : 2 * i + 2]
        assert copy.id == f"swap:{i}:copy" and edit.id == f"swap:{i}:edit"
        assert (copy.context, copy.question, copy.response) == (pair.context, None, pair.copy)
        assert (copy.label, copy.spans, copy.spans_known) == (False, (), True)
        group = hashlib.sha256(pair.context.encode()).hexdigest()[:12]
        assert (copy.group, copy.dataset, copy.by) == (group, SWAPS, pair.kind)
        assert (edit.context, edit.question, edit.response) == (pair.context, None, pair.edit)
        assert (edit.label, edit.spans, edit.spans_known) == (True, ((pair.start, pair.end),), True)
        assert (edit.group, edit.dataset, edit.by) == (group, SWAPS, pair.kind)
        assert edit.response[pair.start : pair.end] == pair.replacement


@pytest.mark.usefixtures("documents")
def test_swap_responses_limit_counts_pairs() -> None:
    every = swap_responses([("a", None)])
    assert swap_responses([("a", None)], limit=1) == every[:2]
    assert swap_responses([("a", None)], limit=len(every)) == every
