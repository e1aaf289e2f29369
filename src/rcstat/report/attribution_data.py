"""The data of an attribution page: checked arguments, colour levels, ranked rows, the JSON blob.

Everything :func:`~rcstat.report.attribution_html.attribution_html` shows is computed here from
plain arrays: per method its weights, their levels ``round(4088 · w / max w)`` and colour bins,
the ranked rows of every unit, and the blob the page's script reads (levels as two base64url
characters per token). :func:`validate` raises the ``ValueError`` that names the argument.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "B64",
    "BINS",
    "RANKED",
    "Method",
    "at_unit",
    "colour_bins",
    "drawable_spans",
    "fmt",
    "page_data",
    "plain_indices",
    "ranked_rows",
    "snippet",
    "validate",
]

BINS = 8
"""Colour bins: bin ``b`` (1..8) holds tokens with ``(b - 1)/8 < w / max w <= b/8`` (the
relative weight rounded to 1/4088 first); bin 0, uncoloured, those that round to 0."""

# w / max w is quantised to 0..4088 in the blob (two base64url characters); 4088 = 8 · 511, so
# a relative weight of exactly b/8 is level 511·b and lands in bin b
_LEVELS = 8 * 511
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
RANKED = 10  # rows of a ranked list (the gold span is added below when ranked lower)
_SNIPPET = 90  # characters of a span's text shown in a ranked row


@dataclass(frozen=True)
class Method:
    """One method's weights and, per unit, its ranked rows and attributed span."""

    key: str  # "a", "b", ...: its CSS class prefix
    label: str
    weights: np.ndarray  # [unit, token], float64, finite, >= 0
    levels: np.ndarray  # [unit, token] int, round(_LEVELS * weights / max)
    scores: np.ndarray  # [unit, item]: span scores, or token weights when there are no spans
    attributed: list[int | None] | None  # per unit; None when the method decides no span


def fmt(value: float) -> str:
    """A score or weight with 3 significant digits (the same string in HTML and in the blob)."""
    return f"{value:.3g}"


def _key(k: int) -> str:
    """Method ``k``'s CSS key: a, b, ..., z, ba, bb, ... (letters only; bins add a digit)."""
    key = ""
    while True:
        k, r = divmod(k, 26)
        key = chr(ord("a") + r) + key
        if k == 0:
            return key


def plain_indices(indices: Sequence[int | None]) -> list[int | None]:
    """Span indices as plain ints (numpy integers are not JSON-serialisable)."""
    return [None if i is None else int(i) for i in indices]


def at_unit(values: list[int | None] | None, u: int) -> int | None:
    """Unit ``u``'s entry of a per-unit list of span indices, or None when there is no list."""
    return None if values is None else values[u]


def _levels(weights: np.ndarray) -> np.ndarray:
    """``round(4088 · w / max w)`` per unit row (0 for a row whose maximum is 0)."""
    top = weights.max(axis=-1, keepdims=True)  # [U, 1]
    rel = np.divide(weights, top, out=np.zeros_like(weights), where=top > 0)
    return np.rint(rel * _LEVELS).astype(np.int64)


def colour_bins(levels: np.ndarray) -> np.ndarray:
    """Colour bin ``ceil(BINS · level / 4088)`` in integers (as the page's script computes it)."""
    return (levels * BINS + _LEVELS - 1) // _LEVELS


def ranked_rows(scores: np.ndarray, gold: int | None) -> list[tuple[int, str, int, int]]:
    """Ranked rows ``(index, score text, bar width %, rank)``: the top :data:`RANKED` by
    score (ties by index), and the gold item with its rank when it is ranked lower."""
    order = np.argsort(-scores, kind="stable")
    keep = [int(i) for i in order[:RANKED]]
    if gold is not None and gold not in keep:
        keep.append(gold)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    top = float(scores[order[0]])
    return [
        (
            i,
            fmt(float(scores[i])),
            round(100 * min(max(float(scores[i]) / top, 0.0), 1.0)) if top > 0 else 0,
            int(rank[i]),
        )
        for i in keep
    ]


def snippet(text: str) -> str:
    """A span's text on one line, cut to :data:`_SNIPPET` characters; blank tokens shown."""
    flat = " ".join(text.split())
    if not flat:
        return text.replace("\n", "⏎").replace(" ", "␣").replace("\t", "⇥") or "∅"
    return flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1].rstrip() + "…"


def page_data(
    methods: list[Method],
    units: Sequence[str],
    gold: list[int | None] | None,
    ranked: list[list[list[tuple[int, str, int, int]]]],
    snippets: Mapping[int, str],
    selected: int,
    finished: bool,
    target: str,
) -> str:
    """The JSON read by the page's script, safe inside ``<script>`` (no ``<`` left raw)."""
    data = {
        "units": list(units),
        "selected": selected,
        "finished": bool(finished),
        "gold": gold,
        "bins": BINS,
        "levels": _LEVELS,
        "target": target,
        "snippets": {str(i): text for i, text in snippets.items()},
        "methods": [
            {
                "key": m.key,
                "label": m.label,
                "codes": [_encode(row) for row in m.levels],
                "max": [fmt(float(v)) for v in m.weights.max(axis=1)],
                "maxv": [float(v) for v in m.weights.max(axis=1)],
                "attributed": m.attributed,
                "ranked": [[list(r) for r in rows] for rows in per_unit],
            }
            for m, per_unit in zip(methods, ranked, strict=True)
        ],
    }
    # `<` only occurs inside JSON strings, where \u003c decodes back to it: no `</script>`.
    return json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":")).replace(
        "<", "\\u003c"
    )


def _encode(levels: np.ndarray) -> str:
    """Levels 0..4088 as two base64url characters each (high 6 bits first)."""
    alphabet = np.frombuffer(B64.encode("ascii"), dtype=np.uint8)
    pairs = np.stack([alphabet[levels // 64], alphabet[levels % 64]], axis=-1)  # [token, 2]
    return pairs.astype(np.uint8).tobytes().decode("ascii")


def drawable_spans(spans: list[tuple[int, int]], tokens: int) -> list[tuple[int, int]]:
    """Spans as boxes: a token shared by two neighbouring spans goes to the first; nothing is
    boxed when spans nest or are single tokens (token granularity: the tokens are ranked)."""
    if len(spans) >= tokens:
        return []
    drawn: list[tuple[int, int]] = []
    for start, end in spans:
        start = max(start, drawn[-1][1]) if drawn else start
        if start >= end:
            return []
        drawn.append((start, end))
    return drawn


# --------------------------------------------------------------------------- validation


def validate(
    tokens: Sequence[str],
    panels: Mapping[str, np.ndarray],
    units: Sequence[str],
    spans: list[tuple[int, int]],
    attributed: Mapping[str, Sequence[int | None]],
    gold: Sequence[int | None],
    selected: int,
    span_scores: Mapping[str, np.ndarray],
) -> list[Method]:
    """Check every argument; the methods with their weights, levels, scores and choices."""
    if len(tokens) == 0:
        raise ValueError("tokens must not be empty")
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError("tokens must all be str")
    if len(units) == 0:
        raise ValueError("units must not be empty")
    if not all(isinstance(u, str) for u in units):
        raise ValueError("units must all be str")
    if len(panels) == 0:
        raise ValueError("panels must hold at least one method's weights")
    expected = (len(units), len(tokens))
    n_spans = len(spans)
    for k, (start, end) in enumerate(spans):
        if not 0 <= start < end <= len(tokens):
            raise ValueError(
                f"spans[{k}] = ({start}, {end}) must satisfy 0 <= start < end <= "
                f"len(tokens) = {len(tokens)}"
            )
    for (_, end), (start, _) in itertools.pairwise(sorted(spans)):
        if start < end:
            raise ValueError(f"spans must not overlap: a span starts at {start} before {end}")

    def check_index(name: str, index: int | None) -> None:
        if index is not None and not 0 <= index < n_spans:
            raise ValueError(f"{name} = {index} is not a span index (len(spans) = {n_spans})")

    for name, given in (("attributed", attributed), ("span_scores", span_scores)):
        unknown = sorted(set(given) - set(panels))
        if unknown:
            raise ValueError(f"{name} has labels that are not panels: {unknown}")
    if span_scores and not spans:
        raise ValueError("span_scores needs spans")
    methods = []
    for k, (label, raw) in enumerate(panels.items()):
        weights = _finite_matrix(
            f"panels[{label!r}]", raw, expected, "(len(units), len(tokens))", "weights"
        )
        if (weights < 0).any():
            raise ValueError(f"panels[{label!r}] has negative weights")
        per_unit = None
        if label in attributed:
            per_unit = plain_indices(attributed[label])
            if len(per_unit) != len(units):
                raise ValueError(
                    f"attributed[{label!r}] has {len(per_unit)} entries, expected "
                    f"len(units) = {len(units)}"
                )
            for u, index in enumerate(per_unit):
                check_index(f"attributed[{label!r}][{u}]", index)
        if label in span_scores:
            scores = _finite_matrix(
                f"span_scores[{label!r}]",
                span_scores[label],
                (len(units), n_spans),
                "(len(units), len(spans))",
                "scores",
            )
        elif spans:
            mass = np.stack([weights[:, s:e].sum(axis=1) for s, e in spans], axis=1)  # [U, S]
            total = mass.sum(axis=1, keepdims=True)
            scores = np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)
        else:
            scores = weights
        methods.append(Method(_key(k), str(label), weights, _levels(weights), scores, per_unit))
    if gold:
        if len(gold) != len(units):
            raise ValueError(f"gold has {len(gold)} entries, expected len(units) = {len(units)}")
        for u, index in enumerate(gold):
            check_index(f"gold[{u}]", index)
    if not 0 <= selected < len(units):
        raise ValueError(f"selected = {selected} is out of range for {len(units)} units")
    return methods


def _finite_matrix(
    name: str, raw: np.ndarray, shape: tuple[int, int], axes: str, values: str
) -> np.ndarray:
    """``raw`` as float64 of ``shape`` (``axes`` says what it counts) with finite ``values``;
    a ``ValueError`` naming the argument ``name`` otherwise."""
    matrix = np.asarray(raw, dtype=np.float64)
    if matrix.shape != shape:
        raise ValueError(f"{name} has shape {matrix.shape}, expected {axes} = {shape}")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name} has NaN or infinite {values}")
    return matrix
