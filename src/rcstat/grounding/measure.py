"""The measurements of grounding: what one teacher-forced pass (and an optional prior pass) sees.

:class:`Measurer` teacher-forces a response (written by any model) after its context and an
instruction or question, through the chat template of an *analysis* model, and runs one
forward pass with the score capture active. From that pass it keeps, per response token and
head, the statistics of :mod:`.features`, the token's negative log-likelihood, each response
sentence's copy weight and eq. (10) attribution on the context's sentences; a second pass of the
question and the response alone gives each token's prior NLL. No scoring choice is made here
(:mod:`.grounder` scores). Only the context's tokens count as context: the template and the
instruction are neither context nor response.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from rcstat.attribution import TextSpan, split_sentences
from rcstat.attribution.result import eq10_normalize
from rcstat.attribution.spans import DEFAULT_LANGUAGE
from rcstat.capture import attention_layout, capture_scores, softmax_params
from rcstat.generation import check_example, input_device
from rcstat.grounding.features import (
    HEAD_FEATURES,
    ResponseRows,
    grounding_reducer,
    heads_by_layer,
)
from rcstat.grounding.score import DEFAULT_QUANTILE, bigram_overlap, unigram_overlap
from rcstat.segments import Segmented, chat_prompt_ids, segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "DEFAULT_INSTRUCTION",
    "Measurement",
    "Measurer",
    "baselines",
    "feature_names",
]

_WORD = re.compile(r"\w+")

#: The instruction placed after the context when no question is given.
DEFAULT_INSTRUCTION = "Write a response based on the text above."


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

    def head_features(self, quantile: float = DEFAULT_QUANTILE) -> np.ndarray:
        """``[3, L, H]``: every statistic's lower ``quantile`` over the response tokens, per
        head (a response is as weak as its weakest part, for the probe as for the score)."""
        return np.quantile(self.features, quantile, axis=-1)

    def head_vector(self, quantile: float = DEFAULT_QUANTILE) -> np.ndarray:
        """``[3 · L · H]``: :meth:`head_features` flattened (probe input, in the order of
        :func:`feature_names`)."""
        return self.head_features(quantile).ravel()

    def token_spans(self) -> np.ndarray:
        """``[G, 2]`` int64 character offsets of each response token in the response."""
        first = self.example.token_span("answer")[0]
        base = self.example.parts["answer"][0]
        offsets = np.array(self.example.offsets[first : first + len(self.nll)], dtype=np.int64)
        return np.maximum(offsets.reshape(-1, 2) - base, 0)

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


class Measurer:
    """The forward pass of grounding, without any scoring choice (see :class:`Grounder`).

    Parameters
    ----------
    model, tokenizer
        The analysis model and its tokenizer.
    rc_heads
        Flat indices ``layer * heads + head`` of the heads whose per-token RC is computed
        (default: every head; the score needs only the profile's heads, a probe all).
    support_heads
        Flat indices of the heads that attribute each sentence to the context (eq. 10);
        none by default (no supporting spans).
    allow_special_tokens, language
        As in :class:`~rcstat.attribution.Attributor`.
    prior
        Also run the prior pass (:attr:`Measurement.prior_nll`; the benchmark's ``pmi_words``
        variant reads it, the verdicts do not).
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        rc_heads: np.ndarray | None = None,
        support_heads: np.ndarray | None = None,
        allow_special_tokens: bool = False,
        language: str = DEFAULT_LANGUAGE,
        prior: bool = True,
    ) -> None:
        layout = attention_layout(model)
        total = layout.num_layers * layout.num_heads
        for name, chosen in (("rc_heads", rc_heads), ("support_heads", support_heads)):
            if chosen is not None and len(chosen) and not (0 <= min(chosen) <= max(chosen) < total):
                raise ValueError(f"{name} must be flat head indices in [0, {total})")
        self.model = model
        self.tokenizer = tokenizer
        self.language = language
        self.allow_special_tokens = allow_special_tokens
        self.prior = prior
        self._rc_heads = None if rc_heads is None else heads_by_layer(rc_heads, layout.num_heads)
        self._support_heads = (
            None if support_heads is None else heads_by_layer(support_heads, layout.num_heads)
        )
        self._softmax = softmax_params(model)

    def measure(
        self,
        context: str,
        response: str,
        question: str | None = None,
        *,
        example: Segmented | None = None,
    ) -> Measurement:
        """Run the forward pass and return the raw per-token statistics (no scoring);
        ``example``: the same texts already tokenised by :meth:`tokenize`."""
        for label, text in (("context", context), ("response", response)):
            if not isinstance(text, str):
                raise TypeError(f"{label}: expected a str, got {type(text).__name__}")
            if not text.strip():
                raise ValueError(f"{label} is empty or whitespace only")
        if question is not None and (not isinstance(question, str) or not question.strip()):
            raise ValueError("question must be a non-empty string or None")
        instruction = DEFAULT_INSTRUCTION if question is None else question
        if example is None:
            example = self.tokenize(context, response, question)
        check_example(self.model, example)
        rows = ResponseRows(example.token_span("context"), example.token_span("answer"))
        units = split_sentences(example.part_text("answer"), language=self.language)
        spans = split_sentences(example.part_text("context"), language=self.language)
        first = rows.response[0]
        unit_rows = [
            (a - first, b - first)
            for a, b in (example.token_span("answer", u.start, u.end) for u in units)
        ]
        ids = example.input_ids[0]  # [T]
        reduce = grounding_reducer(
            rows,
            self._softmax,
            rc_heads=self._rc_heads,
            support_heads=self._support_heads,
            units=unit_rows,
            matches=self._matches(example, rows),
        )
        device = input_device(self.model)
        with torch.no_grad(), capture_scores(self.model, reduce, query_start=rows.first_row) as res:
            nll, entropy, rank = self._predicted(ids.to(device), rows.num_rows)
        prior_nll = None
        if self.prior:
            prompt = chat_prompt_ids(
                self.tokenizer, instruction, allow_special_tokens=self.allow_special_tokens
            )
            alone = torch.cat([torch.tensor(prompt, dtype=ids.dtype), ids[slice(*rows.response)]])
            with torch.no_grad():
                prior_nll = self._predicted(alone.to(device), rows.num_rows)[0]
        layers = res.ordered()
        features = _gathered(layers, "features", dim=1)  # [3, L, H, G]
        per_key = _gathered(layers, "support").sum(0)  # [U, C]: over heads
        c0 = rows.context[0]
        span_tokens = [example.token_span("context", s.start, s.end) for s in spans]
        totals = np.stack(
            [per_key[:, a - c0 : b - c0].mean(dim=1).numpy() for a, b in span_tokens], axis=1
        )  # [U, S]: e(p_i) = mean of the span's key-level values
        copied_keys = _gathered(layers, "copied").sum(0)  # [U, C]
        copied = np.stack(
            [copied_keys[:, a - c0 : b - c0].sum(dim=1).numpy() for a, b in span_tokens], axis=1
        )  # [U, S]
        return Measurement(
            example=example,
            features=features.numpy(),
            nll=nll,
            units=units,
            spans=spans,
            support=eq10_normalize(totals)[0],
            copy=_gathered(layers, "copy").numpy(),
            prior_nll=prior_nll,
            copied=copied,
            entropy=entropy,
            rank=rank,
        )

    def tokenize(self, context: str, response: str, question: str | None = None) -> Segmented:
        """The example of one pass: the chat template around context and question (or
        :data:`DEFAULT_INSTRUCTION`), the response teacher-forced after it."""
        return segment_chat(
            self.tokenizer,
            context,
            DEFAULT_INSTRUCTION if question is None else question,
            response,
            allow_special_tokens=self.allow_special_tokens,
        )

    def _predicted(self, ids: torch.Tensor, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """NLL, entropy and rank ``[G]`` of the last ``rows - 1`` tokens of ``ids`` ``[T]``
        (logits of the last ``rows`` positions only), from one copy to the host."""
        logits = self.model(ids[None], use_cache=False, logits_to_keep=rows).logits
        log_probs = logits[0, :-1].float().log_softmax(-1)  # [G, V]
        targets = ids[-(rows - 1) :]  # [G]
        chosen = log_probs.gather(-1, targets[:, None])  # [G, 1]
        entropy = -(log_probs.exp() * log_probs).sum(-1)  # [G]
        rank = (log_probs > chosen).sum(-1)  # [G]
        out = torch.stack([-chosen[:, 0], entropy, rank.to(entropy.dtype)]).cpu().double()
        nll, ent, ranks = out.numpy()
        return nll, ent, ranks

    @staticmethod
    def _matches(example: Segmented, rows: ResponseRows) -> torch.Tensor:
        """``[G, C]`` bool: context token ``k`` overlaps an occurrence, in the context, of a
        word (``\\w+``, without case) that response token ``j`` overlaps. Words, not token ids,
        are compared: the same word is often split differently at the start of a text."""
        text = example.text
        (c_lo, c_hi), (a_lo, a_hi) = example.parts["context"], example.parts["answer"]
        bounds = np.array(example.offsets, dtype=np.int64)  # [T, 2]
        said, source = bounds[slice(*rows.response)], bounds[slice(*rows.context)]  # [G|C, 2]
        # every word of the response, then the context's words among them: one id per word
        ids: dict[str, int] = {}
        said_words = [
            (w.start(), w.end(), ids.setdefault(w.group().lower(), len(ids)))
            for w in _WORD.finditer(text, a_lo, a_hi)
        ]
        source_words = [
            (w.start(), w.end(), ids[key])
            for w in _WORD.finditer(text, c_lo, c_hi)
            if (key := w.group().lower()) in ids
        ]
        return torch.from_numpy(
            (_overlaps(said, said_words, len(ids)) @ _overlaps(source, source_words, len(ids)).T)
            > 0
        )


def baselines(measured: Measurement, response: str, context: str) -> dict[str, float]:
    """Response-level baselines from the same pass, each oriented so that higher means more
    supported as its authors use it: the Lookback Lens ratio (mean over heads and tokens),
    LLM-Check's attention score (mean log-diagonal), minus the mean token NLL, and the share
    of response bigrams (``overlap``) and words (``unigram_overlap``) found in the context."""
    return {
        "lookback": float(measured.features[1].mean()),
        "attention_score": float(measured.features[2].mean()),
        "neg_nll": float(-measured.nll.mean()),
        "overlap": bigram_overlap(response, context),
        "unigram_overlap": unigram_overlap(response, context),
    }


def _overlaps(tokens: np.ndarray, words: list[tuple[int, int, int]], count: int) -> np.ndarray:
    """``[tokens, count]`` float32: 1 where a token (``[n, 2]`` offsets, in text order)
    overlaps a word of that id (``words``: start, end, id)."""
    out = np.zeros((len(tokens), count), dtype=np.float32)
    if words:
        spans = np.array(words, dtype=np.int64)  # [W, 3]
        first = np.searchsorted(tokens[:, 1], spans[:, 0], side="right")  # ends > word start
        last = np.searchsorted(tokens[:, 0], spans[:, 1], side="left")  # starts < word end
        for lo, hi, word in zip(first, last, spans[:, 2], strict=True):
            out[lo:hi, word] = 1.0
    return out


def _gathered(layers: list[dict[str, torch.Tensor]], key: str, dim: int = 0) -> torch.Tensor:
    """The ``key`` output of every layer stacked on ``dim``, copied to the host once per
    device (not once per layer: each copy waits for the device)."""
    first = layers[0][key].device
    return torch.stack([r[key].to(first, non_blocking=True) for r in layers], dim=dim).cpu()
