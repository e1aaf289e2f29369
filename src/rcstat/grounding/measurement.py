"""What a grounding pass measured (:class:`Measurement`) and what it reads (:class:`Prepared`).

:class:`~rcstat.grounding.measure.Measurer` makes both: a :class:`Prepared` example checked and
tokenised before its pass, and the :class:`Measurement` of the pass, per response token and
head, before any scoring choice (:mod:`.grounder` scores).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from rcstat.attribution import TextSpan, split_sentences
from rcstat.defaults import DEFAULT_LANGUAGE
from rcstat.grounding.features import HEAD_FEATURES, PassExample
from rcstat.grounding.score import DEFAULT_QUANTILE, lower_quantiles
from rcstat.segments import Segmented

__all__ = ["Measurement", "Prepared", "feature_names"]


def feature_names(layers: int, heads: int) -> list[str]:
    """Names of the per-head probe features, ``"<feature>:L<layer>H<head>"``, in the order of
    :meth:`Measurement.head_vector`."""
    return [
        f"{name}:L{layer}H{head}"
        for name in HEAD_FEATURES
        for layer in range(layers)
        for head in range(heads)
    ]


@dataclass
class Measurement:
    """What one forward pass measured, before any scoring choice.

    Attributes
    ----------
    example
        The tokenised example (template, context, instruction, response).
    features
        ``[3, layers, heads, G]`` float32: :data:`~rcstat.grounding.features.HEAD_FEATURES`
        of every head for every response token (``rc`` is NaN for heads it was not asked
        for).
    nll
        ``[G]`` negative log-likelihood of each response token (nats).
    entropy
        ``[G]`` entropy (nats) of the model's next-token distribution at the row that writes
        each response token: how unsure the model was before the token.
    rank
        ``[G]`` how many vocabulary tokens the model found likelier than the response token
        (0: its greedy choice).
    units, spans
        The response's sentences (offsets in the response) and the context's sentences
        (offsets in the context).
    support
        ``[U, S]`` eq. (10) shares: each response sentence's key-level RC to each context
        sentence, summed over the support heads, normalised over the context sentences.
    copy
        ``[L, H, G]`` float32: each head's attention weight, at the row that writes a response
        token, on the context keys holding that token (:mod:`.features`).
    prior_nll
        ``[G]`` negative log-likelihood of each response token with the question and the
        response only, without the context (the prior pass); None when the pass did not run.
    copied
        ``[U, S]`` each response sentence's ``copy`` weight (every head, every row of the
        sentence) on the keys of each context sentence: where its words were copied from.
    head_summary
        ``[3, L, H]``: :meth:`head_features` at :data:`~rcstat.grounding.score.DEFAULT_QUANTILE`,
        computed where the pass ran (:func:`~rcstat.grounding.pass_results.head_summaries`,
        the same values); None: from ``features`` at each call. A copy with other
        ``features`` must leave it None.
    """

    example: Segmented
    features: np.ndarray  # [3, L, H, G]
    nll: np.ndarray  # [G]
    units: list[TextSpan]
    spans: list[TextSpan]
    support: np.ndarray  # [U, S]
    copy: np.ndarray  # [L, H, G]
    prior_nll: np.ndarray | None  # [G]
    copied: np.ndarray  # [U, S]
    entropy: np.ndarray  # [G]
    rank: np.ndarray  # [G]
    head_summary: np.ndarray | None = None  # [3, L, H]

    def head_features(self, quantile: float = DEFAULT_QUANTILE) -> np.ndarray:
        """``[3, L, H]``: every statistic's lower ``quantile`` over the response tokens, per
        head (a response is as weak as its weakest part, for the probe as for the score)."""
        if quantile == DEFAULT_QUANTILE and self.head_summary is not None:
            return self.head_summary.copy()
        return lower_quantiles(self.features, quantile)

    def head_vector(self, quantile: float = DEFAULT_QUANTILE) -> np.ndarray:
        """``[3 · L · H]``: :meth:`head_features` flattened (probe input, in the order of
        :func:`feature_names`)."""
        return self.head_features(quantile).ravel()

    def token_spans(self) -> np.ndarray:
        """``[G, 2]`` int64 character offsets of each response token in the response."""
        return _token_spans(self.example, len(self.nll))

    def copied_tokens(self) -> np.ndarray:
        """``[n]`` indices of the response tokens whose word occurs in the context (where
        some head's ``copy`` weight can be non-zero)."""
        return np.flatnonzero(self.copy.reshape(-1, self.copy.shape[-1]).max(axis=0) > 0)

    def copy_at(self, heads: np.ndarray) -> np.ndarray:
        """``[G]``: the ``copy`` weight summed over the flat head indices ``heads``."""
        return self.copy.reshape(-1, self.copy.shape[-1])[heads].sum(axis=0)

    def rc(self, heads: np.ndarray) -> np.ndarray:
        """``[G]``: normalized RC averaged over the flat head indices ``heads``."""
        rc = self.features[0].reshape(-1, self.features.shape[-1])[heads]  # [h, G]
        if np.isnan(rc).any():
            raise ValueError("the RC of some of these heads was not measured (rc_heads)")
        return rc.mean(axis=0)


@dataclass
class Prepared:
    """One example checked and tokenised for a (batched) pass (:meth:`Measurer.prepare`); its
    context's sentences, read after the pass, are made when first asked for."""

    example: Segmented
    passed: PassExample
    units: list[TextSpan]
    instruction: str
    language: str = DEFAULT_LANGUAGE

    @functools.cached_property
    def spans(self) -> list[TextSpan]:
        """The context's sentences (the candidate evidence of eq. 10)."""
        return split_sentences(self.example.part_text("context"), language=self.language)

    @functools.cached_property
    def span_keys(self) -> np.ndarray:
        """``[S, 2]`` int64: the token range ``[start, end)`` of each of :attr:`spans`."""
        found = self.example.token_spans("context", [(s.start, s.end) for s in self.spans])
        return np.array(found, dtype=np.int64).reshape(-1, 2)

    def token_spans(self) -> np.ndarray:
        """``[G, 2]``: :meth:`Measurement.token_spans` of its measurement, known before it."""
        return _token_spans(self.example, self.passed.rows.num_rows - 1)


def _token_spans(example: Segmented, count: int) -> np.ndarray:
    """``[count, 2]``: the first ``count`` response tokens' offsets in the response."""
    first = example.token_span("answer")[0]
    base = example.parts["answer"][0]
    offsets = np.array(example.offsets[first : first + count], dtype=np.int64)
    return np.maximum(offsets.reshape(-1, 2) - base, 0)
