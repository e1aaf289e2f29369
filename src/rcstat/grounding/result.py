"""The result of grounding one response: token, sentence and response scores (docs/grounding.md).

:class:`Grounding` holds what one teacher-forced pass of :class:`~rcstat.grounding.Grounder`
measured: a grounding score per response token (higher = more supported by the context), one
per sentence (its weakest window of tokens), one for the whole response (its weakest
sentence), the flag of each sentence against the threshold, the context span that best
supports each sentence (attribution, paper eq. 10), and the same-pass baseline scores. It
renders as a table or JSON and saves to / loads from one JSON file; the HTML page is
:func:`rcstat.report.grounding_html.grounding_page` (``save_grounding_html(path, result)``),
which the caller applies, so grounding never imports report.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rcstat.attribution.spans import TextSpan
from rcstat.grounding.json_file import save_json

__all__ = ["Grounding", "SentenceGrounding", "UnsupportedSpan"]

_SAVE_FORMAT = "rcstat-grounding-3"


@dataclass(frozen=True)
class SentenceGrounding:
    """One sentence of the response with its grounding.

    Attributes
    ----------
    start, end, text
        ``response[start:end]``.
    tokens
        ``[first, last)`` indices into the response tokens.
    score
        The sentence's grounding score (its weakest window of tokens; higher = supported).
    supported
        ``score >= threshold``.
    support
        The context span (a sentence of the context) that the sentence is attributed to by
        the RC heads (paper eq. 10); None when no span gets any weight.
    support_share
        That span's share of the evidence over all context spans, in ``[0, 1]``.
    weakest
        The sentence's least supported word (offsets in the response): the changed name or
        number of an unsupported sentence; None for an unverified one.
    verified
        False when the sentence could not be checked (it lies past the point where a response
        too long for the model's window was cut); its score is then NaN and it is not
        supported.
    """

    start: int
    end: int
    text: str
    tokens: tuple[int, int]
    score: float
    supported: bool
    support: TextSpan | None
    support_share: float | None
    weakest: TextSpan | None = None
    verified: bool = True

    @property
    def status(self) -> str:
        """``"supported"``, ``"unsupported"`` or ``"unverified"``."""
        if not self.verified:
            return "unverified"
        return "supported" if self.supported else "unsupported"


@dataclass(frozen=True)
class UnsupportedSpan:
    """A run of response words the context does not support, ``response[start:end]`` (its
    ``text``), with its weakest support ``score``: the lowest word score (zero-shot) or one minus
    the detector's largest token probability in it (higher = better supported; below the token
    threshold)."""

    start: int
    end: int
    text: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types."""
        return {"start": self.start, "end": self.end, "text": self.text, "score": _num(self.score)}


@dataclass
class Grounding:
    """Grounding scores of one response against its context.

    Attributes
    ----------
    context, question, response
        The texts (``question`` is the instruction the response was teacher-forced after:
        the user's question, or :data:`~rcstat.grounding.DEFAULT_INSTRUCTION` when none was
        given).
    token_texts
        The response cut at its tokens' start offsets (their concatenation is ``response``).
    token_spans
        ``[G, 2]`` character offsets of each token in ``response``.
    token_scores
        ``[G]`` grounding score per response token, in ``[0, 1]`` (higher = supported).
    sentences
        The sentences of the response (:class:`SentenceGrounding`).
    score
        The response's grounding score: its weakest sentence.
    threshold
        Scores below it are flagged unsupported.
    baselines
        Response-level scores of the same-pass baselines (each oriented so that higher means
        more supported): ``lookback`` (Lookback Lens ratio), ``attention_score`` (LLM-Check
        mean log-diagonal), ``neg_nll`` (minus the mean token NLL), ``overlap`` (share of
        response bigrams found in the context).
    head_features
        Per named feature, ``[layers, heads]`` lower quantile (the score's sentence quantile)
        over the response tokens: the inputs of a trained probe
        (:class:`~rcstat.grounding.GroundingProbe`).
    probe_score
        Probability that the response is unsupported from a probe, when one was given.
    method, model
        The score's configuration and the analysis model's name.
    finished
        False when the response was cut at the model's window (its sentences past the cut
        are unverified).
    windows
        How many windows of the context were read (1 when it fit the model's window).
    question_given
        Whether ``question`` is the user's (False: the default instruction, which the HTML page
        does not show as a question).
    spans
        The unsupported spans (:class:`UnsupportedSpan`, character offsets in the response):
        the runs of words below the token threshold, or the trained detector's spans (the
        clauses of a reworded response, the changed words of a quoted one). Empty exactly
        when no checked sentence is unsupported.
    token_threshold
        Token scores below it mark unsupported words, or with a detector the tokens that make
        their clause or word unsupported (None: :attr:`threshold`, as for the zero-shot word
        score; the detector's token scale differs from its response scale).
    """

    context: str
    question: str
    response: str
    token_texts: list[str]
    token_spans: np.ndarray  # [G, 2] int64
    token_scores: np.ndarray  # [G] float64
    sentences: list[SentenceGrounding]
    score: float
    threshold: float
    baselines: dict[str, float]
    head_features: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [L, H]
    probe_score: float | None = None
    method: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    finished: bool = True
    windows: int = 1
    question_given: bool = True
    spans: list[UnsupportedSpan] = field(default_factory=list)
    token_threshold: float | None = None

    @property
    def verdict(self) -> str:
        """``"unsupported"`` when the response's score (its weakest checked sentence) is below
        the threshold, else ``"unverified"`` when part of the response could not be checked
        (or none of it), else ``"supported"``."""
        if self.score < self.threshold:
            return "unsupported"
        if math.isnan(self.score) or any(not s.verified for s in self.sentences):
            return "unverified"
        return "supported"

    @property
    def supported(self) -> bool:
        """Whether every sentence was checked and the response scores at or above the
        threshold."""
        return self.verdict == "supported"

    @property
    def unsupported(self) -> list[SentenceGrounding]:
        """The checked sentences flagged unsupported, in response order."""
        return [s for s in self.sentences if s.status == "unsupported"]

    @property
    def unverified(self) -> list[SentenceGrounding]:
        """The sentences that could not be checked, in response order."""
        return [s for s in self.sentences if not s.verified]

    def to_frame(self, level: str = "sentence") -> pd.DataFrame:
        """One row per sentence (``level="sentence"``) or per token (``level="token"``)."""
        if level == "sentence":
            rows = [
                {
                    "sentence": i,
                    "start": s.start,
                    "end": s.end,
                    "text": s.text,
                    "score": s.score,
                    "status": s.status,
                    "supported": s.supported,
                    "weakest": None if s.weakest is None else s.weakest.text,
                    "support_start": None if s.support is None else s.support.start,
                    "support_end": None if s.support is None else s.support.end,
                    "support_text": None if s.support is None else s.support.text,
                    "support_share": s.support_share,
                }
                for i, s in enumerate(self.sentences)
            ]
            return pd.DataFrame(rows)
        if level == "token":
            sentence_of = np.full(len(self.token_texts), -1)
            for i, s in enumerate(self.sentences):
                sentence_of[s.tokens[0] : s.tokens[1]] = i
            return pd.DataFrame(
                {
                    "token": np.arange(len(self.token_texts)),
                    "text": self.token_texts,
                    "start": self.token_spans[:, 0],
                    "end": self.token_spans[:, 1],
                    "score": self.token_scores,
                    "sentence": sentence_of,
                }
            )
        raise ValueError(f"level must be 'sentence' or 'token', got {level!r}")

    def sentence_dict(self, sentence: SentenceGrounding) -> dict[str, Any]:
        """One sentence in the schema that :meth:`to_dict`, ``rcstat ground --json`` and the rows
        of ``rcstat ground --pairs`` share (plain JSON types, NaN written as None).

        ``start``, ``end``, ``text`` (``response[start:end]``), ``score``, ``verdict``
        (``"supported"``, ``"unsupported"`` or ``"unverified"``), ``support`` (the context
        sentence it rests on: ``start``, ``end``, ``text`` in the context and its ``share`` of
        the evidence; None when no span gets any weight) and ``weakest_word`` (its least
        supported word: ``start``, ``end``, ``text`` in the response and ``score``, the lowest
        token score of the word; None for a sentence without a checked word).
        """
        support, word = sentence.support, sentence.weakest
        weakest = None
        if word is not None:
            inside = (self.token_spans[:, 0] < word.end) & (self.token_spans[:, 1] > word.start)
            scores = self.token_scores[inside]
            lowest = float(np.nanmin(scores)) if np.isfinite(scores).any() else None
            weakest = {"start": word.start, "end": word.end, "text": word.text, "score": lowest}
        return {
            "start": sentence.start,
            "end": sentence.end,
            "text": sentence.text,
            "score": _num(sentence.score),
            "verdict": sentence.status,
            "support": None
            if support is None
            else {
                "start": support.start,
                "end": support.end,
                "text": support.text,
                "share": _num(sentence.support_share),
            },
            "weakest_word": weakest,
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain JSON types (NaN written as None); each sentence as
        :meth:`sentence_dict` with its ``tokens`` (``[first, last)``)."""
        return {
            "format": _SAVE_FORMAT,
            "model": self.model,
            "method": self.method,
            "context": self.context,
            "question": self.question,
            "question_given": self.question_given,
            "response": self.response,
            "score": _num(self.score),
            "threshold": self.threshold,
            "supported": self.supported,
            "verdict": self.verdict,
            "finished": self.finished,
            "windows": self.windows,
            "probe_score": _num(self.probe_score),
            "baselines": {k: _num(v) for k, v in self.baselines.items()},
            "spans": [span.to_dict() for span in self.spans],
            "token_threshold": self.token_threshold,
            "sentences": [
                {**self.sentence_dict(s), "tokens": list(s.tokens)} for s in self.sentences
            ],
            "tokens": {
                "text": list(self.token_texts),
                "spans": self.token_spans.tolist(),
                "score": [_num(v) for v in self.token_scores.tolist()],
            },
            "head_features": {k: v.tolist() for k, v in self.head_features.items()},
        }

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False)

    def save(self, path: str | Path) -> Path:
        """Write the result to one ``.json`` file that :meth:`load` reads back."""
        return save_json(path, self.to_json(), "Grounding.save")

    @classmethod
    def load(cls, path: str | Path) -> Grounding:
        """Read a file written by :meth:`save`."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        if (
            isinstance(found, str)
            and found.startswith("rcstat-grounding-")
            and found != _SAVE_FORMAT
        ):
            raise ValueError(
                f"{path}: a grounding file of an earlier rcstat (format {found!r}, this one reads "
                f"{_SAVE_FORMAT!r}); ground the pair again to write it"
            )
        if found != _SAVE_FORMAT:
            raise ValueError(f"{path}: not an rcstat grounding file (format {found!r})")
        tokens = data["tokens"]
        return cls(
            context=data["context"],
            question=data["question"],
            response=data["response"],
            token_texts=list(tokens["text"]),
            token_spans=np.array(tokens["spans"], dtype=np.int64).reshape(-1, 2),
            token_scores=np.array([_nan(v) for v in tokens["score"]], dtype=np.float64),
            sentences=[_sentence_of(s) for s in data["sentences"]],
            score=_nan(data["score"]),
            threshold=float(data["threshold"]),
            baselines={k: _nan(v) for k, v in data["baselines"].items()},
            head_features={
                k: np.array(v, dtype=np.float64) for k, v in data["head_features"].items()
            },
            probe_score=data["probe_score"],
            method=data["method"],
            model=data["model"],
            finished=bool(data["finished"]),
            windows=int(data["windows"]),
            question_given=bool(data["question_given"]),
            spans=[
                UnsupportedSpan(int(d["start"]), int(d["end"]), d["text"], _nan(d["score"]))
                for d in data["spans"]
            ],
            token_threshold=data["token_threshold"],
        )


def _num(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _span(value: dict[str, Any] | None) -> TextSpan | None:
    """A span as saved: ``{"start", "end", "text", ...}`` or None."""
    if value is None:
        return None
    return TextSpan(int(value["start"]), int(value["end"]), value["text"])


def _sentence_of(d: dict[str, Any]) -> SentenceGrounding:
    """A sentence as saved (:meth:`Grounding.sentence_dict` with its ``tokens``)."""
    support = d["support"]
    return SentenceGrounding(
        start=int(d["start"]),
        end=int(d["end"]),
        text=d["text"],
        tokens=(int(d["tokens"][0]), int(d["tokens"][1])),
        score=_nan(d["score"]),
        supported=d["verdict"] == "supported",
        support=_span(support),
        support_share=None if support is None else support["share"],
        weakest=_span(d["weakest_word"]),
        verified=d["verdict"] != "unverified",
    )
