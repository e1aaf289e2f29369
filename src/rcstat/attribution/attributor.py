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

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from rcstat.attribution.reduce import attribution_reducer
from rcstat.attribution.result import (
    HEAD_RANKINGS,
    Attribution,
    Granularity,
    HeadRanking,
    SpanStatistic,
    check_heads_top_k,
)
from rcstat.attribution.spans import (
    TextSpan,
    join_chunks,
    locate_spans,
    split_sentences,
)
from rcstat.capture import attention_layout, capture_scores, softmax_params
from rcstat.capture.graphs import kept_graphs
from rcstat.capture.host import HostStack, stack_on_host, sum_on_host
from rcstat.defaults import (
    DEFAULT_LANGUAGE,
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_TOP_K,
    SpanScore,
    default_span_score,
    resolve_span_score,
)
from rcstat.generation import check_example, check_max_new_tokens, generate_answer, input_device
from rcstat.segments import Segmented, segment_chat

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Attributor"]


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
    allow_special_tokens : bool, default False
        Encode special-token strings in the texts (e.g. ``<|im_start|>``) as special tokens.
        By default they are literal text and cannot open or close chat turns; enable this
        only for trusted text.
    language : str, default "en"
        Language code for sentence splitting (abbreviation lists); sentence ends of every
        script (``。``, ``؟``, ``।`` …) split in any language (see
        :func:`~rcstat.attribution.spans.split_sentences`).
    span_score : {"mean", "sum", "sentence"}, optional
        How a span's keys make its score (:meth:`Attribution.head_totals`): the paper's mean
        over the span, the sum (longer spans weigh more) or the span's best sentence. Default:
        ``"sentence"`` with the expected RC (ahead of the mean on the QuoteSum slice in every
        prompt layout, never behind; docs/benchmarks.md §4.1), ``"mean"`` with the upper bound.
        Every choice reads the same forward pass; the result can be rescored with another.
    question_first : bool, default False
        Write the question before the context in the user message (the context comes first
        by default).

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
        top_k: int | None = DEFAULT_TOP_K,
        head_ranking: HeadRanking = "top",
        statistic: SpanStatistic = "expected",
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        rank_post_softmax: bool | None = None,
        allow_special_tokens: bool = False,
        language: str = DEFAULT_LANGUAGE,
        span_score: SpanScore | None = None,
        question_first: bool = False,
    ) -> None:
        layout = attention_layout(model)
        if head_ranking not in HEAD_RANKINGS:
            raise ValueError(f"head_ranking must be one of {HEAD_RANKINGS}, got {head_ranking!r}")
        if statistic not in ("expected", "upper"):
            raise ValueError(f"statistic must be 'expected' or 'upper', got {statistic!r}")
        if head_ranking != "all":
            check_heads_top_k(top_k, layout.num_layers * layout.num_heads)
        chosen = cast(SpanScore, span_score or default_span_score(statistic))
        resolve_span_score(chosen, statistic)
        if not isinstance(question_first, bool):
            raise TypeError(f"question_first: expected a bool, got {type(question_first).__name__}")
        check_max_new_tokens(max_new_tokens)
        self.model = model
        self.tokenizer = tokenizer
        self.top_k = top_k
        self.head_ranking: HeadRanking = head_ranking
        self.statistic: SpanStatistic = statistic
        self.max_new_tokens = max_new_tokens
        self.allow_special_tokens = allow_special_tokens
        self.language = language
        self.span_score: SpanScore = chosen
        self.question_first = question_first
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
            raise ValueError("answer is empty or whitespace only")
        finished = True
        if answer is None:
            prompt = segment_chat(
                self.tokenizer,
                text,
                question,
                question_first=self.question_first,
                allow_special_tokens=self.allow_special_tokens,
            )
            answered = generate_answer(self.model, self.tokenizer, prompt, self.max_new_tokens)
            example, finished = answered.example, answered.finished
        else:
            example = segment_chat(
                self.tokenizer,
                text,
                question,
                answer,
                question_first=self.question_first,
                allow_special_tokens=self.allow_special_tokens,
            )
        answer_text = example.part_text("answer")
        unit_spans = (
            split_sentences(answer_text, language=self.language)
            if units is None
            else locate_spans(answer_text, units, what="unit")
        )
        if not unit_spans:
            raise ValueError("the answer has no sentence to attribute")
        check_example(self.model, example)
        result = self._run(example, text, question, answer_text, candidates, unit_spans)
        result.finished = finished
        return result

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
            return text, split_sentences(text, language=self.language)
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
        if candidates is None:  # one span per context token
            span_tokens = [(i, i + 1) for i in range(first, last)]
        else:
            span_tokens = example.token_spans("context", [(s.start, s.end) for s in candidates])
        m = example.prompt_len
        unit_tokens = [
            (a - m, b - m)
            for a, b in (example.token_span("answer", u.start, u.end) for u in unit_spans)
        ]
        reducer = attribution_reducer(
            m,
            unit_tokens,
            span_tokens,
            (first, last),
            self._softmax,
            upper=self.statistic == "upper",
            post_softmax=self.rank_post_softmax,
        )
        device = input_device(self.model)
        layout = attention_layout(self.model)
        layer_ids = range(layout.num_layers)
        units, pinned = len(unit_tokens), device.type == "cuda"
        shape = (units, layout.num_heads)
        token_scores = HostStack(layer_ids, (*shape, last - first), torch.float32, pinned)
        per_head = HostStack(layer_ids, (*shape, len(span_tokens)), torch.float64, pinned)

        def sink(layer: int, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            """The results that grow with the input go to the host as each layer ends."""
            token_scores.put(layer, out.pop("token_scores"))
            per_head.put(layer, out.pop("per_head"))
            return out

        # the layers' graphs stay on the model while calls of the same spans follow each other
        graphs = kept_graphs(self.model, "attribution")
        scope = graphs.scope(
            (
                example.input_ids.shape[-1],
                m,
                tuple(unit_tokens),
                tuple(span_tokens),
                (first, last),
                self.statistic,
                self.rank_post_softmax,
            )
        )
        with (
            torch.no_grad(),
            capture_scores(
                self.model,
                reducer,
                query_start=m,
                # layers alike up to their softmax
                graph_key=lambda layer: (self._softmax[layer], scope),
                graphs=graphs,
                sink=sink,
            ) as result,
        ):
            self.model(example.input_ids.to(device), use_cache=False, logits_to_keep=1)
        layers = result.ordered()
        ranking = stack_on_host([r["rank"] for r in layers]).transpose(0, 1).numpy()  # [4, L, H]
        attention = sum_on_host([r["attention"] for r in layers])  # [U, m] summed over layers
        heads = layout.num_layers * layout.num_heads
        token_texts = example.token_texts("context")
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
            per_head=per_head.result().permute(0, 2, 1, 3).numpy(),  # [L, H, U, S]
            token_scores=token_scores.result().permute(0, 2, 1, 3).numpy(),  # [L, H, U, C]
            attention=(attention[:, first:last] / heads).numpy(),
            context_tokens=token_texts,
            context_start=first,
            statistic=self.statistic,
            head_ranking=self.head_ranking,
            top_k=self.top_k,
            span_score=self.span_score,
        )
