"""Is a response supported by its context? Word, sentence and response verdicts.

:class:`Grounder` measures a response against its context (:mod:`.measure`: one teacher-forced
pass and a short prior pass) and turns the measurement into a :class:`Grounding`: the word
score of :mod:`.score`, each sentence's weakest word and its evidence, the response's verdict
against the profile's calibrated threshold, the same-pass baselines and, when given, a trained
probe's probability. A context longer than the model's window is read in windows
(:mod:`.windows`); a response that cannot fit beside any context is partly unverified.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rcstat.attribution import TextSpan, split_sentences
from rcstat.capture import attention_layout
from rcstat.defaults import DEFAULT_TOP_K
from rcstat.grounding.detector import Detection
from rcstat.grounding.detector_features import lexicon_words
from rcstat.grounding.features import HEAD_FEATURES
from rcstat.grounding.lexicon import ResponseWord
from rcstat.grounding.limits import check_response_tokens, check_texts
from rcstat.grounding.measure import DEFAULT_INSTRUCTION, Measurer
from rcstat.grounding.measurement import Measurement, Prepared, feature_names
from rcstat.grounding.options import GroundingOptions
from rcstat.grounding.resolve import resolve_detector, resolve_probe, resolve_profile
from rcstat.grounding.result import Grounding, SentenceGrounding, UnsupportedSpan
from rcstat.grounding.score import aggregate, baselines, token_scores, word_scores
from rcstat.grounding.texts import ScoringTexts, scoring_texts, word_runs
from rcstat.grounding.windows import MIN_CONTEXT_TOKENS, Window, plan_windows
from rcstat.progress import progress
from rcstat.segments import Segmented

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["Grounder", "model_name", "sentence_scores"]

#: Tokens kept free in a window for tokens that merge differently at its boundaries.
_MARGIN = 8


class Grounder:
    """Score how well a response is supported by its context, from one teacher-forced pass.

    Parameters
    ----------
    model, tokenizer
        The analysis model (any Hugging Face causal LM that :mod:`rcstat.capture` supports)
        and its fast tokenizer with a chat template.
    options
        The verdict's options (:class:`~rcstat.grounding.options.GroundingOptions`: the head
        profile, the detector, the threshold, the limits on input size…); default: every
        option at its default.
    all_heads
        Measure the RC of every head, not only of the profile's chosen ones (the probe's
        features and :attr:`Grounding.head_features` need it; a probe turns it on).
    prior
        Also run the prior pass of :class:`Measurer` (the benchmark's ``pmi_words`` variant;
        no verdict needs it).
    **changes
        Options by name, over ``options`` (``Grounder(model, tok, top_k=5)``); an unknown
        name raises ``TypeError``, a value out of range ``ValueError``.

    Notes
    -----
    ``max_tokens`` above the model's window is lowered to it; a context longer than
    ``max_tokens`` is read in windows (:mod:`.windows`) and the response is never cut unless it
    cannot fit beside any context (its sentences past the cut are then *unverified*). The
    detector, by default the one shipped for the model
    (:func:`~rcstat.grounding.detector.shipped_detector`), gives the verdict, token scores and
    spans; ``detector=False`` gives the zero-shot word score (docs/grounding.md).

    Examples
    --------
    >>> from rcstat import Grounder, load_model  # doctest: +SKIP
    >>> model, tok = load_model()  # doctest: +SKIP
    >>> g = Grounder(model, tok).ground(  # doctest: +SKIP
    ...     "The Eiffel Tower was finished in 1889.", "It was finished in 1925.")
    >>> g.supported, [s.text for s in g.unsupported]  # doctest: +SKIP
    (False, ['It was finished in 1925.'])
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        options: GroundingOptions | None = None,
        *,
        all_heads: bool = False,
        prior: bool = False,
        **changes: Any,
    ) -> None:
        unknown = sorted(set(changes) - {f.name for f in fields(GroundingOptions)})
        if unknown:
            known = ", ".join(f.name for f in fields(GroundingOptions))
            raise TypeError(f"Grounder got unknown option(s) {unknown}; the options: {known}")
        options = replace(options or GroundingOptions(), **changes).checked()
        self.options = options
        layout = attention_layout(model)
        name = model_name(model)
        self.detector = resolve_detector(
            options.detector, name, layout.num_layers, layout.num_heads
        )
        self.profile = resolve_profile(options.profile, name)
        if self.profile.shape != (layout.num_layers, layout.num_heads):
            raise ValueError(
                f"the head profile is for {self.profile.shape[0]} layers x "
                f"{self.profile.shape[1]} heads ({self.profile.model}); the model has "
                f"{layout.num_layers} x {layout.num_heads}"
            )
        self.heads = self.profile.heads(options.fraction)
        self.copy_heads = self.profile.copy_heads()
        self.quantile = options.quantile
        default = self.profile.threshold if self.detector is None else 1.0 - self.detector.threshold
        self.threshold = default if options.threshold is None else options.threshold
        # a detector's default threshold is that of each response's kind (copied or other)
        self._kind_threshold = options.threshold is None
        self.probe = resolve_probe(
            options.probe, feature_names(layout.num_layers, layout.num_heads)
        )
        self.model_name = name
        total = layout.num_layers * layout.num_heads
        self.top_k = min(DEFAULT_TOP_K, total) if options.top_k is None else options.top_k
        if self.top_k > total:
            raise ValueError(f"top_k must be in [0, {total}] (the model's heads), got {self.top_k}")
        self.all_heads = all_heads or self.probe is not None
        self.max_chars = options.max_chars
        self.max_response_tokens = options.max_response_tokens
        window = layout.max_positions
        limit = options.max_tokens
        self.max_tokens = window if limit is None else min(limit, window or limit)
        self.language = options.language
        self.measurer = Measurer(
            model,
            tokenizer,
            rc_heads=None if self.all_heads else np.zeros(0, dtype=np.int64),
            support_heads=self.profile.heads(self.top_k / total) if self.top_k else None,
            allow_special_tokens=options.allow_special_tokens,
            language=options.language,
            prior=prior,
        )

    @property
    def method(self) -> dict[str, Any]:
        """The scoring configuration, as recorded in every result."""
        detector = self.detector
        return {
            "score": "word max(copy, exp(-nll)), sentence = weakest word, response = weakest "
            "sentence"
            if detector is None
            else "trained detector: response score 1 - P(unsupported), token score 1 - p_j",
            "detector": None
            if detector is None
            else {
                "model": detector.model,
                "threshold": detector.threshold,
                "span_threshold": detector.span_threshold,
                "copy_span_threshold": detector.copy_span_threshold,
                "trained_on": detector.meta.get("datasets"),
            },
            "copy_heads": len(self.copy_heads),
            "heads": len(self.heads),
            "fraction": len(self.heads) / self.profile.values.size,
            "quantile": self.quantile,
            "threshold": self.threshold,
            "profile": {"model": self.profile.model, "source": self.profile.source},
            "support_heads": self.top_k,
            "max_tokens": self.max_tokens,
        }

    def zero_shot(self) -> Grounder:
        """This grounder with the zero-shot word score and the profile's threshold instead of
        the detector (the same pass serves both)."""
        twin = copy.copy(self)
        twin.detector = None
        twin.threshold = self.profile.threshold
        return twin

    def ground(
        self,
        context: str,
        response: str,
        question: str | None = None,
        *,
        show_progress: bool = False,
    ) -> Grounding:
        """Score every word and sentence of ``response`` against ``context``.

        Parameters
        ----------
        context
            The source text the response should rest on (any length: a context longer than
            ``max_tokens`` is read in windows).
        response
            The response to check (teacher-forced; written by any model).
        question
            The question or instruction the response answers; default
            :data:`DEFAULT_INSTRUCTION`.
        show_progress
            Show the windows of a long context on standard error as they are read.

        Raises
        ------
        ValueError
            Empty texts, a response without a word, a text longer than ``max_chars``, a
            response longer than ``max_response_tokens``, or a question too long to leave room
            for any context (:mod:`.limits`; all before any forward pass).
        """
        planned = self._prepare(context, response, question)
        if not isinstance(planned, Prepared):
            return self._read_windows(context, response, question, planned, show_progress)
        checked, whole = planned.example.part_text("answer"), planned.example.part_text("context")
        texts: list[ScoringTexts] = []

        def work() -> None:  # while the device runs the pass
            spans, units, scores = planned.token_spans(), planned.units, self.detector is not None
            texts.append(scoring_texts(checked, spans, units, whole, lexicon=scores, overlaps=True))
            planned.span_keys  # noqa: B018 (the context's sentences: made now, read after)

        measured = self.measurer.measure_batch([planned], meanwhile=work)[0]
        return self._combine([measured], [Window(0, len(whole))], texts=texts[0])

    def _read_windows(
        self,
        context: str,
        response: str,
        question: str | None,
        plan: tuple[str, list[Window]],
        show_progress: bool,
    ) -> Grounding:
        """One pass over each window of a long context (see :meth:`_plan`), combined."""
        checked, windows = plan
        shown = progress(
            windows,
            desc="reading the context",
            unit="window",
            enabled=show_progress and len(windows) > 1,
        )
        measured = [
            self.measurer.measure(context[w.start : w.end], checked, question) for w in shown
        ]
        return self._combine(measured, windows, context, response)

    def ground_many(
        self,
        pairs: Sequence[tuple[str, str, str | None]],
        *,
        batch_tokens: int | None = None,
        show_progress: bool = False,
        share_prompts: bool = True,
    ) -> list[Grounding | ValueError]:
        """Ground many (context, response, question) triples, several in each forward pass.

        The pairs are measured in passes of at most ``batch_tokens`` tokens
        (:meth:`Measurer.measure_many`), each pass's pairs scored on a second thread while the
        next pass runs (on a GPU the host's work then overlaps the device's); a pair whose
        context needs windows is read alone, in windows (as :meth:`ground`). Each result
        equals :meth:`ground` of its pair up to floating-point rounding.

        Parameters
        ----------
        pairs
            ``(context, response, question)`` triples; ``question`` may be None.
        batch_tokens
            The most tokens of one pass; default :data:`~rcstat.defaults.DEFAULT_BATCH_TOKENS`
            on a GPU, one pair a pass on a CPU (where batching saves nothing).
        show_progress
            Show the windows of a long context on standard error as they are read.
        share_prompts
            One pair a pass: pairs of one context and question share that prompt's pass
            (:meth:`Measurer.measure_shared`); False: each its own (exactly :meth:`ground`).

        Returns
        -------
        list
            In the order of ``pairs``: each pair's :class:`Grounding`, or the ``ValueError``
            that :meth:`ground` raises for it (refused before any pass; the others are
            grounded).
        """
        results: list[Grounding | ValueError | None] = [None] * len(pairs)
        ready: list[tuple[int, Prepared]] = []
        for at, (context, response, question) in enumerate(pairs):
            try:
                planned = self._prepare(context, response, question)
                if isinstance(planned, Prepared):
                    ready.append((at, planned))
                else:
                    results[at] = self._read_windows(
                        context, response, question, planned, show_progress
                    )
            except ValueError as err:
                results[at] = err

        def score(batch: list[int], measured: list[Measurement]) -> None:
            for k, one in zip(batch, measured, strict=True):
                results[ready[k][0]] = self.score(one)

        # each pass's results are scored on the host while the next pass runs on the device
        chosen = [prepared for _, prepared in ready]
        passes = self.measurer.passes(
            chosen, batch_tokens=batch_tokens, share_prompts=share_prompts
        )
        with ThreadPoolExecutor(max_workers=1) as scorer:
            scored = [scorer.submit(score, batch, measured) for batch, measured in passes]
            for done in scored:
                done.result()  # raises what scoring raised
        return [r for r in results if r is not None]

    def _prepare(
        self, context: str, response: str, question: str | None
    ) -> Prepared | tuple[str, list[Window]]:
        """The example of one pass, checked (every limit of :meth:`ground`); or, for a
        context longer than ``max_tokens``, the checked part of the response and the
        context's windows."""
        check_texts(
            {"context": context, "response": response, "question": question}, self.max_chars
        )
        example = self.measurer.tokenize(context, response, question)
        first, last = example.token_span("answer")
        check_response_tokens(last - first, self.max_response_tokens)
        plan = self._plan(context, response, example)
        if plan is None:
            return self.measurer.prepare(context, response, question, example=example)
        return plan

    def score(self, measured: Measurement) -> Grounding:
        """Turn a :class:`Measurement` into a :class:`Grounding` with this configuration."""
        return self._combine([measured], [Window(0, len(measured.example.part_text("context")))])

    def _plan(
        self, context: str, response: str, example: Segmented
    ) -> tuple[str, list[Window]] | None:
        """None when the whole ``example`` fits ``max_tokens``; else the part of the response
        that is checked (all of it unless it cannot fit beside :data:`MIN_CONTEXT_TOKENS` of
        context) and the context's windows."""
        if self.max_tokens is None or example.seq_len <= self.max_tokens:
            return None
        tokenizer = self.measurer.tokenizer

        def count(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        first, last = example.token_span("context")
        overhead = example.seq_len - (last - first) + _MARGIN
        checked = response
        if self.max_tokens - overhead < MIN_CONTEXT_TOKENS:
            checked = self._fitting_part(response, overhead - example.gen_len, count)
            overhead += count(checked) - example.gen_len
        room = self.max_tokens - overhead
        return checked, plan_windows(context, room, count, language=self.language)

    def _fitting_part(self, response: str, fixed: int, count: Callable[[str], int]) -> str:
        """The longest run of the response's first sentences that fits beside
        :data:`MIN_CONTEXT_TOKENS` of context (``fixed``: template and question tokens)."""
        budget = (self.max_tokens or 0) - fixed - MIN_CONTEXT_TOKENS
        end = 0
        for unit in split_sentences(response, language=self.language):
            if count(response[: unit.end]) > budget:
                break
            end = unit.end
        if end == 0:
            raise ValueError(
                f"the question and the first sentence of the response take more than the "
                f"{self.max_tokens} tokens of one pass: nothing of the response can be checked"
            )
        return response[:end]

    def _combine(
        self,
        measured: list[Measurement],
        windows: list[Window],
        context: str | None = None,
        response: str | None = None,
        texts: ScoringTexts | None = None,
    ) -> Grounding:
        """One grounding from the passes over ``windows`` of the context: each word keeps its
        best score over the windows, each sentence its evidence from the window that supports
        it best; sentences of ``response`` past the checked part are unverified (``texts``:
        what it reads of the texts alone, already made)."""
        example = measured[0].example
        checked = example.part_text("answer")
        context = example.part_text("context") if context is None else context
        response = checked if response is None else response
        spans = measured[0].token_spans()
        if texts is None:
            texts = scoring_texts(
                checked,
                spans,
                measured[0].units,
                context,
                lexicon=self.detector is not None,
                overlaps=False,
            )
        words = texts.words
        per_window = np.stack(
            [word_scores(m.nll, m.copy_at(self.copy_heads), words) for m in measured]
        )  # [windows, W]
        best = per_window.max(axis=0)  # [W]
        if self.detector is None:
            token_values = np.full(len(spans), np.nan)  # [G]: NaN where no word is judged
            for w, value in zip(words, best, strict=True):
                part = token_values[w.first : w.last]
                token_values[w.first : w.last] = np.fmin(part, value)
            word_values = best
        else:
            detection, marked = self._detect(measured, windows, context, checked, texts)
            token_values = 1.0 - detection.token_probability  # [G]
            word_values = np.array([token_values[w.first : w.last].min() for w in words])
        units = measured[0].units
        base = example.token_span("answer")[0]
        ranges = example.token_spans("answer", [(unit.start, unit.end) for unit in units])
        sentences = []
        for u, (unit, (first, last)) in enumerate(zip(units, ranges, strict=True)):
            inside = texts.inside[u]
            if inside:
                by_window = per_window[:, inside].min(axis=1)  # [windows]
                k = int(np.argmax(by_window))
                weakest_word = words[inside[int(np.argmin(word_values[inside]))]]
                score = float(word_values[inside].min())
                weakest = TextSpan(
                    weakest_word.start,
                    weakest_word.end,
                    checked[weakest_word.start : weakest_word.end],
                )
            else:  # no word to check ("...")
                k, score, weakest = 0, 1.0, None
            evidence, share = _evidence(measured[k], u)
            if evidence is not None:
                offset = windows[k].start
                evidence = TextSpan(evidence.start + offset, evidence.end + offset, evidence.text)
            sentences.append(
                SentenceGrounding(
                    start=unit.start,
                    end=unit.end,
                    text=unit.text,
                    tokens=(first - base, last - base),
                    score=score,
                    supported=bool(score >= self.threshold),
                    support=evidence,
                    support_share=share,
                    weakest=weakest,
                )
            )
        threshold = self.threshold
        if self.detector is None:
            score = min((s.score for s in sentences), default=float("nan"))
            found = word_runs(checked, words, best, self.threshold)
            token_threshold = None
        else:
            score = 1.0 - detection.probability
            if self._kind_threshold:
                threshold = 1.0 - detection.threshold
            token_threshold = 1.0 - self.detector.span_threshold_of(detection.kind)
            found = []
            if score < threshold:  # only an unsupported response has unsupported spans
                runs, peaks = self.detector.spans(
                    checked, spans, detection.token_probability, marked, detection.kind
                )
                found = [
                    UnsupportedSpan(span.start, span.end, span.text, 1.0 - peak)
                    for span, peak in zip(runs, peaks, strict=True)
                ]
            sentences = [_flag_by_spans(s, found) for s in sentences]
        for unit in split_sentences(response[len(checked) :], language=self.language):
            offset = len(checked)
            sentences.append(
                SentenceGrounding(
                    start=unit.start + offset,
                    end=unit.end + offset,
                    text=unit.text,
                    tokens=(len(spans), len(spans)),
                    score=float("nan"),
                    supported=False,
                    support=None,
                    support_share=None,
                    verified=False,
                )
            )
        chosen = measured[int(np.argmax(per_window.min(axis=1)))] if words else measured[0]
        features = chosen.head_features()  # [3, L, H]; rc NaN unless all_heads
        probe_score = None
        if self.probe is not None:
            probe_score = float(self.probe.predict_proba(chosen.head_vector()[None, :])[0])
        return Grounding(
            context=context,
            question=example.part_text("question"),
            question_given=example.part_text("question") != DEFAULT_INSTRUCTION,
            response=response,
            token_texts=example.token_texts("answer"),
            token_spans=spans,
            token_scores=token_values,
            sentences=sentences,
            score=score,
            threshold=threshold,
            baselines=baselines(
                chosen, checked, chosen.example.part_text("context"), texts.overlaps
            ),
            head_features={
                name: features[i]
                for i, name in enumerate(HEAD_FEATURES)
                if not np.isnan(features[i]).any()  # rc of every head only with all_heads
            },
            probe_score=probe_score,
            method=self.method,
            model=self.model_name,
            finished=len(checked) == len(response),
            windows=len(windows),
            spans=found,
            token_threshold=token_threshold,
        )

    def _detect(
        self,
        measured: list[Measurement],
        windows: list[Window],
        context: str,
        checked: str,
        texts: ScoringTexts,
    ) -> tuple[Detection, list[ResponseWord]]:
        """The detector's view of the passes over ``windows``: each token keeps its lowest
        probability over the windows (where its support is best) under the token model of the
        response's kind (by the whole context's words), the response features come
        from the window of lowest mean probability and the whole context's words; and the
        response's words marked by the whole context's lexicon."""
        assert self.detector is not None
        assert texts.lexicon is not None and texts.marked is not None
        lexicon, marked = texts.lexicon, texts.marked
        whole = len(windows) == 1 and windows[0].end - windows[0].start == len(context)
        kind = self.detector.kind_of(marked)[0]
        per_window = np.stack(
            [
                self.detector.token_probability(
                    m, marked if whole else lexicon_words(context[w.start : w.end], checked), kind
                )
                for m, w in zip(measured, windows, strict=True)
            ]
        )  # [windows, G]
        chosen = measured[int(np.argmin(per_window.mean(axis=1)))]
        detection = self.detector.detect_tokens(
            chosen, marked, per_window.min(axis=0), structured=lexicon.structured
        )
        return detection, marked


def _evidence(measured: Measurement, unit: int) -> tuple[TextSpan | None, float | None]:
    """The context sentence that supports response sentence ``unit`` and its share: where its
    words were copied from (:attr:`Measurement.copied`), else the eq. (10) attribution."""
    for shares in (measured.copied[unit], measured.support[unit]):
        total = float(shares.sum())
        if total > 0:
            chosen = int(np.argmax(shares))
            return _copy(measured.spans[chosen]), float(shares[chosen] / total)
    return None, None


def model_name(model: PreTrainedModel) -> str:
    """The model's ``config.name_or_path``, else its class name (recorded in results)."""
    return str(getattr(model.config, "name_or_path", "") or type(model).__name__)


def sentence_scores(
    measured: Measurement, heads: np.ndarray, quantile: float
) -> tuple[np.ndarray, list[tuple[int, int]], list[float]]:
    """The score of rcstat before words (``exp(−r·NLL)`` per token over the RC ``heads``,
    sentence = lower ``quantile``): token scores ``[G]``, each sentence's token range and its
    score. The benchmark keeps it as the variant ``exp_rc_nll``."""
    example = measured.example
    first = example.token_span("answer")[0]
    scores = token_scores(measured.rc(heads), measured.nll)
    ranges, values = [], []
    for unit in measured.units:
        a, b = (t - first for t in example.token_span("answer", unit.start, unit.end))
        ranges.append((a, b))
        values.append(aggregate(scores[a:b], quantile))
    return scores, ranges, values


def _copy(span: TextSpan) -> TextSpan:
    return TextSpan(int(span.start), int(span.end), span.text)


def _flag_by_spans(sentence: SentenceGrounding, spans: list[UnsupportedSpan]) -> SentenceGrounding:
    """``sentence`` supported exactly when no unsupported span overlaps it (the detector's
    sentences follow its spans)."""
    hit = any(s.start < sentence.end and s.end > sentence.start for s in spans)
    return replace(sentence, supported=not hit)
