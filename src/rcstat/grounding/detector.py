"""The trained grounding detector: token probabilities, unsupported spans, a response verdict.

A :class:`Detector` is two logistic regressions over the features of
:mod:`.detector_features` (all from the one pass of :class:`~rcstat.grounding.Measurer`):

1. the **token model** gives each response token the probability ``p_j`` that it belongs to an
   unsupported span;
2. the **response model** turns aggregates of ``p_j`` and response-level features into the
   probability ``P`` that the response holds an unsupported span.

Two kinds of response get their own token model, response model and threshold: one that
quotes its context (at least :data:`COPIED_KIND` of its words in copied runs, :mod:`.lexicon`:
an extractive answer, where one changed word must be caught; ``copy_token``,
``copy_response``, ``copy_threshold``) and any other (abstractive, data-to-text; ``token``,
``response``, ``threshold``). A detector without a model of the copied kind gives that kind
the other's. The response is *unsupported* when ``P`` exceeds the threshold of its kind.

Its unsupported spans are drawn from the ``p_j`` by the rule of its kind
(:mod:`.detector_spans`): runs of words around a peak, kept when they hold a word the context
does not hold, at ``copy_span_threshold`` (copied kind), or the clauses whose largest ``p_j``
reaches ``span_threshold`` (other kind). An unsupported response with no unit over its span
threshold reports its likeliest one, and a supported one reports none, so the spans and the
verdict never disagree.

With ``z = (x − mean) / scale`` each model is ``σ(z · coef + intercept)``. A detector is saved as
JSON (never pickled, :meth:`Detector.save`) and checked on load; one ships for the default
model (:func:`shipped_detector`) and ``rcstat ground-train`` fits one for any model
(:mod:`.training`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from rcstat.attribution.spans import TextSpan
from rcstat.grounding.detector_features import (
    RESPONSE_FEATURES,
    context_tokens,
    copied_share,
    response_features,
    token_feature_names,
    token_features,
)
from rcstat.grounding.detector_spans import check_kind, draw_spans
from rcstat.grounding.json_file import check_format, save_json
from rcstat.grounding.lexicon import Lexicon, ResponseWord
from rcstat.grounding.measurement import Measurement

__all__ = ["COPIED_KIND", "Detection", "Detector", "LinearModel", "shipped_detector"]

_FORMAT = "rcstat-detector-3"
#: The formats of earlier releases, refused with the reason.
_EARLIER = {
    "rcstat-detector-1": "its spans are word runs at one threshold for both kinds",
    "rcstat-detector-2": "its token features hold no head's own lookback ratio or copy weight",
}
#: The share of a response's words in copied runs from which it is of the "copied" kind.
COPIED_KIND = 0.65


@dataclass(frozen=True)
class LinearModel:
    """A standardised logistic regression: ``σ(((x − mean) / scale) · coef + intercept)``.

    Attributes
    ----------
    features
        The names of the columns of ``x``, in order.
    mean, scale
        ``[F]`` standardisation (``scale > 0``); a column fitted with an L2 penalty ``k²``
        times the others' has ``k`` times its standard deviation as its scale
        (:meth:`fit`'s ``penalty``).
    coef
        ``[F]`` weights of the standardised features.
    intercept
        The bias.
    C
        The inverse L2 strength it was fitted with (a record, unused by predictions).
    """

    features: tuple[str, ...]
    mean: np.ndarray  # [F]
    scale: np.ndarray  # [F]
    coef: np.ndarray  # [F]
    intercept: float
    C: float = math.nan

    def __post_init__(self) -> None:
        size = len(self.features)
        for name in ("mean", "scale", "coef"):
            value = np.asarray(getattr(self, name), dtype=np.float64).reshape(-1)
            if value.shape != (size,):
                raise ValueError(f"{name} has {value.size} entries for {size} features")
            if not np.isfinite(value).all():
                raise ValueError(f"{name} holds a non-finite value")
            object.__setattr__(self, name, value)
        if not (self.scale > 0).all():
            raise ValueError("scale must be > 0")
        if not math.isfinite(self.intercept):
            raise ValueError("intercept must be finite")

    def probability(self, x: np.ndarray) -> np.ndarray:
        """``[n]`` probabilities of the rows of ``x`` ``[n, F]``."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.features):
            raise ValueError(f"x must be [n, {len(self.features)}], got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("the detector's features hold a non-finite value")
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))

    @classmethod
    def fit(
        cls,
        x: np.ndarray,
        y: np.ndarray,
        features: list[str] | tuple[str, ...],
        *,
        C: float,
        weight: np.ndarray | None = None,
        penalty: np.ndarray | None = None,
    ) -> LinearModel:
        """Fit on ``x`` ``[n, F]`` and labels ``y`` ``[n]`` (scikit-learn's
        ``LogisticRegression``, L2, balanced classes, optional sample ``weight``).

        ``penalty`` ``[F]`` (each ≥ 1, default all 1) divides each standardised column by
        ``k_j`` before the fit, so that its weight costs ``k_j² · w_j² / (2C)`` in the L2 term
        instead of ``w_j² / (2C)``: a block of many weak, correlated columns (every head's
        features) can be held to a smaller share of the model than the few strong ones."""
        from sklearn.linear_model import LogisticRegression

        x = np.asarray(x, dtype=np.float64)
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale = np.where(scale > 1e-12, scale, 1.0)
        if penalty is not None:
            penalty = np.asarray(penalty, dtype=np.float64)
            if penalty.shape != scale.shape or not (penalty >= 1).all():
                raise ValueError(f"penalty must be [{scale.size}] values >= 1")
            scale = scale * penalty
        fitted = LogisticRegression(C=C, max_iter=5000, class_weight="balanced").fit(
            (x - mean) / scale, np.asarray(y, dtype=bool), sample_weight=weight
        )
        return cls(
            tuple(features), mean, scale, fitted.coef_[0], float(fitted.intercept_[0]), float(C)
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {
            "features": list(self.features),
            "mean": self.mean.tolist(),
            "scale": self.scale.tolist(),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "C": None if math.isnan(self.C) else self.C,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str) -> LinearModel:
        """The model of :meth:`to_dict`'s output; ``ValueError`` naming ``where`` otherwise."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
        try:
            return cls(
                tuple(str(f) for f in data["features"]),
                np.asarray(data["mean"], dtype=np.float64),
                np.asarray(data["scale"], dtype=np.float64),
                np.asarray(data["coef"], dtype=np.float64),
                float(data["intercept"]),
                math.nan if data.get("C") is None else float(data["C"]),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None


@dataclass(frozen=True)
class Detection:
    """What a :class:`Detector` found in one response.

    Attributes
    ----------
    token_probability
        ``[G]`` probability that each response token lies in an unsupported span.
    probability
        Probability that the response holds an unsupported span.
    kind
        ``"copied"`` or ``"other"`` (module notes).
    threshold
        The threshold of its kind.
    unsupported
        ``probability > threshold``.
    spans
        The unsupported spans (character offsets in the response), in text order; empty when
        the response is supported.
    span_probability
        Each span's largest token probability.
    """

    token_probability: np.ndarray  # [G]
    probability: float
    kind: str
    threshold: float
    unsupported: bool
    spans: list[TextSpan]
    span_probability: list[float]


@dataclass
class Detector:
    """A trained grounding detector for one analysis model (module notes).

    Attributes
    ----------
    model
        The analysis model's name (``config.name_or_path``, else its class name).
    layers, heads
        Its number of layers and of attention heads a layer (the per-layer and per-head
        features).
    token, response
        The two logistic regressions (of the other kind, and of the copied kind when it has
        none of its own).
    threshold
        A response is unsupported when its probability exceeds this.
    span_threshold
        The span threshold of the other kind: clauses whose largest token probability reaches
        it are unsupported (:mod:`.detector_spans`).
    copy_threshold
        The threshold of responses of the copied kind (module notes).
    copy_span_threshold
        The span threshold of the copied kind: runs of words whose span value reaches it are
        unsupported (:mod:`.detector_spans`).
    copy_response
        The response model of the copied kind (None: :attr:`response`).
    copy_token
        The token model of the copied kind (None: :attr:`token`).
    copied_kind
        The share of words in copied runs from which a response is of the copied kind.
    meta
        How it was trained and how it did out of sample (JSON types).
    """

    model: str
    layers: int
    heads: int
    token: LinearModel
    response: LinearModel
    threshold: float
    span_threshold: float
    copy_threshold: float
    copy_span_threshold: float
    copy_response: LinearModel | None = None
    copy_token: LinearModel | None = None
    copied_kind: float = COPIED_KIND
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if tuple(self.token.features) != tuple(token_feature_names(self.layers, self.heads)):
            raise ValueError(
                f"the token model's features are not the detector features of a model of "
                f"{self.layers} layers of {self.heads} heads (rcstat.grounding.detector_features)"
            )
        if self.copy_token is not None and self.copy_token.features != self.token.features:
            raise ValueError(
                "the copied kind's token model has other features than the token model"
            )
        for model in (self.response, self.copy_response):
            if model is not None and tuple(model.features) != RESPONSE_FEATURES:
                raise ValueError("a response model's features are not RESPONSE_FEATURES")
        for name in (
            "threshold",
            "span_threshold",
            "copy_threshold",
            "copy_span_threshold",
            "copied_kind",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")

    def detect(self, measured: Measurement, context: str | None = None) -> Detection:
        """Token probabilities, the response probability and the unsupported spans of the
        response of ``measured`` against ``context`` (default: the measured context)."""
        response = measured.example.part_text("answer")
        if context is None:
            context = measured.example.part_text("context")
        lexicon = Lexicon(context)
        words = lexicon.words_of(response)
        probability = self.token_probability(measured, words, self.kind_of(words)[0])
        return self.detect_tokens(measured, words, probability, structured=lexicon.structured)

    def token_probability(
        self, measured: Measurement, words: list[ResponseWord], kind: str
    ) -> np.ndarray:
        """``[G]``: the probabilities of the token model of ``kind`` (``"copied"`` or
        ``"other"``, :meth:`kind_of`) for the pass ``measured``."""
        layers, heads = measured.copy.shape[:2]
        if (layers, heads) != (self.layers, self.heads):
            raise ValueError(
                f"the detector is for a model of {self.layers} layers of {self.heads} heads "
                f"({self.model}); the pass has {layers} layers of {heads} heads"
            )
        x, _ = token_features(measured, words)
        return self.token_model(kind).probability(x)

    def detect_tokens(
        self,
        measured: Measurement,
        words: list[ResponseWord],
        probability: np.ndarray,
        *,
        structured: bool,
    ) -> Detection:
        """The :class:`Detection` of token probabilities ``probability`` ``[G]`` (e.g. the
        best over the windows of a long context) for the pass ``measured``; ``structured``:
        whether the whole context is structured data."""
        features = response_features(
            probability,
            measured.nll,
            context_tokens(measured),
            measured.example.part_text("answer"),
            words,
            structured,
        )  # [R]
        kind, model, threshold = self.kind_of(words)
        p_response = float(model.probability(features[None])[0])
        unsupported = p_response > threshold
        spans: list[TextSpan] = []
        peaks: list[float] = []
        if unsupported:
            text = measured.example.part_text("answer")
            spans, peaks = self.spans(text, measured.token_spans(), probability, words, kind)
        return Detection(probability, p_response, kind, threshold, unsupported, spans, peaks)

    def spans(
        self,
        response: str,
        offsets: np.ndarray,
        probability: np.ndarray,
        words: list[ResponseWord],
        kind: str,
    ) -> tuple[list[TextSpan], list[float]]:
        """The unsupported spans of an unsupported response of ``kind`` (:meth:`kind_of`) and
        their peaks: the span rule of its kind at that kind's span threshold
        (:func:`~.detector_spans.draw_spans`)."""
        return draw_spans(kind, response, offsets, probability, self.span_threshold_of(kind), words)

    def span_threshold_of(self, kind: str) -> float:
        """The span threshold of responses of ``kind`` (``"copied"`` or ``"other"``)."""
        return self.copy_span_threshold if check_kind(kind) == "copied" else self.span_threshold

    def token_model(self, kind: str) -> LinearModel:
        """The token model of responses of ``kind`` (``"copied"`` or ``"other"``)."""
        copied = check_kind(kind) == "copied"
        return self.copy_token if copied and self.copy_token is not None else self.token

    def kind_of(self, words: list[ResponseWord]) -> tuple[str, LinearModel, float]:
        """The kind of a response with these words, its response model and its threshold
        (module notes)."""
        if copied_share(words) >= self.copied_kind:
            return "copied", self.copy_response or self.response, self.copy_threshold
        return "other", self.response, self.threshold

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (the file format of :meth:`save`)."""
        return {
            "format": _FORMAT,
            "model": self.model,
            "layers": self.layers,
            "heads": self.heads,
            "threshold": self.threshold,
            "span_threshold": self.span_threshold,
            "copy_threshold": self.copy_threshold,
            "copy_span_threshold": self.copy_span_threshold,
            "copied_kind": self.copied_kind,
            "token": self.token.to_dict(),
            "response": self.response.to_dict(),
            "copy_response": None if self.copy_response is None else self.copy_response.to_dict(),
            "copy_token": None if self.copy_token is None else self.copy_token.to_dict(),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "detector") -> Detector:
        """The detector of :meth:`to_dict`'s output; ``ValueError`` naming ``where``."""
        if isinstance(data, dict) and data.get("format") in _EARLIER:
            raise ValueError(
                f"{where}: a detector of an earlier rcstat (format {data['format']!r}: "
                f"{_EARLIER[data['format']]}); train it again with `rcstat ground-train`"
            )
        check_format(data, _FORMAT, where, "detector")
        try:
            return cls(
                model=str(data["model"]),
                layers=int(data["layers"]),
                heads=int(data["heads"]),
                token=LinearModel.from_dict(data["token"], f"{where}: token"),
                response=LinearModel.from_dict(data["response"], f"{where}: response"),
                threshold=float(data["threshold"]),
                span_threshold=float(data["span_threshold"]),
                copy_threshold=float(data["copy_threshold"]),
                copy_span_threshold=float(data["copy_span_threshold"]),
                copied_kind=float(data.get("copied_kind", COPIED_KIND)),
                copy_response=None
                if data.get("copy_response") is None
                else LinearModel.from_dict(data["copy_response"], f"{where}: copy_response"),
                copy_token=None
                if data.get("copy_token") is None
                else LinearModel.from_dict(data["copy_token"], f"{where}: copy_token"),
                meta=dict(data.get("meta") or {}),
            )
        except (KeyError, TypeError) as err:
            raise ValueError(f"{where}: missing or mistyped {err}") from None
        except ValueError as err:
            if str(err).startswith(where):
                raise
            raise ValueError(f"{where}: {err}") from None

    def save(self, path: str | Path) -> Path:
        """Write the detector to one ``.json`` file (:meth:`load` reads it)."""
        return save_json(path, json.dumps(self.to_dict(), indent=1), "Detector.save")

    @classmethod
    def load(cls, path: str | Path) -> Detector:
        """Read a detector written by :meth:`save` (JSON only; nothing is unpickled)."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: cannot read a detector ({err})") from None
        return cls.from_dict(data, str(path))


def shipped_detector(model_name: str) -> Detector | None:
    """The detector shipped with rcstat for a model of this name (``config.name_or_path``'s
    last part, package data ``grounding/detectors/<name>.json``), or None."""
    name = Path(model_name).name
    candidate = resources.files("rcstat.grounding") / "detectors" / f"{name}.json"
    if not candidate.is_file():
        return None
    return Detector.from_dict(json.loads(candidate.read_text(encoding="utf-8")), name)
