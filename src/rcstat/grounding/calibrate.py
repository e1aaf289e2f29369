"""Measure a head profile for any model, without hallucination labels (``rcstat ground-profile``).

For every (context, question) example the model answers greedily with the context in front of
it; each answer is then measured like any response (:class:`~rcstat.grounding.Measurer`). A
head's profile value is its token-level normalized RC averaged over the tokens of an answer,
then over the answers. The threshold is the ``threshold_quantile`` of the response scores of
those same answers under the profile's top heads: answers written from the context are taken
as supported, and that share of them would be flagged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.generation import check_max_new_tokens, generate_answer
from rcstat.grounding.grounder import Measurement, Measurer, model_name, sentence_scores
from rcstat.grounding.profile import DEFAULT_FRACTION, HeadProfile
from rcstat.grounding.score import DEFAULT_QUANTILE
from rcstat.segments import segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from rcstat.data import QAExample

__all__ = ["DEFAULT_THRESHOLD_QUANTILE", "build_profile"]

#: Share of the model's own context-based answers that the threshold flags.
DEFAULT_THRESHOLD_QUANTILE = 0.1


def build_profile(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Iterable[QAExample],
    *,
    max_new_tokens: int = 48,
    fraction: float = DEFAULT_FRACTION,
    threshold_quantile: float = DEFAULT_THRESHOLD_QUANTILE,
    quantile: float = DEFAULT_QUANTILE,
) -> HeadProfile:
    """Profile the heads of ``model`` on its own answers to ``examples``.

    Parameters
    ----------
    examples
        Question-answering examples (context and question; reference answers are unused),
        iterated once (wrap them in a progress display if wanted).
    max_new_tokens
        Length limit of each greedy answer.
    fraction
        Share of the heads the profile's score uses.
    threshold_quantile
        Share of the answers that score below the threshold.
    quantile
        The sentence aggregation of :mod:`~rcstat.grounding.score`.

    Raises
    ------
    ValueError
        No example, or no example with a non-empty answer.
    """
    check_max_new_tokens(max_new_tokens)
    if not 0 < threshold_quantile < 1:
        raise ValueError(f"threshold_quantile must be in (0, 1), got {threshold_quantile}")
    measurer = Measurer(model, tokenizer)
    measured: list[Measurement] = []
    count, datasets = 0, set()
    for example in examples:
        count += 1
        datasets.add(example.dataset)
        prompt = segment_chat(tokenizer, example.context, example.question)
        answer = generate_answer(model, tokenizer, prompt, max_new_tokens).example
        text = answer.part_text("answer")
        if text.strip():
            measured.append(measurer.measure(example.context, text, example.question))
    if count == 0:
        raise ValueError("build_profile needs at least one example")
    if not measured:
        raise ValueError("the model gave an empty answer to every example")
    values = np.mean([m.features[0].mean(axis=-1) for m in measured], axis=0)  # [L, H]
    provisional = HeadProfile(
        model=model_name(model), values=values, threshold=0.0, quantile=0.5, fraction=fraction
    )
    heads = provisional.heads()
    scores = [min(sentence_scores(m, heads, quantile)[2]) for m in measured]
    source: dict[str, Any] = {
        "examples": count,
        "answers": len(measured),
        "datasets": sorted(datasets),
        "max_new_tokens": max_new_tokens,
        "sentence_quantile": quantile,
    }
    return HeadProfile(
        model=provisional.model,
        values=values,
        threshold=float(np.quantile(scores, threshold_quantile)),
        quantile=threshold_quantile,
        fraction=fraction,
        source=source,
    )
