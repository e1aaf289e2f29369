"""What the grounding page reads of a grounding result, as protocols (no application import).

:mod:`rcstat.report.grounding_html` renders any object with these attributes —
:class:`rcstat.grounding.Grounding` is one, a ``types.SimpleNamespace`` in a test is another —
so ``report`` stays a leaf: it imports no application, and no application imports it (the
caller hands the result to :func:`~rcstat.report.grounding_html.grounding_page`).
A member that a mutable result holds with exactly its type is a plain attribute; the others
are read-only properties, which frozen dataclasses (a sentence, a span) and wider types
(``Sequence`` for a list) satisfy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["GroundingView", "SentenceView", "SpanView"]


class SpanView(Protocol):
    """A context span: ``context[start:end]``."""

    @property
    def start(self) -> int: ...
    @property
    def end(self) -> int: ...


class SentenceView(Protocol):
    """One sentence of the response with its grounding."""

    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> tuple[int, int]:
        """``[first, last)`` indices into the response tokens."""

    @property
    def score(self) -> float: ...
    @property
    def supported(self) -> bool: ...
    @property
    def status(self) -> str:
        """``"supported"``, ``"unsupported"`` or ``"unverified"`` (not checked: past the cut
        of a response too long for the model's window)."""

    @property
    def support(self) -> SpanView | None:
        """The supporting context span, None when no span gets any weight."""

    @property
    def support_share(self) -> float | None: ...


class GroundingView(Protocol):
    """A grounding result: token and sentence scores of a response against its context."""

    context: str
    question: str
    question_given: bool  # False: ``question`` is the default instruction (not shown)
    response: str
    token_scores: np.ndarray  # [G] one score per response token, higher = supported
    score: float
    threshold: float
    probe_score: float | None
    model: str
    finished: bool

    @property
    def token_texts(self) -> Sequence[str]: ...
    @property
    def sentences(self) -> Sequence[SentenceView]: ...
    @property
    def supported(self) -> bool: ...
    @property
    def verdict(self) -> str:
        """``"supported"``, ``"unsupported"`` or ``"unverified"`` (no checked sentence is
        unsupported, but part of the response could not be checked)."""

    @property
    def baselines(self) -> Mapping[str, float]: ...
    @property
    def method(self) -> Mapping[str, Any]: ...
