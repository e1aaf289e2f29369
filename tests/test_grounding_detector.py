"""The trained grounding detector: its linear models (against scikit-learn), its spans (a
per-word brute force under hypothesis), its JSON file, its features on a tiny-model pass
(each column against its definition), and the Grounder's detector mode (verdict, threshold,
spans and sentences agree) beside the zero-shot spans.

The detectors here are written by hand for the tiny Llama (3 layers): the token model reads
the ``novel`` column only, the response model ``p_max`` only, so their verdicts are known.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from rcstat.grounding import Grounder, Grounding, HeadProfile, Measurement, Measurer
from rcstat.grounding.detector import COPIED_KIND, Detector, LinearModel, shipped_detector
from rcstat.grounding.detector_features import (
    NLL_CAP,
    RESPONSE_FEATURES,
    context_tokens,
    head_columns,
    novel_facts,
    response_features,
    token_feature_names,
    token_features,
)
from rcstat.grounding.detector_spans import draw_spans
from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.result import UnsupportedSpan
from rcstat.grounding.score import response_words, word_scores
from tests._tiny_models import one_thread, tiny_model
from tests._tiny_tokenizer import make_tiny_tokenizer

_WORD = re.compile(r"\w+")
LAYERS, HEADS = 3, 4
CONTEXT = (
    "The river flows through the city. The bridge was built in 1889 by a team of engineers. "
    "Paris is the capital of France."
)
QUESTION = "Who built the bridge?"
#: Responses of both kinds: (text, copied kind?), the kind counted by hand (4-word runs).
RESPONSES = [
    ("The bridge was built in 1925. It crosses the river in Lyon!", False),
    ("Engineers built it, in 1889.", False),
    ("The bridge was built in 1889 by a team of engineers.", True),
    ("The bridge was built in 1925 by a team of engineers.", True),
]


@pytest.fixture(scope="module", autouse=True)
def _single_thread() -> Any:
    yield from one_thread()


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_model("llama"), make_tiny_tokenizer()


@pytest.fixture(scope="module")
def profile() -> HeadProfile:
    rng = np.random.default_rng(0)
    return HeadProfile(
        "tiny-llama",
        rng.uniform(0.2, 0.9, size=(LAYERS, 4)),
        threshold=0.05,
        quantile=0.1,
        fraction=0.5,
        copy_values=rng.uniform(0.0, 0.5, size=(LAYERS, 4)),
    )


@pytest.fixture(scope="module")
def measured(tiny) -> Measurement:  # type: ignore[no-untyped-def]
    model, tok = tiny
    response = "In 1925 the Mayor met 3 engineers... Lyon, the capital, was NOT built in 1889!"
    return Measurer(model, tok, prior=False).measure(CONTEXT, response, QUESTION)


def _linear(features: list[str] | tuple[str, ...], weights: dict[str, float], **kw: Any) -> Any:
    coef = np.array([weights.get(f, 0.0) for f in features])
    mean = np.array([kw.get("means", {}).get(f, 0.0) for f in features])
    scale = np.array([kw.get("scales", {}).get(f, 1.0) for f in features])
    return LinearModel(tuple(features), mean, scale, coef, kw.get("intercept", 0.0))


def _detector(
    layers: int = LAYERS,
    heads: int = HEADS,
    *,
    threshold: float = 0.5,
    copy_threshold: float = 0.5,
    span_threshold: float = 0.5,
    copy_span_threshold: float = 0.5,
    copy_response: bool = False,
    copy_token: bool = False,
) -> Detector:
    """p_j = σ(4·novel − 2) (0.88 on a novel word, 0.12 otherwise); P = σ(10·(p_max − 0.5));
    the copied kind's token model (``copy_token``): p_j = σ(2·novel − 1) (0.73 and 0.27)."""
    token = _linear(token_feature_names(layers, heads), {"novel": 4.0}, intercept=-2.0)
    response = _linear(
        RESPONSE_FEATURES, {"p_max": 1.0}, means={"p_max": 0.5}, scales={"p_max": 0.1}
    )
    copy = None
    if copy_response:
        copy = _linear(
            RESPONSE_FEATURES, {"p_max": 1.0}, means={"p_max": 0.3}, scales={"p_max": 0.1}
        )
    return Detector(
        model="tiny",
        layers=layers,
        heads=heads,
        token=token,
        response=response,
        threshold=threshold,
        span_threshold=span_threshold,
        copy_threshold=copy_threshold,
        copy_span_threshold=copy_span_threshold,
        copy_response=copy,
        copy_token=_linear(token_feature_names(layers, heads), {"novel": 2.0}, intercept=-1.0)
        if copy_token
        else None,
        meta={"datasets": ["by hand"]},
    )


# ----------------------------------------------------------------------------- LinearModel


def test_linear_model_by_hand() -> None:
    model = LinearModel(("a", "b"), np.array([1.0, 0.0]), np.array([2.0, 1.0]), [2.0, -1.0], 0.5)
    x = np.array([[3.0, 1.0], [1.0, 0.0]])
    z = np.array([(3 - 1) / 2 * 2 - 1 + 0.5, 0.5])
    np.testing.assert_allclose(model.probability(x), 1 / (1 + np.exp(-z)), rtol=1e-15)
    assert math.isnan(model.C)
    # far out: no overflow, 0 and 1 at the ends
    far = model.probability(np.array([[1e6, 0.0], [-1e6, 0.0]]))
    assert far[0] == 1.0 and 0.0 <= far[1] < 1e-200


def test_linear_model_equals_sklearn_on_standardised_data() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 4)) * [1.0, 5.0, 0.1, 1.0] + [0.0, 3.0, -2.0, 0.0]
    y = (x[:, 0] + 0.2 * x[:, 1] + rng.normal(size=80) > 0.5).astype(int)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    z = (x - mean) / scale
    reference = LogisticRegression(C=0.7).fit(z, y)
    model = LinearModel(
        ("a", "b", "c", "d"), mean, scale, reference.coef_[0], float(reference.intercept_[0])
    )
    np.testing.assert_allclose(model.probability(x), reference.predict_proba(z)[:, 1], atol=1e-12)


def test_linear_model_fit_standardises_and_balances_the_classes() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(60, 3)) * [2.0, 1.0, 1.0] + [1.0, 0.0, 0.0]
    x[:, 2] = 4.0  # a constant column: scale 1, not 0
    y = x[:, 0] + rng.normal(size=60) > 2.2  # few positives
    fitted = LinearModel.fit(x, y, ["a", "b", "c"], C=0.5)
    np.testing.assert_allclose(fitted.mean, x.mean(axis=0))
    np.testing.assert_allclose(fitted.scale, [x[:, 0].std(), x[:, 1].std(), 1.0])
    assert fitted.C == 0.5 and fitted.features == ("a", "b", "c")
    n, positives = len(y), int(y.sum())
    weights = {False: n / (2 * (n - positives)), True: n / (2 * positives)}
    z = (x - fitted.mean) / fitted.scale
    reference = LogisticRegression(C=0.5, class_weight=weights, max_iter=5000).fit(z, y)
    np.testing.assert_allclose(fitted.probability(x), reference.predict_proba(z)[:, 1], atol=1e-6)
    # sample weights reach the fit: a zero weight removes a row
    w = np.ones(60)
    w[:10] = 0.0
    weighted = LinearModel.fit(x, y, ["a", "b", "c"], C=0.5, weight=w)
    assert not np.allclose(weighted.coef, fitted.coef)


def test_linear_model_penalty_holds_columns_back_as_a_scaled_fit_does() -> None:
    """A column of penalty ``k`` is the column divided by ``k`` before the fit (its stored
    scale ``k`` times its standard deviation): the same model as scikit-learn's on those
    columns; all ones is the plain fit; a large one shrinks that column's weight."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(120, 3))
    y = x[:, 0] + x[:, 1] + rng.normal(size=120) > 0
    plain = LinearModel.fit(x, y, ["a", "b", "c"], C=0.5)
    same = LinearModel.fit(x, y, ["a", "b", "c"], C=0.5, penalty=np.ones(3))
    np.testing.assert_array_equal(same.coef, plain.coef)
    np.testing.assert_array_equal(same.scale, plain.scale)
    held = LinearModel.fit(x, y, ["a", "b", "c"], C=0.5, penalty=np.array([1.0, 10.0, 1.0]))
    np.testing.assert_allclose(held.scale, x.std(axis=0) * [1.0, 10.0, 1.0])
    z = (x - x.mean(axis=0)) / (x.std(axis=0) * [1.0, 10.0, 1.0])
    reference = LogisticRegression(C=0.5, class_weight="balanced", max_iter=5000).fit(z, y)
    np.testing.assert_allclose(held.probability(x), reference.predict_proba(z)[:, 1], atol=1e-6)
    # b's weight on its raw values shrinks to less than half
    assert abs(held.coef[1] / held.scale[1]) < 0.5 * abs(plain.coef[1] / plain.scale[1])
    for bad in (np.ones(2), np.array([1.0, 0.5, 1.0]), np.array([1.0, np.nan, 1.0])):
        with pytest.raises(ValueError, match=r"penalty must be \[3\] values >= 1"):
            LinearModel.fit(x, y, ["a", "b", "c"], C=0.5, penalty=bad)


def test_linear_model_round_trip_and_refusals() -> None:
    model = LinearModel(("a", "b"), [0.0, 1.0], [1.0, 2.0], [0.5, -0.5], -1.0, 0.3)
    again = LinearModel.from_dict(json.loads(json.dumps(model.to_dict())), "here")
    assert again.features == model.features and again.C == 0.3
    for name in ("mean", "scale", "coef"):
        np.testing.assert_array_equal(getattr(again, name), getattr(model, name))
    assert again.intercept == model.intercept
    unfitted = LinearModel(("a",), [0.0], [1.0], [1.0], 0.0)
    assert unfitted.to_dict()["C"] is None
    assert math.isnan(LinearModel.from_dict(unfitted.to_dict(), "x").C)
    with pytest.raises(ValueError, match="mean has 3 entries for 2 features"):
        LinearModel(("a", "b"), [0.0, 0.0, 0.0], [1.0, 1.0], [1.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="coef holds a non-finite value"):
        LinearModel(("a",), [0.0], [1.0], [math.nan], 0.0)
    with pytest.raises(ValueError, match="mean holds a non-finite value"):
        LinearModel(("a",), [math.inf], [1.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="scale must be > 0"):
        LinearModel(("a", "b"), [0.0, 0.0], [1.0, 0.0], [1.0, 1.0], 0.0)
    with pytest.raises(ValueError, match="scale must be > 0"):
        LinearModel(("a",), [0.0], [-1.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="intercept must be finite"):
        LinearModel(("a",), [0.0], [1.0], [1.0], math.inf)
    with pytest.raises(ValueError, match=r"x must be \[n, 2\], got shape \(3,\)"):
        model.probability(np.zeros(3))
    with pytest.raises(ValueError, match=r"x must be \[n, 2\], got shape \(1, 3\)"):
        model.probability(np.zeros((1, 3)))
    with pytest.raises(ValueError, match="features hold a non-finite value"):
        model.probability(np.array([[0.0, math.nan]]))
    with pytest.raises(ValueError, match="here: expected an object, got list"):
        LinearModel.from_dict([], "here")
    with pytest.raises(ValueError, match="here: 'coef'"):
        LinearModel.from_dict({k: v for k, v in model.to_dict().items() if k != "coef"}, "here")
    with pytest.raises(ValueError, match="here: scale must be > 0"):
        LinearModel.from_dict({**model.to_dict(), "scale": [0.0, 1.0]}, "here")


# ---------------------------------------------------------------------------- Detector file


def test_detector_json_round_trip(tmp_path: Path) -> None:
    for detector in (
        _detector(),
        _detector(copy_response=True, copy_threshold=0.2),
        _detector(copy_response=True, copy_token=True),
    ):
        path = detector.save(tmp_path / "detector.json")
        loaded = Detector.load(path)
        assert loaded.to_dict() == detector.to_dict()
        assert json.loads(path.read_text())["format"] == "rcstat-detector-3"
        assert (loaded.copy_response is None) == (detector.copy_response is None)
        assert (loaded.copy_token is None) == (detector.copy_token is None)
        np.testing.assert_array_equal(loaded.token.coef, detector.token.coef)
        if detector.copy_token is not None:
            np.testing.assert_array_equal(
                loaded.token_model("copied").coef, detector.copy_token.coef
            )
    without = _detector(copy_response=True).to_dict()  # copy_token may be left out
    del without["copy_token"]
    assert Detector.from_dict(without).copy_token is None
    with pytest.raises(
        ValueError, match=r"Detector\.save writes a \.json file, got 'detector\.pkl'"
    ):
        _detector().save(tmp_path / "detector.pkl")


def _broken(tmp_path: Path, change: Any) -> Path:
    data = _detector(copy_response=True, copy_token=True).to_dict()
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d.update(format="rcstat-probe-1"),
            "not an rcstat detector (format 'rcstat-probe-1')",
        ),
        (lambda d: d.pop("format"), "not an rcstat detector (format None)"),
        (lambda d: d.pop("threshold"), "missing or mistyped 'threshold'"),
        (lambda d: d.update(threshold=None), "missing or mistyped"),
        (lambda d: d.update(threshold=1.5), "threshold must be in [0, 1], got 1.5"),
        (lambda d: d.update(span_threshold=-0.1), "span_threshold must be in [0, 1]"),
        (lambda d: d.update(copy_threshold=2.0), "copy_threshold must be in [0, 1]"),
        (lambda d: d.update(copy_span_threshold=1.1), "copy_span_threshold must be in [0, 1]"),
        (lambda d: d.pop("copy_span_threshold"), "missing or mistyped 'copy_span_threshold'"),
        (
            lambda d: d.update(format="rcstat-detector-1"),
            "a detector of an earlier rcstat (format 'rcstat-detector-1': its spans are word "
            "runs at one threshold for both kinds); train it again with `rcstat ground-train`",
        ),
        (
            lambda d: d.update(format="rcstat-detector-2"),
            "a detector of an earlier rcstat (format 'rcstat-detector-2': its token features "
            "hold no head's own lookback ratio or copy weight)",
        ),
        (
            lambda d: d.update(layers=2),
            "the token model's features are not the detector features of a model of 2 layers "
            "of 4 heads",
        ),
        (
            lambda d: d.update(heads=3),
            "the token model's features are not the detector features of a model of 3 layers "
            "of 3 heads",
        ),
        (lambda d: d.pop("heads"), "missing or mistyped 'heads'"),
        (
            lambda d: d["response"].update(features=list(RESPONSE_FEATURES[::-1])),
            "a response model's features are not RESPONSE_FEATURES",
        ),
        (
            lambda d: d["token"].update(scale=[0.0] * len(d["token"]["features"])),
            "token: scale must be > 0",
        ),
        (lambda d: d.update(copy_response=[]), "copy_response: expected an object, got list"),
        (lambda d: d.update(copy_token=3), "copy_token: expected an object, got int"),
        (
            lambda d: d["copy_token"].update(features=d["copy_token"]["features"][::-1]),
            "the copied kind's token model has other features than the token model",
        ),
        (lambda d: d["response"].pop("intercept"), "response: 'intercept'"),
    ],
)
def test_detector_load_refusals_name_the_file(tmp_path: Path, change: Any, message: str) -> None:
    path = _broken(tmp_path, change)
    with pytest.raises(ValueError) as info:
        Detector.load(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)


def test_detector_load_of_what_is_not_a_detector(tmp_path: Path) -> None:
    for name, content in (
        ("list.json", b"[1, 2]"),
        ("text.json", b"not json"),
        ("bin.json", b"\xff"),
    ):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError, match=re.escape(f"{path}: ")):
            Detector.load(path)
    with pytest.raises(ValueError, match=r"missing\.json: cannot read a detector"):
        Detector.load(tmp_path / "missing.json")


def _words(flags: list[bool]) -> list[ResponseWord]:
    return [ResponseWord(2 * k, 2 * k + 1, "w", True, True, f) for k, f in enumerate(flags)]


def test_kind_of_counts_the_copied_words() -> None:
    plain = _detector(threshold=0.3, copy_threshold=0.8)
    both = _detector(threshold=0.3, copy_threshold=0.8, copy_response=True)
    assert COPIED_KIND == 0.65 and both.copied_kind == COPIED_KIND
    for flags, kind in (
        ([True] * 13 + [False] * 7, "copied"),  # 13/20 = 0.65: at the bound
        ([True] * 12 + [False] * 7, "other"),  # 12/19 < 0.65
        ([True, True, False], "copied"),
        ([True, False], "other"),
        ([True] * 10, "copied"),
        ([], "other"),
        ([False] * 5, "other"),
    ):
        name, model, threshold = both.kind_of(_words(flags))
        assert name == kind
        assert model is (both.copy_response if kind == "copied" else both.response)
        assert threshold == (0.8 if kind == "copied" else 0.3)
        name, model, _ = plain.kind_of(_words(flags))  # no copied model: the other one
        assert name == kind and model is plain.response
        assert plain.token_model(name) is plain.token


def test_the_token_model_of_each_kind() -> None:
    both = _detector(copy_response=True, copy_token=True)
    assert both.copy_token is not None and both.copy_token is not both.token
    assert both.token_model("copied") is both.copy_token
    assert both.token_model("other") is both.token
    with pytest.raises(ValueError, match="kind must be 'copied' or 'other', got 'quoted'"):
        both.token_model("quoted")


def test_the_copied_kind_bound_is_the_detectors_own() -> None:
    strict = dataclasses.replace(_detector(threshold=0.3, copy_threshold=0.8), copied_kind=0.75)
    assert strict.kind_of(_words([True, True, False]))[0] == "other"  # 2/3 < 0.75
    assert strict.kind_of(_words([True, True, True, False]))[0] == "copied"
    again = Detector.from_dict(json.loads(json.dumps(strict.to_dict())))
    assert again.copied_kind == 0.75
    with pytest.raises(ValueError, match="copied_kind"):
        dataclasses.replace(strict, copied_kind=1.5)


def test_shipped_detector() -> None:
    assert shipped_detector("no-such-model") is None
    assert shipped_detector("/some/folder/no-such-model") is None
    folder = resources.files("rcstat.grounding") / "detectors"
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    for name in (n for n in names if n.endswith(".json")):
        detector = shipped_detector(f"org/{name[: -len('.json')]}")
        assert isinstance(detector, Detector)


# --------------------------------------------------------------------------- token features


def _word_of(offsets: np.ndarray, words: list[ResponseWord]) -> list[int]:
    out = []
    for s, e in offsets:
        hits = [k for k, w in enumerate(words) if s < w.end and e > w.start]
        out.append(hits[0] if hits else -1)
    return out


def test_token_feature_names() -> None:
    names = token_feature_names(2, 3)
    assert len(names) == 19 + 6 + 12 and len(set(names)) == len(names)
    assert names[:4] == ["nll", "entropy", "log_rank", "novel"]
    assert names[19:25] == [
        "lookback:L0",
        "lookback:L1",
        "attention:L0",
        "attention:L1",
        "copy:L0",
        "copy:L1",
    ]
    heads = [f"L{layer}H{head}" for layer in range(2) for head in range(3)]
    assert names[25:] == [f"lookback:{h}" for h in heads] + [f"log_copy:{h}" for h in heads]
    assert token_feature_names(0, 3) == names[:19]
    assert token_feature_names(2, 0) == names[:25]
    np.testing.assert_array_equal(head_columns(names), [False] * 25 + [True] * 12)
    assert not head_columns(["lookback:L1", "copy:L12", "nll"]).any()


def test_token_features_follow_their_definitions(measured: Measurement) -> None:
    response = measured.example.part_text("answer")
    words = Lexicon(CONTEXT).words_of(response)
    x, word_of = token_features(measured, words)
    names = token_feature_names(LAYERS, HEADS)
    col = {name: x[:, i] for i, name in enumerate(names)}
    offsets = measured.token_spans()
    g = len(offsets)
    assert x.shape == (g, len(names)) and x.dtype == np.float64
    assert word_of.tolist() == _word_of(offsets, words)
    context_words = {m.group().lower() for m in _WORD.finditer(CONTEXT)}
    for j in range(g):
        k = int(word_of[j])
        if k < 0:  # a token of no word
            assert col["punctuation"][j] == 1.0 and col["novel"][j] == 0.0
            assert col["number"][j] == col["capital"][j] == col["word_nll"][j] == 0.0
            continue
        text = words[k].text
        assert col["punctuation"][j] == 0.0
        assert col["novel"][j] == float(text.lower() not in context_words), text
        assert col["number"][j] == float(text.isdigit())
        assert col["capital"][j] == float(text[0].isupper())
        assert col["copied"][j] == float(words[k].copied)
        assert col["bigram_novel"][j] == float(not words[k].bigram_known)
        mine = [i for i in range(g) if word_of[i] == k]
        want_nll = min(sum(min(measured.nll[i], NLL_CAP) for i in mine), NLL_CAP)
        assert col["word_nll"][j] == pytest.approx(want_nll)
        copy = [measured.copy[:, :, i].sum() for i in mine]
        assert col["word_copy"][j] == pytest.approx(max(copy), rel=1e-6)
        novel = [float(w.text.lower() not in context_words) for w in words]
        near = novel[max(0, k - 2) : k + 3]
        assert col["novel_near2"][j] == pytest.approx(sum(near) / len(near))
    # the novel words of this response, named
    novel_words = {words[int(k)].text for k in word_of[col["novel"] == 1.0]}
    assert novel_words == {"1925", "Mayor", "met", "3", "Lyon", "NOT"}
    np.testing.assert_allclose(col["nll"], np.minimum(measured.nll, NLL_CAP))
    np.testing.assert_allclose(col["entropy"], measured.entropy)
    np.testing.assert_allclose(col["log_rank"], np.log1p(measured.rank))
    np.testing.assert_allclose(col["position"], np.arange(g) / (g - 1))
    novel_share = np.mean([w.text.lower() not in context_words for w in words])
    np.testing.assert_allclose(col["response_novel"], novel_share)
    np.testing.assert_allclose(col["log_words"], np.log(1 + len(words)))
    for layer in range(LAYERS):
        np.testing.assert_allclose(
            col[f"lookback:L{layer}"], measured.features[1, layer].mean(axis=0), rtol=1e-6
        )
        np.testing.assert_allclose(
            col[f"attention:L{layer}"], measured.features[2, layer].mean(axis=0), rtol=1e-6
        )
        np.testing.assert_allclose(
            col[f"copy:L{layer}"], measured.copy[layer].sum(axis=0), rtol=1e-6, atol=1e-7
        )
        for head in range(HEADS):
            for j in range(g):  # one token at a time, the definitions of the module notes
                assert col[f"lookback:L{layer}H{head}"][j] == pytest.approx(
                    float(measured.features[1, layer, head, j]), rel=1e-12
                )
                assert col[f"log_copy:L{layer}H{head}"][j] == pytest.approx(
                    math.log(float(measured.copy[layer, head, j]) + 1e-4), rel=1e-12
                )
    assert (measured.copy > 0).any() and (measured.copy == 0).any()  # both cases were read
    assert np.isfinite(x).all()


def test_the_nll_columns_are_capped(measured: Measurement) -> None:
    words = Lexicon(CONTEXT).words_of(measured.example.part_text("answer"))
    nll = measured.nll.copy()
    nll[::2] = 100.0
    x, word_of = token_features(dataclasses.replace(measured, nll=nll), words)
    names = token_feature_names(LAYERS, HEADS)
    assert x[::2, names.index("nll")].tolist() == [NLL_CAP] * len(nll[::2])
    assert x[:, names.index("nll")].max() == NLL_CAP
    inside = word_of >= 0
    assert (x[inside, names.index("word_nll")] <= NLL_CAP).all()
    assert x[::2, names.index("word_nll")][inside[::2]].tolist() == [NLL_CAP] * int(
        inside[::2].sum()
    )


# ------------------------------------------------------------------------------ novel facts


def _facts(context: str, text: str) -> list[str]:
    words = Lexicon(context).words_of(text)
    return [w.text for w, fact in zip(words, novel_facts(text, words), strict=True) if fact]


@pytest.mark.parametrize(
    ("context", "text", "facts"),
    [
        (
            "It opened in 1889 in Lyon.",
            "It opened in 1925 in Paris.\n2. Then Lyon had 3 more.",
            ["1925", "Paris", "3"],
        ),
        # sentence-initial capitals are no fact; mid-sentence ones and numbers are
        (
            "nothing",
            "In 2020 the Mayor met Smith. Then Jones left!",
            ["2020", "Mayor", "Smith", "Jones"],
        ),
        ("nothing", "Yes: Rome? Maybe; Oslo.", []),  # each opens a sentence or clause
        ("Smith met the Mayor in 2020.", "In 2020 the Mayor met Smith.", []),  # known words
        # list markers (a number before "." or ")" at a line start) and the words after them
        ("nothing", "1. Paris\n2) Lyon\n 3. Nice", []),
        ("nothing", "- Lyon is big.\n- Nice too.\n* Oslo\n  • Rome", []),
        ("nothing", "1) Lyon has 12 bridges.", ["12"]),
        ("nothing", "Chapter 2. Lyon", ["2"]),  # not at a line start: a number, then a sentence
    ],
)
def test_novel_facts_by_hand(context: str, text: str, facts: list[str]) -> None:
    assert _facts(context, text) == facts


def test_novel_facts_of_no_word() -> None:
    assert novel_facts("", []).shape == (0,)


# ------------------------------------------------------------------------ response features


def test_response_features_by_hand() -> None:
    text = "Paris has 3 bridges"
    words = Lexicon("Paris has bridges.").words_of(text)
    assert [(w.known, w.bigram_known) for w in words] == [
        (True, False),
        (True, True),
        (False, False),
        (True, False),
    ]
    p = np.array([0.1, 0.9, 0.2, 0.8, 0.3, 0.7])
    nll = np.array([1.0, 2.0, 40.0, 0.0, 0.0, 3.0])
    got = dict(
        zip(RESPONSE_FEATURES, response_features(p, nll, 50, text, words, False), strict=True)
    )
    want = {
        "p_mean": 0.5,
        "p_max": 0.9,
        "p_top5": (0.9 + 0.8 + 0.7 + 0.3 + 0.2) / 5,
        "p_window5": (0.9 + 0.2 + 0.8 + 0.3 + 0.7) / 5,
        "p_window15": 0.5,  # fewer than 15 tokens: the mean of all
        "p_share_above_half": 0.5,
        "words_known": 0.75,
        "bigrams_known": 1 / 3,
        "copied_share": 0.0,
        "novel_facts": math.log(2),  # "3"
        "structured_context": 0.0,
        "log_tokens": math.log(6),
        "log_context_tokens": math.log(50),
        "mean_nll": (1 + 2 + 30 + 0 + 0 + 3) / 6,  # capped at 30
    }
    assert got == pytest.approx(want)
    structured = response_features(p, nll, 50, text, words, True)
    assert structured[RESPONSE_FEATURES.index("structured_context")] == 1.0


def test_response_features_of_one_word_and_of_none() -> None:
    one = response_features(
        np.array([0.4]), np.array([1.0]), 0, "Paris", Lexicon("Paris").words_of("Paris"), False
    )
    named = dict(zip(RESPONSE_FEATURES, one, strict=True))
    assert named["bigrams_known"] == 1.0 and named["words_known"] == 1.0  # its own word
    assert named["log_context_tokens"] == 0.0 and named["p_window5"] == pytest.approx(0.4)
    none = dict(
        zip(
            RESPONSE_FEATURES,
            response_features(np.array([0.2, 0.6]), np.zeros(2), 5, "?!", [], False),
            strict=True,
        )
    )
    assert none["words_known"] == none["bigrams_known"] == none["copied_share"] == 0.0
    assert none["novel_facts"] == 0.0


# ------------------------------------------------------------------- the Grounder's detector


def _copied_kind(response: str) -> bool:
    words = Lexicon(CONTEXT).words_of(response)
    return sum(w.copied for w in words) / len(words) >= COPIED_KIND


def _expected(measurer: Measurer, detector: Detector, response: str) -> tuple[float, np.ndarray]:
    """P and the token probabilities, from the definitions of the module."""
    m = measurer.measure(CONTEXT, response, QUESTION)
    words = Lexicon(CONTEXT).words_of(response)
    x, _ = token_features(m, words)
    novel = x[:, token_feature_names(LAYERS, HEADS).index("novel")]
    if _copied_kind(response) and detector.copy_token is not None:
        p = 1 / (1 + np.exp(-(2.0 * novel - 1.0)))
    else:
        p = 1 / (1 + np.exp(-(4.0 * novel - 2.0)))
    features = response_features(
        p, m.nll, context_tokens(m), response, words, Lexicon(CONTEXT).structured
    )
    shift = 0.3 if _copied_kind(response) and detector.copy_response is not None else 0.5
    p_max = features[RESPONSE_FEATURES.index("p_max")]
    return float(1 / (1 + np.exp(-(p_max - shift) / 0.1))), p


def _check_agreement(result: Grounding) -> None:
    """Spans exist exactly for an unsupported verdict; sentences and spans agree."""
    assert bool(result.spans) == (result.verdict == "unsupported")
    assert bool(result.unsupported) == (result.verdict == "unsupported")
    for sentence in result.sentences:
        hit = any(s.start < sentence.end and s.end > sentence.start for s in result.spans)
        assert hit == (sentence.status == "unsupported")
    for span in result.spans:
        assert result.response[span.start : span.end] == span.text


@pytest.mark.parametrize(("response", "copied"), RESPONSES)
def test_the_kinds_of_the_responses(response: str, copied: bool) -> None:
    assert _copied_kind(response) is copied


@pytest.mark.parametrize(
    "thresholds",
    [
        (0.5, 0.5, 0.5, 0.5),
        (0.3, 0.99, 0.5, 0.2),
        (0.99, 0.3, 0.2, 0.8),
        (0.0, 0.0, 0.9, 0.6),
        (1.0, 1.0, 0.5, 0.5),
    ],
)
@pytest.mark.parametrize(
    ("copy_response", "copy_token"), [(False, False), (True, False), (True, True)]
)
def test_detector_mode_scores_thresholds_and_spans(  # type: ignore[no-untyped-def]
    tiny, profile, thresholds, copy_response, copy_token
) -> None:
    threshold, copy_threshold, span_threshold, copy_span_threshold = thresholds
    detector = _detector(
        threshold=threshold,
        copy_threshold=copy_threshold,
        span_threshold=span_threshold,
        copy_span_threshold=copy_span_threshold,
        copy_response=copy_response,
        copy_token=copy_token,
    )
    model, tok = tiny
    grounder = Grounder(model, tok, profile=profile, top_k=5, detector=detector)
    assert grounder.method["detector"]["threshold"] == threshold
    for response, copied in RESPONSES:
        result = grounder.ground(CONTEXT, response, QUESTION)
        probability, p = _expected(grounder.measurer, detector, response)
        assert result.score == pytest.approx(1 - probability, abs=1e-9)
        np.testing.assert_allclose(result.token_scores, 1 - p, atol=1e-9)
        kind_threshold = copy_threshold if copied else threshold
        assert result.threshold == pytest.approx(1 - kind_threshold)
        assert result.verdict == ("unsupported" if probability > kind_threshold else "supported")
        kind, span_kind_threshold = (
            ("copied", copy_span_threshold) if copied else ("other", span_threshold)
        )
        assert result.token_threshold == pytest.approx(1 - span_kind_threshold)
        _check_agreement(result)
        if result.verdict == "unsupported":  # the span rule of its kind (tested alone)
            words = Lexicon(CONTEXT).words_of(response)
            want, _ = draw_spans(kind, response, result.token_spans, p, span_kind_threshold, words)
            assert [(s.start, s.end) for s in result.spans] == [(w.start, w.end) for w in want]
        for span in result.spans:  # 1 - the largest token probability inside
            inside = (result.token_spans[:, 0] < span.end) & (result.token_spans[:, 1] > span.start)
            assert span.score == pytest.approx(float(np.min(1 - p[inside])), abs=1e-9)


def test_detector_spans_by_kind(tiny, profile) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    # only novel words reach 0.6 (p 0.88 against 0.12)
    detector = _detector(threshold=0.5, span_threshold=0.6, copy_span_threshold=0.6)
    grounder = Grounder(model, tok, profile=profile, top_k=5, detector=detector)
    result = grounder.ground(CONTEXT, RESPONSES[0][0], QUESTION)  # reworded: clauses
    assert result.verdict == "unsupported"
    assert [s.text for s in result.spans] == [
        "The bridge was built in 1925.",
        "It crosses the river in Lyon!",
    ]
    assert [s.status for s in result.sentences] == ["unsupported", "unsupported"]
    result = grounder.ground(CONTEXT, RESPONSES[3][0], QUESTION)  # quoted: the changed word
    assert result.verdict == "unsupported"
    assert [s.text for s in result.spans] == ["1925"]


def test_detector_mode_with_a_threshold_given(tiny, profile) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    detector = _detector(threshold=0.99, copy_threshold=0.01)
    for given_threshold in (0.0, 0.5, 1.0):
        grounder = Grounder(
            model, tok, profile=profile, top_k=5, detector=detector, threshold=given_threshold
        )
        for response, _ in RESPONSES:
            result = grounder.ground(CONTEXT, response, QUESTION)
            assert result.threshold == given_threshold  # for both kinds
            assert result.verdict == (
                "unsupported" if result.score < given_threshold else "supported"
            )
            _check_agreement(result)


def test_detector_false_is_the_zero_shot_result(tiny, profile, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    response = RESPONSES[0][0]
    default = Grounder(model, tok, profile=profile, top_k=5)  # no detector ships for it
    assert default.detector is None
    plain = default.ground(CONTEXT, response, QUESTION).to_dict()
    off = Grounder(model, tok, profile=profile, top_k=5, detector=False)
    assert off.ground(CONTEXT, response, QUESTION).to_dict() == plain
    with_detector = Grounder(model, tok, profile=profile, top_k=5, detector=_detector())
    twin = with_detector.zero_shot()
    assert twin.detector is None and twin.threshold == profile.threshold
    assert with_detector.detector is not None  # the original keeps its detector
    assert twin.ground(CONTEXT, response, QUESTION).to_dict() == plain
    assert plain["token_threshold"] is None
    # a detector file is read; a detector of another layer count is refused
    path = _detector().save(tmp_path / "d.json")
    from_file = Grounder(model, tok, profile=profile, top_k=5, detector=path)
    assert from_file.detector is not None and from_file.detector.to_dict() == _detector().to_dict()
    for layers, heads in ((2, HEADS), (LAYERS, 2)):
        with pytest.raises(
            ValueError,
            match=rf"the detector is for a model of {layers} layers of {heads} heads \(tiny\); "
            "the model has 3 layers of 4 heads",
        ):
            Grounder(model, tok, profile=profile, top_k=5, detector=_detector(layers, heads))
    with pytest.raises(ValueError, match=r"no detector ships for .*rcstat ground-train"):
        Grounder(model, tok, profile=profile, top_k=5, detector=True)


def test_detector_mode_on_a_context_read_in_windows(tiny, profile) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    context = " ".join([CONTEXT] * 4)
    for threshold in (0.0, 0.5, 1.0):
        grounder = Grounder(
            model,
            tok,
            profile=profile,
            top_k=5,
            detector=_detector(threshold=threshold),
            max_tokens=160,
        )
        result = grounder.ground(context, RESPONSES[0][0], QUESTION)
        assert result.windows > 1
        _check_agreement(result)
        assert result.verdict == ("supported" if threshold == 1.0 else "unsupported")


# ------------------------------------------------------------------------- zero-shot spans


def _runs(values: np.ndarray, threshold: float) -> list[list[int]]:
    runs: list[list[int]] = []
    for k, v in enumerate(values):
        if v < threshold:
            if runs and runs[-1][-1] == k - 1:
                runs[-1].append(k)
            else:
                runs.append([k])
    return runs


def test_zero_shot_spans_are_runs_of_words_below_the_threshold(tiny, profile) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    response = RESPONSES[0][0]
    base = Grounder(model, tok, profile=profile, top_k=5)
    m = base.measurer.measure(CONTEXT, response, QUESTION)
    words = response_words(response, m.token_spans())
    values = word_scores(m.nll, m.copy_at(base.copy_heads), words)
    cuts = sorted({0.0, 1.0, *values.tolist(), *np.minimum(values + 1e-9, 1.0).tolist()})
    for threshold in cuts:
        result = Grounder(model, tok, profile=profile, top_k=5, threshold=threshold).score(m)
        want = [
            (words[r[0]].start, words[r[-1]].end, float(values[r].min()))
            for r in _runs(values, threshold)
        ]
        assert [(s.start, s.end, s.score) for s in result.spans] == want
        assert all(s.text == response[s.start : s.end] for s in result.spans)
        assert bool(result.spans) == bool(result.unsupported) == (result.verdict == "unsupported")
        assert result.token_threshold is None


# --------------------------------------------------------------------------- saved results


def test_grounding_round_trip_keeps_spans_and_token_threshold(tiny, profile, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    for detector in (_detector(span_threshold=0.6), False):
        result = Grounder(model, tok, profile=profile, top_k=5, detector=detector).ground(
            CONTEXT, RESPONSES[0][0], QUESTION
        )
        assert result.spans  # unsupported in both modes
        data = result.to_dict()
        assert data["format"] == "rcstat-grounding-3"
        assert data["spans"] == [
            {"start": s.start, "end": s.end, "text": s.text, "score": s.score} for s in result.spans
        ]
        loaded = Grounding.load(result.save(tmp_path / "g.json"))
        assert loaded.spans == result.spans
        assert all(isinstance(s, UnsupportedSpan) for s in loaded.spans)
        assert loaded.token_threshold == result.token_threshold
        assert loaded.to_dict() == data
    # an older file (without spans) is refused, naming its format
    older = {k: v for k, v in data.items() if k not in ("spans", "token_threshold")}
    older["format"] = "rcstat-grounding-2"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(older))
    with pytest.raises(ValueError, match="format 'rcstat-grounding-2'"):
        Grounding.load(path)
