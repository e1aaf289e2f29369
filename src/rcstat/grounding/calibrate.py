"""Measure a head profile for any model, without hallucination labels (``rcstat ground-profile``).

For every (context, question) example the model answers greedily with the context in front of
it; each answer is then measured like any response (:class:`~rcstat.grounding.Measurer`). A
head's RC value is its token-level normalized RC averaged over the tokens of an answer, then
over the answers.

The rest rests on data the tool builds itself from the same contexts (and any more documents
given): sentences copied from a context (supported) and the same sentences with one number or
name swapped for one from another context (unsupported, :mod:`rcstat.grounding.swaps`). A
head's copy value is its ``copy`` weight averaged over the tokens of the copied sentences: the
copy heads are those whose attention lands on the source of a copied word. The threshold
(:func:`calibrate_threshold`) It is the ``threshold_quantile`` of the copies' scores — that
share of supported sentences is flagged, the *false-alarm rate* on copies — and the profile
records the share of the swaps it catches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.defaults import DEFAULT_THRESHOLD_QUANTILE
from rcstat.generation import check_max_new_tokens, generate_answer
from rcstat.grounding.grounder import Grounder, model_name
from rcstat.grounding.measure import Measurer
from rcstat.grounding.measurement import Measurement
from rcstat.grounding.profile import DEFAULT_FRACTION, HeadProfile
from rcstat.grounding.swaps import SwapPair, swap_pairs
from rcstat.segments import segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from rcstat.data import QAExample

__all__ = [
    "Calibration",
    "build_profile",
    "calibrate_threshold",
    "copy_values",
    "document_texts",
]


@dataclass(frozen=True)
class Calibration:
    """A threshold and what it does on the calibration pairs it was chosen on."""

    threshold: float
    pairs: int
    false_alarms: float  # share of the copies flagged
    caught: float  # share of the swaps flagged
    ranked: float  # share of pairs where the copy scores above its swap (ties count half)

    def to_dict(self) -> dict[str, float | int]:
        """Plain JSON types."""
        return {
            "threshold": self.threshold,
            "pairs": self.pairs,
            "false_alarms": self.false_alarms,
            "caught": self.caught,
            "ranked": self.ranked,
        }


def document_texts(examples: Iterable[Any]) -> list[str]:
    """The distinct documents of any dataset's examples, in order: a QA or grounding example's
    context, an attribution example's chunks joined by blank lines."""
    texts = []
    for example in examples:
        chunks = getattr(example, "chunks", None)
        texts.append("\n\n".join(chunks) if chunks else str(example.context))
    return list(dict.fromkeys(texts))


def copy_values(measurer: Measurer, pairs: Sequence[SwapPair]) -> np.ndarray:
    """``[layers, heads]``: each head's ``copy`` weight averaged over the tokens of the copied
    sentences of ``pairs`` whose word occurs in their context (pairs whose context does not
    fit the model's window are skipped).

    Raises
    ------
    ValueError
        No pair fits, or no copied token was measured.
    """
    copied = []
    for pair in pairs:
        try:
            measured = measurer.measure(pair.context, pair.copy)
        except ValueError:  # longer than the model's window
            continue
        copied.append(measured.copy[..., measured.copied_tokens()])  # [L, H, n]
    if not any(c.shape[-1] for c in copied):
        raise ValueError("no copied sentence could be measured: no copy heads to find")
    return np.concatenate(copied, axis=-1).mean(axis=-1)


def calibrate_threshold(
    grounder: Grounder,
    pairs: Sequence[SwapPair],
    *,
    quantile: float = DEFAULT_THRESHOLD_QUANTILE,
    progress: Callable[[list[SwapPair]], Iterable[SwapPair]] | None = None,
) -> Calibration:
    """The ``quantile`` of the scores of the copied sentences of ``pairs``, and the share of
    their swapped versions that it flags (see the module notes).

    Raises
    ------
    ValueError
        No pair, or ``quantile`` outside (0, 1).
    """
    if not 0 < quantile < 1:
        raise ValueError(f"threshold_quantile must be in (0, 1), got {quantile}")
    if not pairs:
        raise ValueError("no calibration pair: no context sentence holds a number or a name")
    pairs = list(pairs)
    copies, swaps = [], []
    for pair in pairs if progress is None else progress(pairs):
        copies.append(grounder.ground(pair.context, pair.copy).score)
        swaps.append(grounder.ground(pair.context, pair.edit).score)
    copy, swap = np.array(copies), np.array(swaps)
    threshold = float(np.quantile(copy, quantile))
    return Calibration(
        threshold=threshold,
        pairs=len(pairs),
        false_alarms=float(np.mean(copy < threshold)),
        caught=float(np.mean(swap < threshold)),
        ranked=float(np.mean(copy > swap) + 0.5 * np.mean(copy == swap)),
    )


def build_profile(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    examples: Iterable[QAExample],
    *,
    max_new_tokens: int = 48,
    fraction: float = DEFAULT_FRACTION,
    threshold_quantile: float = DEFAULT_THRESHOLD_QUANTILE,
    calibration_contexts: Sequence[str] = (),
    progress: Callable[[list[SwapPair]], Iterable[SwapPair]] | None = None,
) -> HeadProfile:
    """Profile the heads of ``model`` on its own answers to ``examples``, and calibrate the
    threshold on copies and swaps of their contexts.

    Parameters
    ----------
    examples
        Question-answering examples (context and question; reference answers are unused),
        iterated once (wrap them in a progress display if wanted).
    max_new_tokens
        Length limit of each greedy answer.
    fraction
        Share of the heads (by RC value) whose statistics the probe and the baselines use.
    threshold_quantile
        Share of the copied calibration sentences that score below the threshold.
    calibration_contexts
        More unlabelled documents to build calibration pairs from, beside the examples'
        contexts (more pairs give a steadier threshold).
    progress
        Wraps the calibration pairs while they are scored (a progress display).

    Raises
    ------
    ValueError
        No example, no example with a non-empty answer, fewer than two distinct contexts, or
        no calibration pair.
    """
    check_max_new_tokens(max_new_tokens)
    if not 0 < threshold_quantile < 1:
        raise ValueError(f"threshold_quantile must be in (0, 1), got {threshold_quantile}")
    measurer = Measurer(model, tokenizer)
    measured: list[Measurement] = []
    count, datasets, contexts = 0, set(), []
    for example in examples:
        count += 1
        datasets.add(example.dataset)
        contexts.append(example.context)
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
    everything = list(dict.fromkeys([*contexts, *calibration_contexts]))
    pairs = swap_pairs(everything, per_context=2, seed=0)
    if not pairs:
        raise ValueError("no context sentence holds a number or a name to swap: no calibration")
    name = model_name(model)
    provisional = HeadProfile(
        model=name,
        values=values,
        threshold=0.0,
        quantile=threshold_quantile,
        fraction=fraction,
        # the copy weights need no RC: a pass with no RC head is much cheaper on long contexts
        copy_values=copy_values(Measurer(model, tokenizer, rc_heads=np.zeros(0, int)), pairs),
    )
    grounder = Grounder(model, tokenizer, profile=provisional)
    calibration = calibrate_threshold(
        grounder, pairs, quantile=threshold_quantile, progress=progress
    )
    source: dict[str, Any] = {
        "examples": count,
        "answers": len(measured),
        "datasets": sorted(datasets),
        "max_new_tokens": max_new_tokens,
        "calibration": {**calibration.to_dict(), "contexts": len(everything)},
    }
    return HeadProfile(
        model=name,
        values=values,
        threshold=calibration.threshold,
        quantile=threshold_quantile,
        fraction=fraction,
        source=source,
        copy_values=provisional.copy_values,
    )
