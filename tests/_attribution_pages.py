"""Synthetic but realistic inputs of the attribution page: a long multi-paragraph context cut
into word tokens and sentence spans, and per-method weights that peak on each unit's source
sentence (RC heads sharply, all heads more diffusely, mean attention on early tokens and
punctuation, as attention sinks do). Used by the page tests and to take screenshots."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_SENTENCES = [
    "The Harrowgate lighthouse stands on a basalt spur at the northern end of the bay.",
    "Its tower, built of local granite, rises 38 metres above the high-water mark.",
    "The first light was lit in 1871 and burned colza oil until the 1890s.",
    "Keepers lived in two cottages at the foot of the tower with their families.",
    "A paraffin vapour burner replaced the oil lamps in 1904, tripling the light's range.",
    "The station was automated in 1962, and the last keeper left in the spring of that year.",
    "During the storm of 1953 the lantern glass shattered and the light was dark for two nights.",
    "Fishermen from the harbour petitioned the board for a fog signal as early as 1880.",
    "A diaphone fog horn was finally installed in 1911 and sounded until 1987.",
    "The cottages now house a small museum run by volunteers from the village.",
    "Visitors can climb the 141 steps to the gallery on weekends between April and October.",
    "The optic is a first-order Fresnel lens made in Paris by Barbier, Bénard et Turenne.",
    "It rotates once every twenty seconds on a bath of mercury, giving two white flashes.",
    "Since 2009 the light has been powered by solar panels mounted on the cottage roofs.",
    "The basalt spur is home to a colony of kittiwakes that nest on the cliff below the tower.",
    "Local legend holds that a keeper's dog once guided a lost boat home through thick fog.",
]
# (source sentence index in _SENTENCES, unit text) for the answer units
_UNITS = [
    (5, "The lighthouse was automated in 1962."),
    (4, " Its oil lamps had been replaced by a paraffin burner in 1904,"),
    (12, " and the Fresnel optic still turns on mercury, flashing twice every twenty"),
]
_TOKEN = re.compile(r"\s*[\w'’-]+|\s*[^\w\s]|\s+")


@dataclass
class Example:
    """The arguments of ``attribution_html`` for one page."""

    tokens: list[str]
    panels: dict[str, np.ndarray]
    units: list[str]
    spans: list[tuple[int, int]]
    gold: list[int | None]
    attributed: dict[str, list[int | None]]
    span_scores: dict[str, np.ndarray]
    options: dict[str, Any] = field(default_factory=dict)

    def kwargs(self, **changes: Any) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "title": "rcstat attribution",
            "question": "When was the lighthouse automated, and what lit it before?",
            "answer": "".join(self.units),
            "spans": self.spans,
            "attributed": self.attributed,
            "gold": self.gold,
            "span_scores": self.span_scores,
        }
        arguments.update(self.options)
        arguments.update(changes)
        return arguments


def long_example(n_tokens: int = 3000, seed: int = 0) -> Example:
    """About ``n_tokens`` word tokens (stops at the first sentence end past it)."""
    rng = np.random.default_rng(seed)
    tokens: list[str] = []
    spans: list[tuple[int, int]] = []
    source: list[int] = []  # per span, its index in _SENTENCES
    k = 0
    while len(tokens) < n_tokens:
        s = k % len(_SENTENCES)
        text = ("\n\n" if k and k % 5 == 0 else " " if k else "") + _SENTENCES[s]
        words = _TOKEN.findall(text)
        spans.append((len(tokens), len(tokens) + len(words)))
        tokens.extend(words)
        source.append(s)
        k += 1
    n = len(tokens)
    units = [text for _, text in _UNITS]
    # the gold span of a unit: the first occurrence of its source sentence past the middle
    gold: list[int | None] = []
    for s, _ in _UNITS:
        hits = [i for i, src in enumerate(source) if src == s and i >= len(spans) // 2]
        gold.append(hits[0])
    gold[-1] = None  # the last unit has no gold span (e.g. an unanswerable part)

    def peaked(sharp: float, noise: float) -> np.ndarray:
        weights = np.empty((len(units), n))
        for u, g in enumerate(gold):
            w = rng.gamma(0.6, noise, n)
            target = g if g is not None else len(spans) // 4
            start, end = spans[target]
            w[start:end] += sharp * rng.uniform(0.4, 1.0, end - start)
            near = spans[max(target - 1, 0)]
            w[near[0] : near[1]] += 0.3 * sharp * rng.uniform(0.2, 1.0, near[1] - near[0])
            weights[u] = w / w.sum()
        return weights

    attention = rng.gamma(0.5, 1.0, (len(units), n))
    attention[:, 0] += 120.0  # the sink
    attention[:, [t for t, tok in enumerate(tokens) if tok.strip() in ".,"]] += 4.0
    attention /= attention.sum(axis=1, keepdims=True)
    panels = {
        "top-20 RC heads": peaked(6.0, 0.4),
        "all heads (RC)": peaked(1.5, 0.6),
        "mean attention": attention,
    }
    span_scores = {}
    attributed: dict[str, list[int | None]] = {}
    for label, w in panels.items():
        mean = np.stack([w[:, a:b].mean(axis=1) for a, b in spans], axis=1)  # [U, S]
        scores = mean / mean.sum(axis=1, keepdims=True)
        span_scores[label] = scores
        attributed[label] = [int(np.argmax(row)) for row in scores]
    return Example(tokens, panels, units, spans, gold, attributed, span_scores)
