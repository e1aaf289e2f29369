"""rcstat.grounding.training: measuring labelled responses on the tiny Llama, and fitting a
detector on synthetic samples with a planted signal (the token column ``novel`` is 1 exactly
on the labelled span of an unsupported response).

Oracles: token labels by brute force over the token offsets; the fitted detector must rank
held-out synthetic responses almost perfectly; its thresholds are checked against the
out-of-fold probabilities it returns (a brute-force smallest threshold per dataset); the
outer cross-validation is checked by recording what every inner fit saw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from rcstat.grounding import Measurer
from rcstat.grounding.detector import COPIED_KIND, Detector, LinearModel
from rcstat.grounding.detector_features import token_feature_names
from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.training import (
    MIN_CALIBRATION,
    DetectorSample,
    FitOptions,
    LabelledResponse,
    OutOfFold,
    cross_validate_detector,
    fit_detector,
    measure_samples,
)
from rcstat.metrics.ranking import auroc
from rcstat.metrics.spans import char_prf
from tests._tiny_models import one_thread, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

LAYERS, HEADS = 1, 2
NAMES = token_feature_names(LAYERS, HEADS)
NOVEL = NAMES.index("novel")
NUMBER = NAMES.index("number")
FAST = FitOptions(token_C=(0.1, 1.0), response_C=(0.3, 3.0), folds=3)


@pytest.fixture(scope="module", autouse=True)
def _single_thread() -> Any:
    yield from one_thread()


def _sample(
    rng: np.random.Generator,
    key: str,
    *,
    label: bool,
    dataset: str = "a",
    group: str | None = None,
    copied: bool = False,
    spans_known: bool = True,
    signal: int = NOVEL,
) -> DetectorSample:
    """A response of 6 to 12 one-token words in clauses of two (``w0 w1, w2 w3, …``); an
    unsupported one has a labelled clause whose two tokens have column ``signal`` (default
    ``novel``) = 1 and the others 0 (every other column is noise, ``novel`` 0)."""
    n = int(rng.integers(6, 13))
    texts = [f"w{k}" for k in range(n)]
    after = [", " if k % 2 else " " for k in range(n - 1)] + [""]
    response = "".join(t + a for t, a in zip(texts, after, strict=True))
    starts = [
        sum(len(t) + len(a) for t, a in zip(texts[:k], after, strict=False)) for k in range(n)
    ]
    offsets = np.array([(s, s + len(t)) for s, t in zip(starts, texts, strict=True)])
    x = rng.normal(size=(n, len(NAMES)))
    x[:, [NOVEL, signal]] = 0.0
    token_label = np.zeros(n, dtype=bool)
    spans: tuple[tuple[int, int], ...] = ()
    if label:
        k = 2 * int(rng.integers(0, n // 2))
        x[k : k + 2, signal] = 1.0
        token_label[k : k + 2] = True
        spans = ((int(offsets[k, 0]), int(offsets[k + 1, 1])),)
    words = tuple(
        ResponseWord(int(s), int(e), t, not x[k, NOVEL], bool(k), copied)
        for k, ((s, e), t) in enumerate(zip(offsets, texts, strict=True))
    )
    item = LabelledResponse(
        id=key,
        context="the context",
        question=None,
        response=response,
        label=label,
        spans=spans if spans_known else (),
        spans_known=spans_known,
        group=group if group is not None else key,
        dataset=dataset,
    )
    return DetectorSample(
        item=item,
        x=x,
        token_label=token_label if spans_known else np.zeros(n, dtype=bool),
        offsets=offsets,
        nll=rng.gamma(2.0, size=n),
        context_tokens=40,
        words=words,
    )


def _samples(
    seed: int,
    per_class: int = 26,
    *,
    copied: int = 0,
    copied_unsupported: int | None = None,
    copied_signal: int = NOVEL,
) -> list[DetectorSample]:
    """``per_class`` faithful and unsupported responses of the other kind over datasets a and
    b (two responses a group), and ``copied`` faithful plus ``copied_unsupported`` (default
    ``copied``) unsupported ones of the copied kind (their spans planted in column
    ``copied_signal``)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(2 * per_class):
        out.append(
            _sample(
                rng,
                f"s{seed}:{i}",
                label=i % 2 == 1,
                dataset="a" if i % 4 < 2 else "b",
                group=f"g{seed}:{i // 2}",
            )
        )
    bad = copied if copied_unsupported is None else copied_unsupported
    for i in range(copied + bad):
        out.append(
            _sample(
                rng,
                f"c{seed}:{i}",
                label=i >= copied,
                dataset="a",
                group=f"c{seed}:{i // 2}",
                copied=True,
                signal=copied_signal,
            )
        )
    return out


@pytest.fixture(scope="module")
def fitted() -> tuple[list[DetectorSample], Detector, OutOfFold]:
    samples = _samples(0, per_class=30)  # 15 faithful a dataset: 3 may be flagged
    detector, oof = fit_detector(
        samples, model="synthetic", layers=LAYERS, heads=HEADS, options=FAST
    )
    return samples, detector, oof


def _predict(detector: Detector, sample: DetectorSample) -> tuple[float, np.ndarray, float]:
    kind, model, threshold = detector.kind_of(list(sample.words))
    p = detector.token_model(kind).probability(sample.x)
    return float(model.probability(sample.response_x(p)[None])[0]), p, threshold


def _spans(detector: Detector, sample: DetectorSample, p: np.ndarray) -> list[tuple[int, int]]:
    """The spans of a flagged ``sample``: its kind's rule at its kind's span threshold."""
    kind = detector.kind_of(list(sample.words))[0]
    return sample.spans_at(p, detector.span_threshold_of(kind), kind)


# ------------------------------------------------------------------------------- fitting


def test_the_fitted_detector_separates_held_out_samples(fitted) -> None:  # type: ignore[no-untyped-def]
    _, detector, _ = fitted
    assert isinstance(detector, Detector) and detector.layers == LAYERS
    assert detector.model == "synthetic" and detector.token.features == tuple(NAMES)
    held_out = _samples(7, per_class=15)
    predicted = [_predict(detector, s) for s in held_out]
    labels = np.array([s.item.label for s in held_out])
    assert auroc(np.array([p for p, _, _ in predicted]), labels) > 0.97
    tokens = np.concatenate([p for _, p, _ in predicted])
    assert auroc(tokens, np.concatenate([s.token_label for s in held_out])) > 0.97
    # flagged responses get spans on their labelled words
    found = [
        _spans(detector, s, p) if prob > t else []
        for s, (prob, p, t) in zip(held_out, predicted, strict=True)
    ]
    assert char_prf(found, [list(s.item.spans) for s in held_out]).f1 > 0.6


def test_thresholds_hold_the_false_alarms_of_every_dataset(fitted) -> None:  # type: ignore[no-untyped-def]
    samples, detector, oof = fitted
    options = FAST
    assert 0.0 <= detector.span_threshold <= 1.0 and 0.0 <= detector.copy_span_threshold <= 1.0
    assert detector.copy_response is None  # no copied response: the other kind's model
    assert detector.copy_threshold == detector.threshold
    assert detector.meta["samples"] == len(samples) and detector.meta["copied_samples"] == 0
    assert detector.meta["datasets"] == ["a", "b"]
    assert len(oof.token) == len(samples) and oof.probability.shape == (len(samples),)
    for s, p in zip(samples, oof.token, strict=True):
        assert p.shape == (len(s.x),) and ((0 <= p) & (p <= 1)).all()
    np.testing.assert_array_equal(oof.flagged, oof.probability > detector.threshold)
    smallest = []
    for dataset in ("a", "b"):
        faithful = np.array(
            [
                p
                for s, p in zip(samples, oof.probability, strict=True)
                if s.item.dataset == dataset and not s.item.label
            ]
        )
        assert len(faithful) == 15
        assert (faithful > detector.threshold).mean() <= options.max_false_alarms
        # brute force: the smallest value that flags at most that share of them
        smallest.append(
            min(v for v in faithful if (faithful > v).mean() <= options.max_false_alarms)
        )
    assert detector.threshold == max(smallest)
    for s, f, spans in zip(samples, oof.flagged, oof.spans, strict=True):
        assert bool(spans) == bool(f)  # spans exactly for the flagged responses
        assert all(0 <= a < b <= len(s.item.response) for a, b in spans)


def test_a_copied_kind_gets_its_own_model_with_enough_of_each_class() -> None:
    assert MIN_CALIBRATION == 20
    few = _samples(1, copied=MIN_CALIBRATION, copied_unsupported=MIN_CALIBRATION - 1)
    detector, oof = fit_detector(few, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    assert detector.copy_response is None and detector.copy_threshold == detector.threshold
    assert detector.copy_token is None and detector.token_model("copied") is detector.token
    assert detector.meta["copied_samples"] == 2 * MIN_CALIBRATION - 1
    assert detector.meta["inner_auroc"]["copied"] is None
    copied = np.array([sum(w.copied for w in s.words) / len(s.words) >= COPIED_KIND for s in few])
    assert copied.sum() == 39
    # the copied responses are judged by the other kind's model, out of fold for the others
    np.testing.assert_array_equal(oof.flagged, oof.probability > detector.threshold)
    enough = _samples(1, copied=MIN_CALIBRATION)
    detector, oof = fit_detector(
        enough,
        model="m",
        layers=LAYERS,
        heads=HEADS,
        options=FitOptions(**{**vars(FAST), "max_copy_false_alarms": 0.1}),
    )
    assert detector.copy_response is not None and detector.copy_token is not None
    assert detector.meta["inner_auroc"]["copied"] > 0.9
    kinds = np.array([detector.kind_of(list(s.words))[0] == "copied" for s in enough])
    assert kinds.sum() == 2 * MIN_CALIBRATION
    faithful = oof.probability[kinds & ~np.array([s.item.label for s in enough])]
    assert (faithful > detector.copy_threshold).mean() <= 0.1
    np.testing.assert_array_equal(
        oof.flagged, oof.probability > np.where(kinds, detector.copy_threshold, detector.threshold)
    )


def test_the_copied_kind_has_a_token_model_of_its_own() -> None:
    """The copied responses' spans are planted in another column (``number``) than the
    others' (``novel``): their own token model learns it from them alone."""
    samples = _samples(11, copied=MIN_CALIBRATION, copied_signal=NUMBER)
    detector, oof = fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    assert detector.copy_token is not None and detector.copy_response is not None
    assert detector.token_model("copied") is detector.copy_token
    assert detector.copy_token.features == detector.token.features == tuple(NAMES)
    # fitted on the copied responses alone: other responses of the other kind change nothing
    other = [s for s in _samples(12) if not s.words[0].copied]
    again, _ = fit_detector(
        other + [s for s in samples if s.words[0].copied],
        model="m",
        layers=LAYERS,
        heads=HEADS,
        options=FAST,
    )
    assert again.copy_token is not None  # equal up to rounding: the weights' scale cancels
    np.testing.assert_allclose(again.copy_token.coef, detector.copy_token.coef, rtol=1e-9)
    assert again.copy_token.intercept == pytest.approx(detector.copy_token.intercept, rel=1e-9)
    assert again.token.to_dict() != detector.token.to_dict()
    # each kind's tokens are ranked by its own model, on held-out samples
    held_out = _samples(13, per_class=10, copied=10, copied_signal=NUMBER)
    for kind in ("copied", "other"):
        chosen = [s for s in held_out if (s.words[0].copied) == (kind == "copied")]
        p = np.concatenate([detector.token_model(kind).probability(s.x) for s in chosen])
        assert auroc(p, np.concatenate([s.token_label for s in chosen])) > 0.97
    # and the copied kind's model never saw a ``novel`` span: the other kind's are chance to it
    chosen = [s for s in held_out if not s.words[0].copied]
    p = np.concatenate([detector.copy_token.probability(s.x) for s in chosen])
    assert auroc(p, np.concatenate([s.token_label for s in chosen])) < 0.7
    # the copied responses' out-of-fold token probabilities come from their own model's folds:
    # they rank their spans as well as held-out ones
    copied = [i for i, s in enumerate(samples) if s.words[0].copied]
    tokens = np.concatenate([oof.token[i] for i in copied])
    assert auroc(tokens, np.concatenate([samples[i].token_label for i in copied])) > 0.97


def test_every_fit_weighs_a_dataset_as_the_whole_training_set_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dataset a holds 26 responses of the other kind and 40 copied ones, b 26 of the other
    kind: balanced over all 92, a response of a weighs 46/66 and one of b 46/26, so in the
    other kind's fit (26 of each) a's weigh 26/66 of b's — not the same, as balancing inside
    that fit would make them — and each model's weights have a mean of 1."""
    samples = _samples(14, copied=MIN_CALIBRATION)
    seen: list[tuple[int, np.ndarray]] = []
    original = LinearModel.fit.__func__  # type: ignore[attr-defined]

    def recording(cls: type, x: np.ndarray, y: np.ndarray, features: Any, **kw: Any) -> Any:
        seen.append((len(x), np.asarray(kw["weight"])))
        return original(cls, x, y, features, **kw)

    monkeypatch.setattr(LinearModel, "fit", classmethod(recording))
    fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    other = [s for s in samples if not s.words[0].copied]
    final = [w for n, w in seen if n == len(other)][-1]  # the other kind's response model
    of_a = np.array([s.item.dataset == "a" for s in other])
    assert of_a.sum() == 26 and (~of_a).sum() == 26
    np.testing.assert_allclose(final[of_a] / final[~of_a][0], 26 / 66)
    copied = len(samples) - len(other)
    tokens = sum(len(s.x) for s in samples), sum(len(s.x) for s in samples if s.words[0].copied)
    finals = [w for n, w in seen if n in (len(other), copied, *tokens)]
    assert len(finals) >= 4  # the two token models and the two response models
    for weight in finals:
        assert weight.mean() == pytest.approx(1.0)


def test_the_token_models_hold_every_heads_columns_back_by_head_penalty() -> None:
    """Each token model's head columns (and only they) are fitted as if divided by
    ``head_penalty``: their scale is that many times their standard deviation over the
    model's training tokens; the detector records the option."""
    samples = _samples(14, copied=MIN_CALIBRATION)
    heads = np.array([":L0H" in name for name in NAMES])
    assert heads.sum() == 2 * LAYERS * HEADS
    options = FitOptions(**{**vars(FAST), "head_penalty": 7.0})
    held, _ = fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=options)
    assert FAST.head_penalty == 1.0
    plain, _ = fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    assert held.meta["options"]["head_penalty"] == 7.0
    for kind in ("other", "copied"):
        a, b = held.token_model(kind), plain.token_model(kind)
        np.testing.assert_allclose(a.scale[heads], 7.0 * b.scale[heads])
        np.testing.assert_array_equal(a.scale[~heads], b.scale[~heads])


def test_responses_without_labelled_spans_train_the_response_model_only() -> None:
    samples = _samples(2)
    rng = np.random.default_rng(3)
    extra = [
        _sample(rng, f"x{i}", label=True, dataset="c", group=f"x{i}", spans_known=False)
        for i in range(6)
    ]
    detector, oof = fit_detector(
        samples + extra, model="m", layers=LAYERS, heads=HEADS, options=FAST
    )
    assert detector.meta["datasets"] == ["a", "b", "c"]
    assert len(oof.token) == len(samples) + 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: [], "no sample to fit a detector on"),
        (lambda s: [x for x in s if x.item.label], "one class only"),
        (
            lambda s: [
                x
                if not x.item.label
                else _sample(np.random.default_rng(0), x.item.id, label=True, spans_known=False)
                for x in s
            ],
            "no sample has a labelled unsupported span",
        ),
        (lambda s: s[:4], r"fewer groups than folds \(3\)"),
        (lambda s: s[:30], "too few responses of the other kind"),
    ],
)
def test_fit_refusals(change: Any, message: str) -> None:
    samples = _samples(4, per_class=22)
    with pytest.raises(ValueError, match=message):
        fit_detector(change(samples), model="m", layers=LAYERS, heads=HEADS, options=FAST)


@pytest.mark.parametrize("layers, heads", [(2, HEADS), (LAYERS, 3)])
def test_fit_refuses_features_of_another_model_shape(layers: int, heads: int) -> None:
    with pytest.raises(ValueError, match=f"not those of a model of {layers} layers of {heads}"):
        fit_detector(_samples(4, per_class=22), model="m", layers=layers, heads=heads, options=FAST)


def test_fit_is_deterministic() -> None:
    samples = _samples(5, per_class=22)
    a, _ = fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    b, _ = fit_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    assert a.to_dict() == b.to_dict()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"token_C": ()}, "token_C and response_C must be non-empty and positive"),
        ({"response_C": (1.0, 0.0)}, "token_C and response_C must be non-empty and positive"),
        ({"token_C": (-1.0,)}, "must be non-empty and positive"),
        ({"folds": 1}, "folds must be an integer >= 2, got 1"),
        ({"folds": True}, "folds must be an integer >= 2, got True"),
        ({"folds": 2.5}, "folds must be an integer >= 2, got 2.5"),
        ({"max_false_alarms": 0.0}, r"max_false_alarms must be in \(0, 1\), got 0.0"),
        ({"max_false_alarms": 1.0}, r"max_false_alarms must be in \(0, 1\)"),
        ({"max_copy_false_alarms": 1.5}, r"max_copy_false_alarms must be in \(0, 1\)"),
        ({"head_penalty": 0.5}, "head_penalty must be finite and >= 1, got 0.5"),
        ({"head_penalty": math.inf}, "head_penalty must be finite and >= 1, got inf"),
        ({"head_penalty": math.nan}, "head_penalty must be finite and >= 1, got nan"),
    ],
)
def test_fit_options_validation(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FitOptions(**options)


# ----------------------------------------------------------------------- cross-validation


@pytest.mark.parametrize("copied", [0, 33])
def test_cross_validation_predicts_each_sample_from_a_fit_that_never_saw_it(
    monkeypatch: pytest.MonkeyPatch, copied: int
) -> None:
    """With 33 copied responses of each class (their spans in another column), every inner
    fit has a copied kind of its own, whose token model judges them."""
    import rcstat.grounding.training as training

    samples = _samples(6, per_class=33, copied=copied, copied_signal=NUMBER)
    seen: list[tuple[set[str], Detector]] = []
    original = training.fit_detector

    def recording(chosen: list[DetectorSample], **kwargs: Any) -> Any:
        detector, oof = original(chosen, **kwargs)
        seen.append(({s.item.id for s in chosen}, detector))
        return detector, oof

    monkeypatch.setattr(training, "fit_detector", recording)
    out = cross_validate_detector(samples, model="m", layers=LAYERS, heads=HEADS, options=FAST)
    assert len(seen) == FAST.folds
    ids = [s.item.id for s in samples]
    for i, s in enumerate(samples):
        held_out = [k for k, (train, _) in enumerate(seen) if s.item.id not in train]
        assert len(held_out) == 1  # predicted by exactly one fit
        train, detector = seen[held_out[0]]
        # its whole group sat out of that fit
        assert not any(x.item.id in train for x in samples if x.group == s.group)
        probability, p, threshold = _predict(detector, s)
        np.testing.assert_allclose(out.token[i], p)
        assert out.probability[i] == pytest.approx(probability)
        assert out.flagged[i] == (probability > threshold)
        want = _spans(detector, s, p) if out.flagged[i] else []
        assert out.spans[i] == want
    assert sum(len(train) for train, _ in seen) == (FAST.folds - 1) * len(ids)
    labels = np.array([s.item.label for s in samples])
    assert auroc(out.probability, labels) > 0.95
    assert all((d.copy_token is not None) == bool(copied) for _, d in seen)
    steps: list[list[int]] = []
    again = cross_validate_detector(
        samples,
        model="m",
        layers=LAYERS,
        heads=HEADS,
        options=FAST,
        progress=lambda k: steps.append(k) or k,
    )
    assert steps == [[0, 1, 2]]
    np.testing.assert_array_equal(again.probability, out.probability)


def test_cross_validation_refusals() -> None:
    with pytest.raises(ValueError, match="no sample"):
        cross_validate_detector([], model="m", layers=LAYERS, heads=HEADS, options=FAST)
    with pytest.raises(ValueError, match=r"fewer groups than folds \(3\)"):
        cross_validate_detector(
            _samples(8)[:4], model="m", layers=LAYERS, heads=HEADS, options=FAST
        )


# ------------------------------------------------------------------- measuring (tiny Llama)

CONTEXT = "The bridge was built in 1889 by a team of engineers. Paris is the capital of France."


def test_measure_samples_on_the_tiny_model() -> None:
    measurer = Measurer(tiny_model("llama"), make_tiny_tokenizer(), prior=False)
    response = "The bridge was built in 1925 by engineers in Lyon."
    items = [
        LabelledResponse(
            "wrong", CONTEXT, None, response, True, ((24, 28), (45, 49)), group="g", dataset="d"
        ),
        LabelledResponse("right", CONTEXT, "Who built it?", "Engineers built it in 1889.", False),
        LabelledResponse("empty", CONTEXT, None, "   ", False),
        LabelledResponse("long", "The bridge was built. " * 80, None, "It was built.", False),
    ]
    called: list[list[str]] = []

    def progress(chosen: list[LabelledResponse]) -> list[LabelledResponse]:
        called.append([c.id for c in chosen])
        return chosen

    samples, errors = measure_samples(measurer, iter(items), progress=progress)
    assert called == [["wrong", "right", "empty", "long"]]
    assert [s.item.id for s in samples] == ["wrong", "right"]
    assert [e[0] for e in errors] == ["empty", "long"]
    assert errors[0][1] == "ValueError: response is empty or whitespace only"
    assert errors[1][1].startswith("ValueError: the input has") and "window is 256" in errors[1][1]
    wrong, right = samples
    assert response[24:28] == "1925" and response[45:49] == "Lyon"
    for sample in samples:
        m = measurer.measure(sample.item.context, sample.item.response, sample.item.question)
        np.testing.assert_array_equal(sample.offsets, m.token_spans())
        np.testing.assert_allclose(sample.nll, m.nll)
        assert sample.x.shape == (len(m.nll), len(token_feature_names(3, 4)))
        first, last = m.example.token_span("context")
        assert sample.context_tokens == last - first
        assert list(sample.words) == Lexicon(sample.item.context).words_of(sample.item.response)
        labels = [
            any(s < end and e > start for start, end in sample.item.spans)
            for s, e in sample.offsets
        ]
        assert sample.token_label.tolist() == labels
    assert wrong.token_label.any() and not right.token_label.any()
    assert wrong.group == "d:g" and right.group == ":right"
    covered = "".join(
        response[s:e] for (s, e), y in zip(wrong.offsets, wrong.token_label, strict=True) if y
    )
    assert "1925" in covered and "Lyon" in covered and "bridge" not in covered
    assert not math.isnan(float(wrong.x.sum()))
