"""Attribution of answer units to context spans with RC-ranked heads (paper §4.2, eq. 10).

:class:`Attributor` runs **one** teacher-forced forward pass of ``s = p ⊕ g`` (after greedy
generation when no answer is given) with the score capture active, and keeps per head:

1. the ranking scores ``E(X(p, g), Y(g, g))`` (or the upper bound) on raw scores and on
   post-softmax weights;
2. the span scores ``e_h(p_i) = E(X(p_i, g'), Y(g, g'))`` of every candidate span ``p_i`` for
   every answer unit ``g'`` (:mod:`rcstat.attribution.reduce`), and their per-key parts for
   token-level views;
3. the post-softmax attention of each unit to each prompt key (the baseline).

The result, :class:`Attribution`, then answers eq. (10) for any head selection without another
forward pass: ``RC(p_i) = Σ_{h∈H} e_h(p_i) / Σ_{i'} Σ_{h∈H} e_h(p_{i'})`` and attributes the
unit to ``argmax_i RC(p_i)``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast, get_args

import numpy as np
import pandas as pd
import torch

from rcstat.analysis import check_example, generate_answer
from rcstat.attribution.reduce import attribution_reducer
from rcstat.attribution.spans import TextSpan, join_chunks, locate_spans, split_sentences
from rcstat.capture import attention_layout, capture_scores, softmax_params
from rcstat.segments import Segmented, segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Attribution", "Attributor", "Granularity", "HeadRanking", "SpanStatistic"]

HeadRanking = Literal["top", "bottom", "all", "top_post_softmax", "bottom_post_softmax"]
SpanStatistic = Literal["expected", "upper"]
Granularity = Literal["chunk", "sentence", "token"]
HEAD_RANKINGS: tuple[str, ...] = get_args(HeadRanking)
_RANK_ROW = {  # row of Attribution.ranking: (statistic, post-softmax) -> index
    ("expected", False): 0,
    ("upper", False): 1,
    ("expected", True): 2,
    ("upper", True): 3,
}


def _normalize(totals: np.ndarray) -> tuple[np.ndarray, list[int | None]]:
    """Eq. (10) normalisation over spans ``[U, S]``; a unit whose total is 0 stays undecided."""
    sums = totals.sum(axis=-1, keepdims=True)  # [U, 1]
    scores = np.divide(totals, sums, out=np.zeros_like(totals), where=sums > 0)
    attributed = [
        int(np.argmax(row)) if total > 0 else None for row, total in zip(scores, sums, strict=True)
    ]
    return scores, attributed


@dataclass
class Attribution:
    """Span scores of one example for every answer unit, reusable for any head selection.

    Attributes
    ----------
    question, answer, context
        The texts (``context`` is the chunks joined when chunks were given).
    spans, units
        Candidate spans (character ranges of ``context``) and answer units (of ``answer``).
    span_tokens, unit_tokens
        Their token ranges ``[start, end)``: absolute for spans, relative to the first
        answer token for units.
    ranking
        ``[4, layers, heads]``: E and A of each head on raw scores, then E and A on
        post-softmax weights (over the whole sequence; paper §4.2 step 1). NaN where not
        computed: A with the expected statistic, the post-softmax rows unless requested.
    per_head
        ``[layers, heads, U, S]``: ``e_h(p_i)`` (or the upper bound) per unit and span.
    token_scores
        ``[layers, heads, U, C]`` float32: the per-key parts ``t_h`` over the ``C`` context
        tokens (token-level views).
    attention
        ``[U, C]``: post-softmax attention of each unit to each context token, averaged over
        heads, layers and the unit's queries.
    context_tokens
        The ``C`` context token strings (their concatenation is ``context``).
    context_start
        Absolute position of the first context token (column 0 of ``token_scores`` and
        ``attention``).
    statistic, head_ranking, top_k
        The configuration of :attr:`scores` / :attr:`attributed` / :attr:`heads`.
    gold
        Optional gold span per unit (set by benchmarks), used by the HTML view.
    """

    question: str
    answer: str
    context: str
    spans: list[TextSpan]
    units: list[TextSpan]
    span_tokens: list[tuple[int, int]]
    unit_tokens: list[tuple[int, int]]
    ranking: np.ndarray
    per_head: np.ndarray
    token_scores: np.ndarray
    attention: np.ndarray
    context_tokens: list[str]
    context_start: int
    statistic: SpanStatistic = "expected"
    head_ranking: HeadRanking = "top"
    top_k: int | None = 20
    gold: list[int | None] = field(default_factory=list)

    @property
    def num_heads(self) -> int:
        """Number of (layer, head) pairs of the model."""
        return int(self.per_head.shape[0] * self.per_head.shape[1])

    def heads_for(self, head_ranking: HeadRanking, top_k: int | None) -> list[tuple[int, int]]:
        """The ``(layer, head)`` pairs a ranking selects, best first (``"all"``: every head).

        Raises
        ------
        ValueError
            Unknown ranking, or ``top_k`` not in ``1 .. layers·heads``.
        """
        if head_ranking not in HEAD_RANKINGS:
            raise ValueError(f"head_ranking must be one of {HEAD_RANKINGS}, got {head_ranking!r}")
        layers, heads = self.per_head.shape[:2]
        if head_ranking == "all":
            return [(layer, head) for layer in range(layers) for head in range(heads)]
        _check_top_k(top_k, self.num_heads)
        post = head_ranking.endswith("post_softmax")
        values = self.ranking[_RANK_ROW[(self.statistic, post)]].reshape(-1)
        if np.isnan(values).any():
            raise ValueError(
                "the post-softmax ranking was not computed: create the Attributor with "
                "rank_post_softmax=True (or a post-softmax head_ranking)"
            )
        order = np.argsort(values if head_ranking.startswith("bottom") else -values, kind="stable")
        return [divmod(int(i), heads) for i in order[: cast(int, top_k)]]

    def scores_for(
        self, head_ranking: HeadRanking, top_k: int | None
    ) -> tuple[np.ndarray, list[int | None]]:
        """Eq. (10) scores ``[U, S]`` and the attributed span per unit for a head selection."""
        chosen = self.heads_for(head_ranking, top_k)
        rows, cols = (np.array(v) for v in zip(*chosen, strict=True))
        return _normalize(self.per_head[rows, cols].sum(axis=0))

    def attention_scores(self) -> tuple[np.ndarray, list[int | None]]:
        """The baseline: attention mass on each span (mean over heads, layers and the unit's
        queries, summed over the span's tokens), normalised over spans."""
        first = self.context_start
        mass = np.stack(
            [self.attention[:, s - first : e - first].sum(axis=1) for s, e in self.span_tokens],
            axis=1,
        )  # [U, S]
        return _normalize(mass)

    @property
    def heads(self) -> list[tuple[int, int]]:
        """The heads of this result's configuration."""
        return self.heads_for(self.head_ranking, self.top_k)

    @property
    def scores(self) -> np.ndarray:
        """``[U, S]`` normalised scores (eq. 10) of this result's configuration."""
        return self.scores_for(self.head_ranking, self.top_k)[0]

    @property
    def attributed(self) -> list[int | None]:
        """Per unit, the index of the highest-scoring span (None when every score is 0)."""
        return self.scores_for(self.head_ranking, self.top_k)[1]

    @property
    def method(self) -> str:
        """A readable name of this result's configuration."""
        return _method_name(self.head_ranking, self.top_k, self.statistic)

    def token_weights(self, heads: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
        """``[U, C]`` token-level RC summed over ``heads`` (default: :attr:`heads`), each unit
        normalised over the context tokens."""
        chosen = self.heads if heads is None else list(heads)
        rows, cols = (np.array(v) for v in zip(*chosen, strict=True))
        return _normalize(self.token_scores[rows, cols].sum(axis=0).astype(np.float64))[0]

    def to_frame(self) -> pd.DataFrame:
        """One row per (unit, span): texts, offsets, normalised score, attributed flag."""
        scores, attributed = self.scores_for(self.head_ranking, self.top_k)
        rows = []
        for u, unit in enumerate(self.units):
            for s, span in enumerate(self.spans):
                rows.append(
                    {
                        "unit": u,
                        "unit_text": unit.text,
                        "span": s,
                        "span_start": span.start,
                        "span_end": span.end,
                        "span_text": span.text,
                        "score": float(scores[u, s]),
                        "attributed": attributed[u] == s,
                    }
                )
        return pd.DataFrame(rows)

    def to_json(self) -> str:
        """The result as JSON: texts, spans, heads used, and per unit its scores."""
        scores, attributed = self.scores_for(self.head_ranking, self.top_k)
        payload = {
            "method": self.method,
            "question": self.question,
            "answer": self.answer,
            "context": self.context,
            "heads": [list(h) for h in self.heads],
            "spans": [{"start": s.start, "end": s.end, "text": s.text} for s in self.spans],
            "units": [
                {
                    "start": unit.start,
                    "end": unit.end,
                    "text": unit.text,
                    "attributed": attributed[u],
                    "scores": [float(v) for v in scores[u]],
                }
                for u, unit in enumerate(self.units)
            ],
        }
        return json.dumps(payload, indent=1)

    def to_html(self, path: str | Path | None = None, *, unit: int = 0) -> str:
        """Token shading per method (this configuration, all heads, mean attention).

        Returns the self-contained HTML document; also writes it to ``path`` when given.
        """
        from rcstat.report.attribution_html import attribution_html

        first = self.context_start
        span_ranges = _drawable(
            [(s - first, e - first) for s, e in self.span_tokens], len(self.context_tokens)
        )
        panels = {self.method: self.token_weights()}
        attributed = {self.method: self.attributed}
        if self.head_ranking != "all":
            label = _method_name("all", None, self.statistic)
            panels[label] = self.token_weights(self.heads_for("all", None))
            attributed[label] = self.scores_for("all", None)[1]
        panels["mean attention"] = _normalize(self.attention)[0]
        attributed["mean attention"] = self.attention_scores()[1]
        html = attribution_html(
            self.context_tokens,
            panels,
            [u.text for u in self.units],
            title="rcstat attribution",
            question=self.question,
            answer=self.answer,
            spans=span_ranges,
            attributed=attributed if span_ranges else None,
            gold=self.gold,
            selected=unit,
        )
        if path is not None:
            Path(path).write_text(html, encoding="utf-8")
        return html


def _drawable(spans: list[tuple[int, int]], tokens: int) -> list[tuple[int, int]]:
    """Span boxes for the HTML view: a token shared by two neighbouring spans goes to the
    first; nothing is boxed when spans nest or are single tokens (token granularity)."""
    if len(spans) >= tokens:
        return []
    drawn: list[tuple[int, int]] = []
    for start, end in spans:
        start = max(start, drawn[-1][1]) if drawn else start
        if start >= end:
            return []
        drawn.append((start, end))
    return drawn


def _method_name(head_ranking: str, top_k: int | None, statistic: str) -> str:
    stat = "" if statistic == "expected" else f", {statistic} bound"
    if head_ranking == "all":
        return f"all heads (RC{stat})"
    side, _, post = head_ranking.partition("_")
    source = "post-softmax RC" if post else "RC"
    return f"{side}-{top_k} {source} heads{stat}"


def _check_top_k(top_k: int | None, num_heads: int) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ValueError(f"top_k must be an int for a top/bottom ranking, got {top_k!r}")
    if not 1 <= top_k <= num_heads:
        raise ValueError(f"top_k must be in 1..{num_heads} (the model's heads), got {top_k}")


class Attributor:
    """Attribute answer units to context spans with the top-k RC heads (paper eq. 10).

    Parameters
    ----------
    model, tokenizer
        A Hugging Face causal LM (see :mod:`rcstat.capture`) and its fast tokenizer with a
        chat template.
    top_k : int, default 20
        Number of heads of a top/bottom ranking (ignored by ``"all"``).
    head_ranking : {"top", "bottom", "all", "top_post_softmax", "bottom_post_softmax"}
        How heads are chosen: by RC of raw scores (highest or lowest ``k``), every head, or
        by RC of post-softmax weights (supplement Table 2).
    statistic : {"expected", "upper"}, default "expected"
        Exact expected RC or its upper bound, for ranking and span scores alike.
    max_new_tokens : int, default 64
        Length of the greedy answer when none is given.
    rank_post_softmax : bool, optional
        Also compute the post-softmax ranking (one more sort per head and layer). Default:
        only when ``head_ranking`` is a post-softmax one; benchmarks comparing rankings set it.

    Examples
    --------
    >>> from rcstat import Attributor, load_model  # doctest: +SKIP
    >>> model, tok = load_model()  # doctest: +SKIP
    >>> result = Attributor(model, tok).attribute(  # doctest: +SKIP
    ...     ["Paris is the capital of France.", "Berlin is in Germany."],
    ...     "What is the capital of France?", "The capital of France is Paris.")
    >>> result.attributed  # doctest: +SKIP
    [0]
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        top_k: int | None = 20,
        head_ranking: HeadRanking = "top",
        statistic: SpanStatistic = "expected",
        *,
        max_new_tokens: int = 64,
        rank_post_softmax: bool | None = None,
    ) -> None:
        layout = attention_layout(model)
        if head_ranking not in HEAD_RANKINGS:
            raise ValueError(f"head_ranking must be one of {HEAD_RANKINGS}, got {head_ranking!r}")
        if statistic not in ("expected", "upper"):
            raise ValueError(f"statistic must be 'expected' or 'upper', got {statistic!r}")
        if head_ranking != "all":
            _check_top_k(top_k, layout.num_layers * layout.num_heads)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.top_k = top_k
        self.head_ranking: HeadRanking = head_ranking
        self.statistic: SpanStatistic = statistic
        self.max_new_tokens = max_new_tokens
        self.rank_post_softmax = (
            head_ranking.endswith("post_softmax")
            if rank_post_softmax is None
            else rank_post_softmax
        )
        self._softmax = softmax_params(model)

    def attribute(
        self,
        context: str | Sequence[str],
        question: str,
        answer: str | None = None,
        *,
        granularity: Granularity | None = None,
        spans: Sequence[str | tuple[int, int]] | None = None,
        units: Sequence[str | tuple[int, int]] | None = None,
    ) -> Attribution:
        """Attribute every unit of the answer to the candidate spans of the context.

        Parameters
        ----------
        context
            One text, or a list of chunks (passages) joined with blank lines.
        question
            The question; it ends the user turn of the chat template.
        answer
            The answer to attribute (teacher-forced); generated greedily when None.
        granularity
            Candidate spans: ``"chunk"`` (the given chunks; default for a list),
            ``"sentence"`` (default for a text) or ``"token"`` (every context token).
        spans
            Explicit candidate spans instead of a granularity: substrings of the context or
            ``(start, end)`` character offsets in it.
        units
            Answer units: substrings of the answer or ``(start, end)`` character offsets in
            it. Default: the answer's sentences.

        Raises
        ------
        ValueError
            Empty context, question or answer; chunks or spans that do not occur in the
            context; units outside the answer; ``"chunk"`` granularity for a single text;
            more tokens than the model's window.
        """
        text, candidates = self._candidates(context, granularity, spans)
        if answer is not None and not answer.strip():
            raise ValueError("answer is empty")
        if answer is None:
            prompt = segment_chat(self.tokenizer, text, question)
            example = generate_answer(self.model, self.tokenizer, prompt, self.max_new_tokens)
        else:
            example = segment_chat(self.tokenizer, text, question, answer)
        answer_text = example.part_text("answer")
        unit_spans = (
            split_sentences(answer_text)
            if units is None
            else locate_spans(answer_text, units, what="unit")
        )
        if not unit_spans:
            raise ValueError("the answer has no sentence to attribute")
        check_example(self.model, example)
        return self._run(example, text, question, answer_text, candidates, unit_spans)

    def _candidates(
        self,
        context: str | Sequence[str],
        granularity: Granularity | None,
        spans: Sequence[str | tuple[int, int]] | None,
    ) -> tuple[str, list[TextSpan] | None]:
        """The context text and its candidate spans (None = one span per token)."""
        if granularity not in (None, "chunk", "sentence", "token"):
            raise ValueError(
                f"granularity must be 'chunk', 'sentence' or 'token', got {granularity!r}"
            )
        if isinstance(context, str):
            if not context.strip():
                raise ValueError("context is empty")
            if granularity == "chunk" and spans is None:
                raise ValueError("granularity='chunk' needs the context as a list of chunks")
            text, chunks = context, None
        else:
            text, chunks = join_chunks(context)
        if spans is not None:
            if granularity is not None:
                raise ValueError("give either spans or a granularity, not both")
            return text, locate_spans(text, spans)
        chosen = granularity or ("chunk" if chunks is not None else "sentence")
        if chosen == "chunk":
            return text, chunks
        if chosen == "sentence":
            return text, split_sentences(text)
        return text, None

    def _run(
        self,
        example: Segmented,
        context: str,
        question: str,
        answer: str,
        candidates: list[TextSpan] | None,
        unit_spans: list[TextSpan],
    ) -> Attribution:
        first, last = example.token_span("context")
        ctx_start = example.parts["context"][0]
        if candidates is None:  # one span per context token
            span_tokens = [(i, i + 1) for i in range(first, last)]
        else:
            span_tokens = [example.token_span("context", s.start, s.end) for s in candidates]
        m = example.prompt_len
        unit_tokens = [
            (a - m, b - m)
            for a, b in (example.token_span("answer", u.start, u.end) for u in unit_spans)
        ]
        reducer = attribution_reducer(
            m,
            example.gen_len,
            unit_tokens,
            span_tokens,
            self._softmax,
            upper=self.statistic == "upper",
            post_softmax=self.rank_post_softmax,
        )
        device = next(self.model.parameters()).device
        with (
            torch.no_grad(),
            capture_scores(self.model, reducer, query_start=m) as result,
        ):
            self.model(example.input_ids.to(device), use_cache=False, logits_to_keep=1)
        layers = result.ordered()
        ranking = torch.stack([r["rank"].cpu() for r in layers], dim=1).numpy()  # [4, L, H]
        keys = torch.stack([r["keys"].cpu() for r in layers])  # [L, U, H, m]
        keys = keys.permute(0, 2, 1, 3)  # [L, H, U, m]
        if self.statistic == "upper":
            per_head = torch.stack([r["span_upper"].cpu() for r in layers]).permute(0, 2, 1, 3)
        else:  # e_h(p_i) = mean of the span's per-key values, by prefix sums over the keys
            prefix = torch.nn.functional.pad(keys.cumsum(dim=-1), (1, 0))  # [L, H, U, m + 1]
            first_key, end_key = (torch.tensor(v) for v in zip(*span_tokens, strict=True))
            per_head = (prefix[..., end_key] - prefix[..., first_key]) / (end_key - first_key)
        attention = torch.stack([r["attention"].cpu() for r in layers]).sum(dim=0)  # [U, m]
        heads = keys.shape[0] * keys.shape[1]
        token_texts = _token_texts(example, first, last, ctx_start, len(context))
        if candidates is None:
            offsets = np.cumsum([0, *(len(t) for t in token_texts[:-1])])
            candidates = [
                TextSpan(int(b), int(b) + len(t), t)
                for b, t in zip(offsets, token_texts, strict=True)
            ]
        return Attribution(
            question=question,
            answer=answer,
            context=context,
            spans=[TextSpan(int(s.start), int(s.end), s.text) for s in candidates],
            units=unit_spans,
            span_tokens=span_tokens,
            unit_tokens=unit_tokens,
            ranking=ranking,
            per_head=per_head.numpy(),
            token_scores=keys[..., first:last].float().numpy(),
            attention=(attention[:, first:last] / heads).numpy(),
            context_tokens=token_texts,
            context_start=first,
            statistic=self.statistic,
            head_ranking=self.head_ranking,
            top_k=self.top_k,
        )


def _token_texts(example: Segmented, first: int, last: int, start: int, length: int) -> list[str]:
    """The context cut at the context tokens' start offsets (their concatenation is the
    context; a token straddling the context's edge keeps only its part inside)."""
    cuts = [0] + [
        min(max(example.offsets[i][0] - start, 0), length) for i in range(first + 1, last)
    ]
    ends = [*cuts[1:], length]
    context = example.text[start : start + length]
    return [context[a:b] for a, b in zip(cuts, ends, strict=True)]
