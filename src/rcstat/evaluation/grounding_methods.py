"""What ``rcstat bench grounding`` records of one measured item: every method's score and the
item's row of ``predictions.jsonl``, with its per-token file ``tokens/<hash>.npz`` where the
dataset's spans are evaluated.

Every item (a context and a response) is measured once (:class:`~rcstat.grounding.Measurer`:
the pass with the context and the short prior pass without it); from that measurement every
method is scored (:func:`method_scores`), so all of them see the same samples:

* ``rcstat``: the grounder's default verdict score (the trained detector's where one ships,
  else the zero-shot score);
* :data:`VARIANTS`, the designs it was chosen among, each with the same word and sentence
  aggregation: ``zero_shot`` (word ``max(copy, exp(−NLL))``, sentence = weakest word, response
  = weakest sentence; docs/grounding.md), ``copy_words`` (the copy heads' attention on the
  word's source alone), ``nll_words`` (``exp(−NLL_w)`` alone), ``pmi_words`` (``σ(NLL_w without
  context − NLL_w with it)``: how much the context raises the word), and ``exp_rc_nll``
  (rcstat's earlier token score ``exp(−r·NLL)`` over the contextual heads, sentence = lower
  0.2-quantile);
* :data:`BASELINES`, same-pass baselines: ``lookback`` (Lookback Lens ratio),
  ``attention_score`` (LLM-Check), ``neg_nll``, ``overlap`` (bigram overlap),
  ``unigram_overlap``.

Every score is oriented "higher = more supported". The module imports no torch: the
grounder's functions are imported where a measurement is scored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.grounding.score import response_words

if TYPE_CHECKING:
    from rcstat.evaluation.grounding_items import GroundingItem
    from rcstat.grounding.grounder import Grounder
    from rcstat.grounding.measurement import Measurement

__all__ = [
    "BASELINES",
    "PREDICTIONS",
    "TOKENS",
    "VARIANTS",
    "item_scores",
    "method_scores",
    "save_tokens",
    "token_file_name",
    "token_labels",
]

#: The rcstat scores: the default verdict's and the designs it was chosen among.
VARIANTS = ("rcstat", "zero_shot", "copy_words", "nll_words", "pmi_words", "exp_rc_nll")
#: The same-pass baselines (:func:`rcstat.grounding.score.baselines`).
BASELINES = ("lookback", "attention_score", "neg_nll", "overlap", "unigram_overlap")
#: The row file of a run (one row per item) and the folder of its per-token files.
PREDICTIONS = "predictions.jsonl"
TOKENS = "tokens"


def token_file_name(item_id: str) -> str:
    """The name of an item's per-token file in ``tokens/``.

    >>> token_file_name("q1:supporting")[-4:], len(token_file_name("q1:supporting"))
    ('.npz', 20)
    """
    return hashlib.sha256(item_id.encode()).hexdigest()[:16] + ".npz"


def method_scores(
    grounder: Grounder, measured: Measurement, response: str, context: str
) -> dict[str, float]:
    """Every method's response score (higher = more supported) from one measurement: the keys
    of :data:`VARIANTS` and :data:`BASELINES`."""
    from rcstat.grounding.grounder import sentence_scores
    from rcstat.grounding.score import baselines

    words = response_words(measured.example.part_text("answer"), measured.token_spans())
    copy = measured.copy_at(grounder.copy_heads)  # [G]
    prior = measured.nll if measured.prior_nll is None else measured.prior_nll
    gain = prior - measured.nll  # [G]: how much the context raised each token
    per_unit = [
        [i for i, w in enumerate(words) if unit.start <= w.start < unit.end]
        for unit in measured.units
    ]

    def weakest(values: np.ndarray) -> float:
        sentences = [values[inside].min() for inside in per_unit if inside]
        return float(min(sentences)) if sentences else float("nan")

    copied = np.array([min(1.0, copy[w.first : w.last].mean()) for w in words])
    likely = np.array([np.exp(-measured.nll[w.first : w.last].sum()) for w in words])
    raised = np.array([1 / (1 + np.exp(-gain[w.first : w.last].sum())) for w in words])
    _, _, old = sentence_scores(measured, grounder.heads, grounder.quantile)
    return {
        "rcstat": grounder.score(measured).score,
        "zero_shot": weakest(np.maximum(copied, likely)),
        "copy_words": weakest(copied),
        "nll_words": weakest(likely),
        "pmi_words": weakest(raised),
        "exp_rc_nll": min(old),
        **baselines(measured, response, context),
    }


def item_scores(
    grounder: Grounder,
    zero_shot: Grounder,
    entry: GroundingItem,
    measured: Measurement,
    tokens: Path | None = None,
) -> dict[str, Any]:
    """What one item's row records of its measurement: every method's ``scores``, the default
    verdict (``threshold``, ``verdict``, ``spans``) and the zero-shot one's
    (``zero_shot_threshold``, ``zero_shot_spans``), the ``labelled_spans``, the per-head
    ``head_features`` and the token counts; with ``tokens`` (a folder), the item's per-token
    file is written there too (:func:`save_tokens`)."""
    line: dict[str, Any] = {
        "scores": method_scores(grounder, measured, entry.response, entry.context)
    }
    result = grounder.score(measured)
    line["threshold"] = result.threshold
    line["verdict"] = result.verdict
    line["spans"] = [[s.start, s.end] for s in result.spans]
    zero = zero_shot.score(measured)
    line["zero_shot_threshold"] = zero.threshold
    line["zero_shot_spans"] = [[s.start, s.end] for s in zero.spans]
    line["labelled_spans"] = [list(span) for span in entry.spans]
    line["head_features"] = measured.head_vector().round(5).tolist()
    line["tokens"] = len(measured.nll)
    line["context_tokens"] = int(np.diff(measured.example.token_span("context"))[0])
    if tokens is not None:
        save_tokens(tokens, grounder, entry, measured)
    line["error"] = None
    return line


def token_labels(measured: Measurement, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """``[G]`` True for response tokens overlapping an annotated span (character offsets)."""
    offsets = measured.token_spans()  # [G, 2]
    labels = np.zeros(len(offsets), dtype=bool)
    for start, end in spans:
        labels |= (offsets[:, 1] > start) & (offsets[:, 0] < end)
    return labels


def save_tokens(
    folder: Path, grounder: Grounder, item: GroundingItem, measured: Measurement
) -> None:
    """Write the per-token scores, labels and per-head statistics of ``item`` into
    ``folder/<token_file_name(item.id)>``: ``score``, ``label``, ``nll`` ``[G]`` and the ``rc``
    and ``lookback`` head statistics ``[G, L·H]`` (float16)."""
    from rcstat.grounding.features import HEAD_FEATURES

    path = folder / token_file_name(item.id)
    path.parent.mkdir(parents=True, exist_ok=True)
    scores = grounder.score(measured).token_scores
    flat = measured.features.reshape(len(HEAD_FEATURES), -1, len(measured.nll))
    np.savez(
        path,
        score=scores,
        label=token_labels(measured, item.spans),
        nll=measured.nll,
        rc=flat[0].T.astype(np.float16),  # [G, L·H]
        lookback=flat[1].T.astype(np.float16),  # [G, L·H]
    )
