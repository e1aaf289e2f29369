"""A self-contained HTML view of a grounding result (:class:`~rcstat.grounding.Grounding`).

The page has a header (the verdict, the response's score against the threshold, the model,
the probe's score, a warning when the response was cut at one pass's tokens, the same-pass
baselines), a legend, and the response beside its context. The verdict is the result's
(``supported``, ``unsupported`` or ``unverified``): an unverified response — no checked
sentence unsupported, but part of it not checked — has its own badge and a line that says so.

* Every response token is a ``<span>`` coloured by its grounding score relative to the
  threshold (:mod:`rcstat.report.score_scale`: a log scale centred on it, red to yellow below
  it, light to dark green at or above it): class ``g0`` .. ``g4`` below, ``g5`` .. ``g9`` at
  or above, ``gx`` (grey) for NaN; its ``title`` gives the score.
* The tokens of each sentence sit inside one focusable ``<span class="sent">``; tokens outside
  every sentence (whitespace between sentences) sit between them. An unsupported sentence has
  the class ``unsupported`` and ``data-supported="false"``, a dashed red outline and a
  "⚠ unsupported" badge; a sentence that could not be checked (past the cut of a response too
  long for one pass) has the class ``unverified``, ``data-supported="false"``, a
  dotted amber outline and an "unverified" badge. Each sentence carries its status in
  ``data-status``.
* The context is shown once, cut at the boundaries of every supporting span into pieces
  (``<span class="seg" data-start data-end>``), so each span is a run of whole pieces. A click
  on a sentence (or Enter / Space while it has focus) marks the pieces of its support (class
  ``hl``; one sentence at a time), scrolls the first into view and shows the sentence's score
  and support share above the context; a sentence without support says "no supporting span".
  The per-sentence data ride in one JSON blob (:func:`~rcstat.report.html.script_json`); the
  script writes user text with ``textContent`` only.

Nothing is fetched: CSS and JS are inline. Every user text is HTML-escaped, carriage returns as
``&#13;`` (a browser would drop them from the text and shift the character offsets of the
supporting spans). The grounding is read through the protocols of
:mod:`rcstat.report.grounding_view`; this module imports no application, and applications do
not import it: a caller renders a result with ``grounding_page(result)`` or
``save_grounding_html(path, result)``.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rcstat.files import write_atomic
from rcstat.report.grounding_style import DATA_ID, SCRIPT, STYLE
from rcstat.report.grounding_view import GroundingView, SentenceView, SpanView
from rcstat.report.html import (
    html_table,
    script_json,
)
from rcstat.report.score_scale import BINS, bin_edges, decades, score_bins, token_label

__all__ = ["PALETTE", "grounding_page", "save_grounding_html"]

PALETTE = (
    "#a50026",
    "#d73027",
    "#f46d43",
    "#fdae61",
    "#fee08b",
    "#d9ef8b",
    "#a6d96a",
    "#66bd63",
    "#1a9850",
    "#006837",
)
"""One colour per bin, low to high (ColorBrewer "RdYlGn": red = unsupported, green = supported)."""

_WHITE_TEXT = frozenset({0, 1, 9})  # bins dark enough for white text (contrast >= 4.5)
_NAN_COLOUR = "#d0d7de"
_CUT = "the response was cut at the tokens of one pass (max_tokens)"
_UNVERIFIED_BADGE = '<span class="badge unverified">unverified</span>'
_UNVERIFIED_KEY = (
    '<span class="key"><span class="mk sent unverified">sentence</span>'
    f"{_UNVERIFIED_BADGE}sentence not checked (past the cut of a response too long for one "
    "pass: max_tokens)</span>"
)


def grounding_page(grounding: GroundingView, *, title: str = "rcstat grounding") -> str:
    """A complete, self-contained HTML document of a grounding result.

    Parameters
    ----------
    grounding
        The result, e.g. a :class:`rcstat.grounding.Grounding` (read through
        :class:`~rcstat.report.grounding_view.GroundingView`: ``context``, ``question``,
        ``response``, ``token_texts``, ``token_scores``, ``sentences``, ``score``,
        ``threshold``, ``supported``, ``verdict``, ``baselines``, ``probe_score``, ``method``,
        ``model``, ``finished``).
    title
        The page's title.

    The page is one HTML document with inline CSS and JS and no network reference. A
    ``ValueError`` is raised when ``token_scores`` does not have one score per token, a
    sentence's token range is out of ``[0, len(token_texts)]``, reversed or overlaps the
    previous sentence's, or a supporting span is out of the context.

    Notes
    -----
    A token with score ``s`` is coloured by its bin of :data:`PALETTE` against the threshold
    ``t`` (:func:`~rcstat.report.score_scale.score_bins`: bins 0–4 below ``t``, 5–9 at or
    above, each ``D / 5`` decades of ``s / t`` wide with ``D = clamp(log10(1 / t), 1, 6)``),
    grey when ``s`` is NaN. The question is shown only when the user gave one
    (``question_given``), not the default instruction.

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> g = SimpleNamespace(context="Cats purr.", question="", question_given=False,
    ...     response="Cats purr.",
    ...     token_texts=["Cats", " purr", "."], token_scores=np.array([0.92, 0.15, np.nan]),
    ...     sentences=[], score=float("nan"), threshold=0.5, supported=False,
    ...     verdict="unverified", baselines={}, probe_score=None, method={}, model="m",
    ...     finished=True)
    >>> page = grounding_page(g)
    >>> '<span class="tok g6" title="score 0.920">Cats</span>' in page
    True
    >>> '<span class="tok g2" title="score 0.150"> purr</span>' in page, 'class="tok gx"' in page
    (True, True)
    """
    g = grounding
    tokens = [str(t) for t in g.token_texts]
    scores = np.asarray(g.token_scores, dtype=np.float64).reshape(-1)
    sentences = list(g.sentences)
    _validate(tokens, scores, sentences, g.context)
    score = float(g.score)
    threshold = float(g.threshold)
    # the detector scores tokens on their own scale; the zero-shot tokens share the response's
    token_threshold = getattr(g, "token_threshold", None)
    colour_threshold = threshold if token_threshold is None else float(token_threshold)
    by_spans = token_threshold is not None  # a trained detector's: sentences by their spans
    unsupported = _unsupported_tokens(g, len(tokens))
    data = {
        "threshold": _score(threshold),
        "sentences": [
            {
                "text": s.text,
                "score": _score(float(s.score)),
                "supported": bool(s.supported),
                "status": str(s.status),
                "support": _offsets(s.support),
                "share": "n/a" if s.support_share is None else _share(float(s.support_share)),
            }
            for s in sentences
        ],
    }
    n_unsupported = sum(s.status == "unsupported" for s in sentences)
    n_unverified = sum(s.status == "unverified" for s in sentences)
    flagged = "".join(
        f" · {n} {what}"
        for n, what in ((n_unsupported, "unsupported"), (n_unverified, "unverified"))
        if n
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{STYLE}{_palette_css()}</style></head>"
        '<body><main id="rcstat-grounding">'
        f"{_render_header(g, title, score, threshold, sentences)}"
        f"{_render_legend(colour_threshold, unverified=n_unverified > 0, by_spans=by_spans)}"
        '<div class="layout"><section class="card"><h2>Response <span class="what">· '
        f"{_count(len(tokens), 'token')} · {_count(len(sentences), 'sentence')}{flagged}"
        "</span></h2>"
        '<div class="pane resp" id="response">'
        f"{_render_response(tokens, scores, sentences, colour_threshold, unsupported)}"
        "</div></section>"
        '<section class="card"><h2>Context <span class="what">· '
        f"{_count(len(g.context), 'character')}</span></h2>"
        '<div class="detail" id="detail" aria-live="polite"><p class="hint">Click a sentence '
        "of the response (or focus it and press Enter) to show the context span that supports "
        "it.</p></div>"
        "<noscript><p>JavaScript is off: the supporting spans are not shown.</p></noscript>"
        f'<div class="pane ctx" id="ctx" tabindex="0">{_render_context(g.context, sentences)}'
        "</div></section></div></main>"
        f'<script type="application/json" id="{DATA_ID}">{script_json(data)}</script>'
        f"<script>{SCRIPT}</script></body></html>"
    )


def save_grounding_html(
    path: str | os.PathLike[str], grounding: GroundingView, *, title: str = "rcstat grounding"
) -> Path:
    """Write :func:`grounding_page` to ``path`` atomically (a temporary file in the same folder,
    moved over ``path``), as ``save_attribution_html`` does.

    Returns
    -------
    Path
        ``path``.
    """
    return write_atomic(path, grounding_page(grounding, title=title))


# --------------------------------------------------------------------------- rendering


def _esc(text: str) -> str:
    """HTML-escaped text, quotes included; CR as a character reference (a browser drops a raw
    one) and NUL as U+FFFD (as a browser would read it), so character offsets stay right."""
    return html.escape(text, quote=True).replace("\r", "&#13;").replace("\x00", "\ufffd")


def _score(value: float) -> str:
    """A grounding score in [0, 1] with 3 decimals; ``n/a`` for NaN."""
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def _offsets(span: SpanView | None) -> list[int] | None:
    return None if span is None else [int(span.start), int(span.end)]


def _share(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.0f}%"


def _value(value: float | None) -> str:
    """A baseline's value (any range) with 4 significant digits; ``n/a`` for None or NaN."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.4g}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _palette_css() -> str:
    rules = [
        f".g{b}{{background:{c}{';color:#fff' if b in _WHITE_TEXT else ''}}}"
        for b, c in enumerate(PALETTE)
    ]
    return "".join(rules) + f".gx{{background:{_NAN_COLOUR}}}"


def _render_header(
    g: GroundingView, title: str, score: float, threshold: float, sentences: Sequence[SentenceView]
) -> str:
    n_unsupported = sum(s.status == "unsupported" for s in sentences)
    n_unverified = sum(s.status == "unverified" for s in sentences)
    note = ""
    if math.isnan(score):
        verdict = '<span class="verdict none" id="verdict" data-verdict="none">no score</span>'
    elif g.verdict == "unverified":
        verdict = (
            '<span class="verdict unverified" id="verdict" data-verdict="unverified">'
            "? unverified</span>"
        )
        past = f" ({_count(n_unverified, 'sentence')} past the cut)" if n_unverified else ""
        note = (
            '<p class="verdict-note" id="verdict-note"><b>Unverified:</b> no checked sentence '
            f"scores below the threshold, but part of the response could not be checked{past}."
            "</p>"
        )
    elif g.supported:
        verdict = (
            '<span class="verdict ok" id="verdict" data-verdict="supported">✓ supported</span>'
        )
    else:
        verdict = (
            '<span class="verdict bad" id="verdict" data-verdict="unsupported">⚠ unsupported</span>'
        )
    counted = f"{len(sentences)} · {n_unsupported} unsupported"
    if n_unverified:
        counted += f" · {n_unverified} unverified"
    facts = [
        ("score", "Score", _score(score)),
        ("threshold", "Threshold", _score(threshold)),
        ("sentences", "Sentences", counted),
        ("model", "Model", g.model or "unknown"),
    ]
    if g.probe_score is not None:
        facts.append(("probe", "Probe P(unsupported)", _score(float(g.probe_score))))
    dl = "".join(
        f'<div><dt>{_esc(name)}</dt><dd data-fact="{key}">{_esc(text)}</dd></div>'
        for key, name, text in facts
    )
    warning = (
        ""
        if g.finished
        else '<p class="warn" id="cut-warning" role="alert"><b>⚠ Incomplete response:</b> '
        f"{_CUT}; its last sentence is incomplete and the scores cover only what fit.</p>"
    )
    question = (  # only a question the user gave, not the default instruction
        f'<dl class="qa"><dt>Question</dt><dd>{_esc(g.question)}</dd></dl>'
        if g.question and g.question_given
        else ""
    )
    extras = []
    if g.baselines:
        rows = [[name, _value(v)] for name, v in g.baselines.items()]
        extras.append(
            '<div class="baselines" id="baselines"><h2>Baselines (higher = supported)</h2>'
            f"{html_table(['baseline', 'score'], rows, text_columns=[0])}</div>"
        )
    if g.method:
        config = json.dumps(g.method, indent=1, ensure_ascii=False, default=str)
        extras.append(
            f"<details><summary>Configuration</summary><pre>{_esc(config)}</pre></details>"
        )
    more = f'<div class="extras">{"".join(extras)}</div>' if extras else ""
    return (
        f"<header><h1><span>{_esc(title)}</span>{verdict}</h1>"
        f'<dl class="facts">{dl}</dl>{note}{warning}{question}{more}</header>'
    )


def _render_legend(threshold: float, *, unverified: bool = False, by_spans: bool = False) -> str:
    """The colour scale and the markers. ``by_spans``: a trained detector's result, whose token
    threshold colours the tokens and whose sentences are unsupported where an unsupported span
    lies (a supported response may hold tokens below it: the words its token model doubts)."""
    edges = bin_edges(threshold)
    swatches = "".join(
        f'<i class="g{b}" title="{_value(low)}–{_value(high)}"></i>'
        for b, (low, high) in enumerate(edges)
    )
    name = "span threshold" if by_spans else "threshold"
    tick = (  # between the last bin below the threshold and the first at or above it
        f'<b class="tick" style="left:50%" title="{name} {_score(threshold)}"></b>'
        if not math.isnan(threshold)
        else ""
    )
    step = 10 ** (decades(threshold) / (BINS // 2))
    if by_spans:
        red = "doubted; unsupported inside an underlined span"
        end = f"below the {name} {_esc(_score(threshold))}"
        sentence_key = "an unsupported span (underlined) lies in the sentence"
    else:
        red = "unsupported"
        end = f"below the {name}"
        sentence_key = f"sentence score below the threshold {_esc(_score(threshold))}"
    return (
        '<div class="legend" id="legend" aria-label="legend">'
        '<span class="scale" title="Colour: a response token\'s grounding score against the '
        f"{name} {_esc(_score(threshold))}, on a log scale (each step ×{step:.1f}): red "
        f'below it ({red}), green at or above it (supported); the bar marks it">'
        f'<span class="lbl">Token score</span><span class="end">{end}</span>'
        f'<span class="sw">{swatches}{tick}</span><span class="end">at or above it '
        f"(log scale, ×{step:.1f} a step)</span></span>"
        '<span class="key"><i class="gx"></i>no score</span>'
        '<span class="key"><span class="mk sent unsupported">sentence</span>'
        f'<span class="badge">⚠ unsupported</span>{sentence_key}</span>'
        f"{_UNVERIFIED_KEY if unverified else ''}"
        '<span class="key"><span class="mk hl">span</span>context span supporting the '
        "selected sentence</span></div>"
    )


def _unsupported_tokens(g: GroundingView, count: int) -> np.ndarray:
    """``[G]`` bool: the tokens inside an unsupported span of the result (none when it has no
    ``spans`` or no ``token_spans``)."""
    marked = np.zeros(count, dtype=bool)
    offsets = getattr(g, "token_spans", None)
    if offsets is None:
        return marked
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)[:count]
    for span in getattr(g, "spans", ()):
        marked[: len(offsets)] |= (offsets[:, 1] > span.start) & (offsets[:, 0] < span.end)
    return marked


def _render_response(
    tokens: list[str],
    scores: np.ndarray,
    sentences: Sequence[SentenceView],
    threshold: float,
    unsupported: np.ndarray,
) -> str:
    """Token spans coloured against ``threshold`` (those of an unsupported span underlined),
    those of each sentence inside its focusable sentence element."""
    bins = score_bins(scores, threshold)

    def toks(start: int, end: int) -> str:
        out = []
        for t in range(start, end):
            b = int(bins[t])
            cls = f"g{b}" if b >= 0 else "gx"
            note = "; in an unsupported span" if unsupported[t] else ""
            if unsupported[t]:
                cls += " uns"
            out.append(
                f'<span class="tok {cls}" title="score {token_label(float(scores[t]))}{note}">'
                f"{_esc(tokens[t])}</span>"
            )
        return "".join(out)

    parts, cursor = [], 0
    for i, s in enumerate(sentences):
        first, last = s.tokens
        parts.append(toks(cursor, first))
        supported, status = bool(s.supported), str(s.status)
        if status == "unverified":
            cls, badge = " unverified", _UNVERIFIED_BADGE
        elif supported:
            cls, badge = "", ""
        else:
            cls, badge = " unsupported", '<span class="badge">⚠ unsupported</span>'
        parts.append(
            f'<span class="sent{cls}" id="sent-{i}" data-sentence="{i}" '
            f'data-supported="{"true" if supported else "false"}" data-status="{_esc(status)}" '
            f'tabindex="0" role="button" aria-pressed="false" aria-controls="detail">'
            f"{toks(first, last)}{badge}</span>"
        )
        cursor = last
    parts.append(toks(cursor, len(tokens)))
    return "".join(parts)


def _render_context(context: str, sentences: Sequence[SentenceView]) -> str:
    """The context once, cut at every support boundary; pieces inside a support are spans."""
    supports = [
        (int(s.support.start), int(s.support.end)) for s in sentences if s.support is not None
    ]
    cuts = sorted({0, len(context)} | {x for span in supports for x in span})
    parts = []
    for a, b in itertools.pairwise(cuts):
        text = _esc(context[a:b])
        if any(start <= a and b <= end for start, end in supports):
            parts.append(f'<span class="seg" data-start="{a}" data-end="{b}">{text}</span>')
        else:
            parts.append(text)
    return "".join(parts)


# --------------------------------------------------------------------------- validation


def _validate(
    tokens: list[str], scores: np.ndarray, sentences: Sequence[SentenceView], context: str
) -> None:
    """Check what the page relies on; ``ValueError`` naming the field and the problem."""
    if scores.shape != (len(tokens),):
        raise ValueError(
            f"grounding.token_scores has shape {scores.shape}, expected one score per token "
            f"({len(tokens)},)"
        )
    previous = 0
    for i, s in enumerate(sentences):
        first, last = (int(x) for x in s.tokens)
        if not 0 <= first <= last <= len(tokens):
            raise ValueError(
                f"grounding.sentences[{i}].tokens = ({first}, {last}) must satisfy "
                f"0 <= first <= last <= len(token_texts) = {len(tokens)}"
            )
        if first < previous:
            raise ValueError(
                f"grounding.sentences[{i}].tokens = ({first}, {last}) overlaps or precedes the "
                f"previous sentence (which ends at token {previous})"
            )
        previous = last
        support = s.support
        if support is not None and not 0 <= support.start <= support.end <= len(context):
            raise ValueError(
                f"grounding.sentences[{i}].support = ({support.start}, {support.end}) must "
                f"satisfy 0 <= start <= end <= len(context) = {len(context)}"
            )
