"""Training a grounding detector on labelled responses (``rcstat ground-train``).

:func:`measure_samples` runs the one pass of :class:`~rcstat.grounding.Measurer` over each
labelled response and keeps its detector features (:mod:`.detector_features`);
:func:`fit_detector` fits a :class:`~rcstat.grounding.detector.Detector` on them:

1. the **token models** (responses whose unsupported spans are labelled, faithful ones
   included: every token of a faithful response is a negative), ``C`` chosen by grouped
   cross-validation of the token AUROC: one on every response, and one of the responses that
   quote their context ("copied", :mod:`.detector`: mostly the copied and changed sentences of
   :mod:`.swaps`, built from unlabelled documents) on those alone — one changed word in a
   quoted sentence is a signal that reworded answers do not carry;
2. out-of-fold token probabilities for every response (the token model of its kind, fitted on
   the other folds), so that the **response models** learn from probabilities like those of
   unseen responses (stacking): one for the copied kind and one for all others, each ``C``
   chosen by grouped cross-validation of the response AUROC;
   a kind with fewer than :data:`MIN_CALIBRATION` responses of either class (or no labelled
   span, for its token model) takes the other kind's models and threshold;
3. each kind's **threshold**: the smallest that flags at most ``max_false_alarms`` (other
   kind) or ``max_copy_false_alarms`` (copied kind) of its faithful responses in *every*
   dataset, out of fold (a false-alarm rate that holds on each source of data, not only on
   their mix); a dataset with too few faithful responses in the kind to hold one false alarm
   at that rate (fewer than ``1 / rate``) may have one
   (:func:`~rcstat.metrics.thresholds.false_alarm_threshold`);
4. each kind's **span threshold**: the one of largest character-level span F1, out of fold,
   over that kind's span-labelled responses with its span rule (:mod:`.detector_spans`).

Every fit weighs a response (or a token) by its dataset's weight, set once over all the
samples (:mod:`.sample_weights`): with ``balance_datasets`` every dataset has the same total
whatever its size, times its ``dataset_weights`` entry.

Folds are grouped (:class:`~sklearn.model_selection.StratifiedGroupKFold`): responses sharing a
group (one source document) never sit on both sides. :func:`cross_validate_detector` repeats
the whole fit inside outer folds for an honest out-of-sample report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcstat.grounding import detector_features as features
from rcstat.grounding.detector import COPIED_KIND, Detector, LinearModel
from rcstat.grounding.detector_spans import draw_spans, unit_values
from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.measure import Measurer
from rcstat.grounding.sample_weights import DatasetWeights
from rcstat.metrics.ranking import auroc
from rcstat.metrics.spans import char_prf
from rcstat.metrics.thresholds import false_alarm_threshold

__all__ = [
    "MIN_CALIBRATION",
    "DetectorSample",
    "FitOptions",
    "LabelledResponse",
    "OutOfFold",
    "cross_validate_detector",
    "fit_detector",
    "measure_samples",
]


#: The fewest faithful responses of a kind that set its own threshold.
MIN_CALIBRATION = 20


@dataclass(frozen=True)
class LabelledResponse:
    """One labelled response to train or evaluate a detector on.

    Attributes
    ----------
    id, context, question, response
        The texts (``question`` None: the default instruction).
    label
        True when the response is unsupported (holds a hallucination).
    spans
        ``[start, end)`` character offsets of its unsupported spans.
    spans_known
        Whether ``spans`` are annotated (True: a response without spans has none; False: only
        the response's label is known, e.g. SummEdits).
    group
        Responses sharing a group stay in one fold (e.g. one source document).
    dataset
        Where it comes from (thresholds hold on each dataset; reports break down by it).
    by
        A breakdown key (the task, the generator).
    """

    id: str
    context: str
    question: str | None
    response: str
    label: bool
    spans: tuple[tuple[int, int], ...] = ()
    spans_known: bool = True
    group: str = ""
    dataset: str = ""
    by: str = ""


@dataclass(frozen=True)
class DetectorSample:
    """A labelled response with the detector features of its pass.

    Attributes
    ----------
    item
        The labelled response.
    x
        ``[G, F]`` token features.
    token_label
        ``[G]`` True for tokens inside a labelled span.
    offsets
        ``[G, 2]`` character offsets of the tokens in the response.
    nll
        ``[G]`` token NLL.
    context_tokens
        The context's token count.
    words
        The response's words and their context matches.
    structured
        Whether the context is structured data.
    """

    item: LabelledResponse
    x: np.ndarray  # [G, F]
    token_label: np.ndarray  # [G]
    offsets: np.ndarray  # [G, 2]
    nll: np.ndarray  # [G]
    context_tokens: int
    words: tuple[ResponseWord, ...]
    structured: bool = False

    @property
    def group(self) -> str:
        """The fold group, namespaced by the dataset."""
        return f"{self.item.dataset}:{self.item.group or self.item.id}"

    def response_x(self, probability: np.ndarray) -> np.ndarray:
        """``[R]`` response features for token probabilities ``probability`` ``[G]``."""
        return features.response_features(
            probability,
            self.nll,
            self.context_tokens,
            self.item.response,
            list(self.words),
            self.structured,
        )

    def spans_at(
        self, probability: np.ndarray, threshold: float, kind: str
    ) -> list[tuple[int, int]]:
        """The predicted unsupported spans of a flagged response of ``kind`` at span
        ``threshold`` (:func:`~.detector_spans.draw_spans`)."""
        spans, _ = draw_spans(
            kind, self.item.response, self.offsets, probability, threshold, list(self.words)
        )
        return [(s.start, s.end) for s in spans]


def measure_samples(
    measurer: Measurer,
    items: Iterable[LabelledResponse],
    *,
    progress: Callable[[list[LabelledResponse]], Iterable[LabelledResponse]] | None = None,
) -> tuple[list[DetectorSample], list[tuple[str, str]]]:
    """The samples of ``items`` (one pass each) and ``(id, error)`` of those that could not be
    measured (too long for the model's window, ...)."""
    items = list(items)
    samples, errors = [], []
    for item in items if progress is None else progress(items):
        try:
            measured = measurer.measure(item.context, item.response, item.question)
        except ValueError as err:
            errors.append((item.id, f"{type(err).__name__}: {err}"))
            continue
        lexicon = Lexicon(item.context)
        words = lexicon.words_of(measured.example.part_text("answer"))
        x, _ = features.token_features(measured, words)
        offsets = measured.token_spans()
        label = np.zeros(len(offsets), dtype=bool)
        for start, end in item.spans:
            label |= (offsets[:, 1] > start) & (offsets[:, 0] < end)
        samples.append(
            DetectorSample(
                item=item,
                x=x,
                token_label=label,
                offsets=offsets,
                nll=np.asarray(measured.nll, dtype=np.float64),
                context_tokens=features.context_tokens(measured),
                words=tuple(words),
                structured=lexicon.structured,
            )
        )
    return samples, errors


@dataclass(frozen=True)
class FitOptions:
    """How :func:`fit_detector` fits (module notes).

    Attributes
    ----------
    token_C, response_C
        The inverse L2 strengths tried for each model.
    folds
        Grouped folds of every inner cross-validation.
    max_false_alarms
        The largest share of faithful responses of any dataset the threshold may flag.
    max_copy_false_alarms
        The same for the faithful responses of the copied kind.
    balance_datasets
        Weight each dataset's tokens (and responses) so that every dataset counts as much as
        any other, whatever its size (over all the samples: :mod:`.sample_weights`).
    dataset_weights
        Relative weight of each named dataset's total (default 1), on top of the balancing.
    seed
        Seed of the fold assignment.
    head_penalty
        The token models' L2 penalty on each head's own features (540 weak, correlated
        columns for the default model) is ``head_penalty²`` times the others'
        (:meth:`~.detector.LinearModel.fit`'s ``penalty``); 1 fits them like the others
        (docs/grounding.md, "Every head held back").
    """

    token_C: tuple[float, ...] = (0.01, 0.1, 1.0)
    response_C: tuple[float, ...] = (0.03, 0.3, 3.0)
    folds: int = 5
    max_false_alarms: float = 0.2
    max_copy_false_alarms: float = 0.05
    balance_datasets: bool = True
    dataset_weights: tuple[tuple[str, float], ...] = ()
    seed: int = 0
    head_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.token_C or not self.response_C or min(*self.token_C, *self.response_C) <= 0:
            raise ValueError("token_C and response_C must be non-empty and positive")
        if isinstance(self.folds, bool) or not isinstance(self.folds, int) or self.folds < 2:
            raise ValueError(f"folds must be an integer >= 2, got {self.folds!r}")
        for name in ("max_false_alarms", "max_copy_false_alarms"):
            if not 0 < getattr(self, name) < 1:
                raise ValueError(f"{name} must be in (0, 1), got {getattr(self, name)}")
        if not 1 <= self.head_penalty < float("inf"):
            raise ValueError(f"head_penalty must be finite and >= 1, got {self.head_penalty}")


@dataclass
class OutOfFold:
    """Out-of-fold predictions of one fit: per sample its token probabilities, response
    probability, verdict and predicted spans."""

    token: list[np.ndarray] = field(default_factory=list)
    probability: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flagged: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    spans: list[list[tuple[int, int]]] = field(default_factory=list)


def fit_detector(
    samples: Sequence[DetectorSample],
    *,
    model: str,
    layers: int,
    heads: int,
    options: FitOptions | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[Detector, OutOfFold]:
    """Fit a detector on ``samples`` (module notes) and return it with its inner out-of-fold
    predictions (those that chose its thresholds).

    Raises
    ------
    ValueError
        No response with labelled spans and an unsupported token, a single class of
        responses, or fewer groups than folds.
    """
    options = options or FitOptions()
    _check_samples(samples, options.folds)
    names = features.token_feature_names(layers, heads)
    if samples[0].x.shape[1] != len(names):
        raise ValueError(
            f"the samples' token features are not those of a model of {layers} layers of "
            f"{heads} heads"
        )
    weights = DatasetWeights.of(
        [s.item.dataset for s in samples],
        [len(s.x) if s.item.spans_known else None for s in samples],
        balance=options.balance_datasets,
        extra=dict(options.dataset_weights),
    )
    copied = np.array([features.copied_share(list(s.words)) >= COPIED_KIND for s in samples])
    everyone = np.ones(len(samples), dtype=bool)
    tokens = _fit_token_model(samples, names, everyone, weights, options)
    copy_tokens = None
    if _enough(samples, copied, options, tokens=True):
        copy_tokens = _fit_token_model(samples, names, copied, weights, options)
    token_oof = list(tokens.oof)
    if copy_tokens is not None:  # the copied kind's stacking reads its own token model
        for i in np.flatnonzero(copied):
            token_oof[i] = copy_tokens.oof[i]
    rows = np.stack([s.response_x(p) for s, p in zip(samples, token_oof, strict=True)])
    other = _fit_kind(samples, rows, ~copied, weights, options, options.max_false_alarms)
    if other is None:
        raise ValueError("too few responses of the other kind (not copied) to fit a detector")
    copy = _fit_kind(samples, rows, copied, weights, options, options.max_copy_false_alarms)
    response_oof = other.oof.copy()
    if copy is not None:
        response_oof[copied] = copy.oof[copied]
        copy_model, copy_threshold = copy.model, copy.threshold
    else:  # too few copied responses: they take the other kind's model and threshold
        copy_model, copy_threshold = None, other.threshold
        response_oof[copied] = other.model.probability(rows[copied]) if copied.any() else []
    flagged = response_oof > np.where(copied, copy_threshold, other.threshold)
    span_threshold = _span_threshold(samples, token_oof, flagged, "other", ~copied)
    copy_span_threshold = _span_threshold(samples, token_oof, flagged, "copied", copied)
    detector = Detector(
        model=model,
        layers=layers,
        heads=heads,
        token=tokens.model,
        response=other.model,
        threshold=other.threshold,
        span_threshold=span_threshold,
        copy_threshold=copy_threshold,
        copy_span_threshold=copy_span_threshold,
        copy_response=copy_model,
        copy_token=None if copy_tokens is None else copy_tokens.model,
        meta={
            "samples": len(samples),
            "copied_samples": int(copied.sum()),
            "datasets": sorted({s.item.dataset for s in samples}),
            "options": {
                "token_C": list(options.token_C),
                "response_C": list(options.response_C),
                "folds": options.folds,
                "max_false_alarms": options.max_false_alarms,
                "max_copy_false_alarms": options.max_copy_false_alarms,
                "balance_datasets": options.balance_datasets,
                "dataset_weights": dict(options.dataset_weights),
                "seed": options.seed,
                "head_penalty": options.head_penalty,
            },
            "inner_auroc": {
                "other": other.auroc,
                "copied": None if copy is None else copy.auroc,
            },
            **(meta or {}),
        },
    )
    kinds = ["copied" if c else "other" for c in copied]
    oof_spans = [
        s.spans_at(p, detector.span_threshold_of(kind), kind) if f else []
        for s, p, f, kind in zip(samples, token_oof, flagged, kinds, strict=True)
    ]
    return detector, OutOfFold(token_oof, response_oof, flagged, oof_spans)


def cross_validate_detector(
    samples: Sequence[DetectorSample],
    *,
    model: str,
    layers: int,
    heads: int,
    options: FitOptions | None = None,
    progress: Callable[[list[int]], Iterable[int]] | None = None,
) -> OutOfFold:
    """Out-of-sample predictions for every sample: each outer grouped fold is predicted by a
    detector fitted (thresholds included, :func:`fit_detector`) on the other folds only."""
    options = options or FitOptions()
    _check_samples(samples, options.folds)
    labels = np.array([s.item.label for s in samples])
    groups = [s.group for s in samples]
    out = OutOfFold(
        token=[np.zeros(0)] * len(samples),
        probability=np.zeros(len(samples)),
        flagged=np.zeros(len(samples), dtype=bool),
        spans=[[] for _ in samples],
    )
    splits = list(_folds(labels, groups, FitOptions(folds=options.folds, seed=options.seed + 1)))
    steps = range(len(splits))
    for k in steps if progress is None else progress(list(steps)):
        train, test = splits[k]
        detector, _ = fit_detector(
            [samples[i] for i in train],
            model=model,
            layers=layers,
            heads=heads,
            options=options,
        )
        for i in test:
            s = samples[i]
            kind, model_, threshold = detector.kind_of(list(s.words))
            p = detector.token_model(kind).probability(s.x)
            prob = float(model_.probability(s.response_x(p)[None])[0])
            out.token[i] = p
            out.probability[i] = prob
            out.flagged[i] = prob > threshold
            span_threshold = detector.span_threshold_of(kind)
            out.spans[i] = s.spans_at(p, span_threshold, kind) if out.flagged[i] else []
    return out


@dataclass(frozen=True)
class _KindFit:
    """The response model of one kind, its out-of-fold probabilities (``[n]``, zero outside
    the kind), inner AUROC and threshold."""

    model: LinearModel
    oof: np.ndarray
    auroc: float
    threshold: float


def _fit_kind(
    samples: Sequence[DetectorSample],
    rows: np.ndarray,
    members: np.ndarray,
    dataset_weights: DatasetWeights,
    options: FitOptions,
    max_false_alarms: float,
) -> _KindFit | None:
    """The response model of the samples ``members`` (``[n]`` bool), ``C`` chosen by grouped
    cross-validation; None when they are too few (:func:`_enough`)."""
    if not _enough(samples, members, options, tokens=False):
        return None
    index = np.flatnonzero(members)
    labels = np.array([samples[i].item.label for i in index], dtype=bool)  # [n]
    groups = [samples[i].group for i in index]
    picked = [samples[i] for i in index]
    weights = dataset_weights.of_responses([s.item.dataset for s in picked])
    x = rows[index]
    best_C, best, best_oof = options.response_C[0], -np.inf, np.zeros(len(index))
    for C in options.response_C:
        oof = np.zeros(len(index))
        for train, test in _folds(labels, groups, options):
            fitted = LinearModel.fit(
                x[train], labels[train], features.RESPONSE_FEATURES, C=C, weight=weights[train]
            )
            oof[test] = fitted.probability(x[test])
        value = auroc(oof, labels)
        if value > best:
            best_C, best, best_oof = C, value, oof
    model = LinearModel.fit(x, labels, features.RESPONSE_FEATURES, C=best_C, weight=weights)
    full = np.zeros(len(samples))
    full[index] = best_oof
    return _KindFit(model, full, best, _threshold(picked, best_oof, max_false_alarms))


def _enough(
    samples: Sequence[DetectorSample], members: np.ndarray, options: FitOptions, *, tokens: bool
) -> bool:
    """Whether the samples ``members`` (``[n]`` bool) fit a kind's own model: at least
    :data:`MIN_CALIBRATION` responses of each class, as many groups as folds and, for a token
    model (``tokens``), a labelled unsupported span."""
    picked = [samples[i] for i in np.flatnonzero(members)]
    labels = np.array([s.item.label for s in picked], dtype=bool)  # [n]; none: []
    return (
        min(labels.sum(), (~labels).sum()) >= MIN_CALIBRATION
        and len({s.group for s in picked}) >= options.folds
        and (not tokens or any(s.item.spans_known and s.token_label.any() for s in picked))
    )


def _check_samples(samples: Sequence[DetectorSample], folds: int) -> None:
    if not samples:
        raise ValueError("no sample to fit a detector on")
    labels = {s.item.label for s in samples}
    if len(labels) < 2:
        raise ValueError("the samples hold one class only: a detector needs both")
    if not any(s.item.spans_known and s.token_label.any() for s in samples):
        raise ValueError("no sample has a labelled unsupported span: the token model needs one")
    if len({s.group for s in samples}) < folds:
        raise ValueError(f"fewer groups than folds ({folds})")


def _folds(
    labels: np.ndarray, groups: Sequence[str], options: FitOptions
) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import StratifiedGroupKFold

    split = StratifiedGroupKFold(options.folds, shuffle=True, random_state=options.seed)
    return list(split.split(np.zeros(len(labels)), labels, groups))


@dataclass(frozen=True)
class _TokenFit:
    """A token model and the ``[G]`` out-of-fold token probabilities of every sample (empty
    for samples it did not fit)."""

    model: LinearModel
    oof: list[np.ndarray]


def _fit_token_model(
    samples: Sequence[DetectorSample],
    names: list[str],
    members: np.ndarray,
    weights: DatasetWeights,
    options: FitOptions,
) -> _TokenFit:
    """The token model of the samples ``members`` (``[n]`` bool), ``C`` chosen by
    :func:`_choose_token_model` over them."""
    index = np.flatnonzero(members)
    picked = [samples[i] for i in index]
    C, oof = _choose_token_model(picked, names, weights, options)
    full = [np.zeros(0)] * len(samples)
    for i, p in zip(index, oof, strict=True):
        full[i] = p
    return _TokenFit(_fit_tokens(picked, names, range(len(picked)), C, weights, options), full)


def _fit_tokens(
    samples: Sequence[DetectorSample],
    names: list[str],
    chosen: Iterable[int],
    C: float,
    weights: DatasetWeights,
    options: FitOptions,
) -> LinearModel:
    picked = [samples[i] for i in chosen if samples[i].item.spans_known]
    x = np.vstack([s.x for s in picked])
    y = np.concatenate([s.token_label for s in picked])
    weight = weights.of_tokens([s.item.dataset for s in picked], [len(s.x) for s in picked])
    penalty = np.where(features.head_columns(names), options.head_penalty, 1.0)
    return LinearModel.fit(x, y, names, C=C, weight=weight, penalty=penalty)


def _choose_token_model(
    samples: Sequence[DetectorSample],
    names: list[str],
    weights: DatasetWeights,
    options: FitOptions,
) -> tuple[float, list[np.ndarray]]:
    """The token model's ``C`` of best out-of-fold token AUROC (over the span-labelled
    samples) and its out-of-fold probabilities for every sample."""
    labels = np.array([s.item.label for s in samples])
    splits = _folds(labels, [s.group for s in samples], options)
    best_C, best, best_oof = options.token_C[0], -np.inf, [np.zeros(0)] * len(samples)
    for C in options.token_C:
        oof = [np.zeros(0)] * len(samples)
        for train, test in splits:
            fitted = _fit_tokens(samples, names, train, C, weights, options)
            for i in test:
                oof[i] = fitted.probability(samples[i].x)
        known = [i for i, s in enumerate(samples) if s.item.spans_known]
        value = auroc(
            np.concatenate([oof[i] for i in known]),
            np.concatenate([samples[i].token_label for i in known]),
        )
        if value > best:
            best_C, best, best_oof = C, value, oof
    return best_C, best_oof


def _threshold(
    samples: Sequence[DetectorSample], probability: np.ndarray, max_false_alarms: float
) -> float:
    """:func:`false_alarm_threshold` of the faithful responses among ``samples``."""
    by_dataset: dict[str, list[float]] = {}
    for s, p in zip(samples, probability, strict=True):
        if not s.item.label:
            by_dataset.setdefault(s.item.dataset, []).append(float(p))
    return false_alarm_threshold(list(by_dataset.values()), max_false_alarms)


def _span_threshold(
    samples: Sequence[DetectorSample],
    token: list[np.ndarray],
    flagged: np.ndarray,
    kind: str,
    among: np.ndarray,
) -> float:
    """The span threshold of ``kind`` of largest character-level span F1 (out of fold) over
    the span-labelled samples ``among`` (``[n]`` bool; all span-labelled samples when none of
    them is), with the span rule of ``kind`` (:mod:`.detector_spans`)."""
    labelled = [i for i, s in enumerate(samples) if s.item.spans_known]
    known = [i for i in labelled if among[i]] or labelled
    values = np.concatenate(
        [unit_values(kind, samples[i].item.response, samples[i].offsets, token[i]) for i in known]
    )
    candidates = np.unique(np.quantile(values, np.linspace(0.5, 0.995, 60)))
    gold = [list(samples[i].item.spans) for i in known]
    best_t, best = float(candidates[-1]), -1.0
    for t in candidates:
        predicted = [
            samples[i].spans_at(token[i], float(t), kind) if flagged[i] else [] for i in known
        ]
        f1 = char_prf(predicted, gold).f1
        if not np.isnan(f1) and f1 > best:
            best_t, best = float(t), f1
    return best_t
