"""A self-contained HTML view of token attributions (the paper's Fig. 7 / supplement Fig. 22).

The page shows the context **once**. A method switch (radio buttons styled as tabs) recolours
it per attribution method, a list of answer units selects the unit, and a side panel ranks the
candidate spans (or, without spans, the tokens) by score for the selected unit and method,
each row a jump link to the span in the context. A legend gives the colour scale with its
numeric ends, the attributed-span and gold-span markers; an answer cut by the token limit is
flagged in the header and in the unit list.

Design, for long contexts (a 3,000-token context gives a page of a few hundred kB):

* colour is a **class per token**, one per method: token ``t`` with weight ``w`` under method
  ``m`` (key ``a``, ``b``, ...) for the selected unit gets class ``a3`` for colour bin 3 of
  :data:`BINS` linear bins of ``w / max w``; a CSS rule per (method, bin) reads the checked
  radio (``#m-a:checked ~ .layout .ctx .a3``), so switching the method needs no JavaScript;
* every unit's weights travel in one ``<script type="application/json">`` blob, quantised to
  4096 levels of ``w / max w`` and written as two base64url characters per token; a small
  inline script re-classes the tokens, the span marks, the ranked lists and the legend when
  another unit is picked (``#unit=K`` in the URL selects unit K on load), and fills a token's
  tooltip on hover;
* without JavaScript the initially ``selected`` unit is fully rendered (colours for every
  method, ranked lists, legend) and the method switch works;
* the context scrolls in its own pane while the unit list and the ranked list stay in view.

Nothing is fetched: CSS and JS are inline, no fonts or images. Every user text is HTML-escaped
(or set with ``textContent`` by the script), and ``<`` is escaped inside the JSON blob. This
module only renders arrays: :func:`attribution_page` reads an ``Attribution`` through the
:class:`AttributionLike` protocol (no import of :mod:`rcstat.attribution`). The arguments, levels,
ranked rows and JSON blob are prepared in :mod:`rcstat.report.attribution_data`; the CSS and the
script are the fixed text of :mod:`rcstat.report.attribution_style`.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rcstat.files import write_atomic
from rcstat.report.attribution_data import (
    RANKED,
    Method,
    at_unit,
    colour_bins,
    drawable_spans,
    fmt,
    page_data,
    plain_indices,
    ranked_rows,
    snippet,
    validate,
)
from rcstat.report.attribution_style import DATA_ID, PALETTE, SCRIPT, STYLE, method_css

__all__ = [
    "attribution_html",
    "attribution_page",
    "save_attribution_html",
    "save_attribution_page",
]


class AttributionLike(Protocol):
    """What :func:`attribution_page` reads of an ``rcstat.attribution.Attribution``."""

    question: str
    answer: str
    attention: np.ndarray  # [unit, context token]
    context_start: int
    top_k: int | None

    # read-only: the result holds lists and literal types, narrower than these
    @property
    def units(self) -> Sequence[Any]: ...  # each with a ``.text``
    @property
    def span_tokens(self) -> Sequence[tuple[int, int]]: ...
    @property
    def context_tokens(self) -> Sequence[str]: ...
    @property
    def statistic(self) -> str: ...
    @property
    def head_ranking(self) -> str: ...
    @property
    def gold(self) -> Sequence[int | None]: ...
    @property
    def method(self) -> str: ...

    def heads_for(self, head_ranking: Any, top_k: int | None) -> list[tuple[int, int]]: ...

    def scores_for(
        self, head_ranking: Any, top_k: int | None
    ) -> tuple[np.ndarray, list[int | None]]: ...

    def attention_scores(self) -> tuple[np.ndarray, list[int | None]]: ...

    def token_weights(self, heads: Sequence[tuple[int, int]] | None = None) -> np.ndarray: ...


def attribution_html(
    tokens: Sequence[str],
    panels: Mapping[str, np.ndarray],
    units: Sequence[str],
    *,
    title: str = "rcstat attribution",
    question: str = "",
    answer: str = "",
    spans: Sequence[tuple[int, int]] = (),
    attributed: Mapping[str, Sequence[int | None]] | None = None,
    gold: Sequence[int | None] = (),
    selected: int = 0,
    span_scores: Mapping[str, np.ndarray] | None = None,
    finished: bool = True,
) -> str:
    """A complete, self-contained HTML document colouring the context by attribution weight.

    Parameters
    ----------
    tokens
        The context's token texts in order; ``"".join(tokens)`` is the text shown (once).
    panels
        Method label -> token weights ``[units, tokens]`` (finite, >= 0), one entry of the
        method switch per label, the first selected on load.
    units
        The answer units' texts, ``len(units) == weights.shape[0]``.
    title, question, answer
        Page title and the example's question and answer (shown in the header).
    spans
        Candidate spans as token ranges ``[start, end)``, non-empty and non-overlapping,
        labelled with their index in this sequence; ranked per unit and method. Without
        spans the tokens themselves are ranked.
    attributed
        Per method label, per unit: the index of the span that method attributes the unit to
        (``None``: undecided); outlined in the context and marked in the ranked list.
    gold
        Per unit: the gold span index, or ``None``; empty when unknown.
    selected
        The unit shown when the page opens (also without JavaScript).
    span_scores
        Per method label, the scores ``[units, len(spans)]`` (finite) that rank the spans.
        A method left out ranks its spans by the share of its token weight inside each span,
        ``Σ_{t∈span} w[u, t] / Σ_{spans} Σ_{t∈span} w[u, t]``.
    finished
        False when the answer was cut by the token limit: the page says so in the header
        and marks the last unit.

    Returns
    -------
    str
        The HTML document: inline CSS and JS, no network references.

    Raises
    ------
    ValueError
        On no panels, empty tokens or units, weights that are not ``[len(units), len(tokens)]``
        or not finite and non-negative, empty/overlapping/out-of-range spans, span indices
        out of range, span scores of the wrong shape or not finite, or ``selected`` out of
        range.

    Notes
    -----
    A token's colour for method ``m`` and unit ``u`` is bin ``ceil(8 · l / 4088)`` of its level
    ``l = round(4088 · w[u, t] / max_s w[u, s])`` (0, uncoloured, when the maximum is 0): eight
    linear steps of the weight relative to the largest, shown in the legend with the maximum.

    Examples
    --------
    >>> import numpy as np
    >>> page = attribution_html(["The", " cat"], {"all heads": np.array([[0.2, 0.8]])}, ["cat"])
    >>> page.startswith("<!doctype html>"), page.count('id="ctx"')
    (True, 1)
    >>> 'class="a2">The</span>' in page, 'class="a8"> cat</span>' in page  # bins 2 and 8 of 8
    (True, True)
    """
    spans = [(int(start), int(end)) for start, end in spans]
    methods = validate(
        tokens, panels, units, spans, attributed or {}, gold, selected, span_scores or {}
    )
    if not isinstance(finished, bool | np.bool_):
        raise ValueError(f"finished must be a bool, got {finished!r}")
    gold_list = plain_indices(gold) if gold else None
    ranked = [
        [ranked_rows(m.scores[u], at_unit(gold_list, u)) for u in range(len(units))]
        for m in methods
    ]
    target = "span-" if spans else "tok-"
    items = sorted({r[0] for per_unit in ranked for rows in per_unit for r in rows})
    snippets = {
        i: snippet("".join(tokens[slice(*spans[i])]) if spans else tokens[i]) for i in items
    }
    # tokens named by a ranked list of the selected unit get an id (jump links without JS)
    token_ids = set() if spans else {r[0] for per_unit in ranked for r in per_unit[selected]}
    context = _render_context(tokens, spans, methods, gold_list, selected, token_ids)
    lists = "".join(
        _render_ranked(m, rows[selected], selected, gold_list, target, snippets)
        for m, rows in zip(methods, ranked, strict=True)
    )
    radios = "".join(
        f'<input type="radio" class="method" name="method" id="m-{m.key}" data-k="{k}" '
        f'data-method="{_esc(m.label)}"{" checked" if k == 0 else ""}>'
        for k, m in enumerate(methods)
    )
    tabs = "".join(f'<label for="m-{m.key}">{_esc(m.label)}</label>' for m in methods)
    n_items = len(spans) if spans else len(tokens)
    noun = "spans" if spans else "tokens"
    span_count = f" · {_count(len(spans), 'span')}" if spans else ""
    header = _render_header(title, question, answer, finished)
    blob = page_data(methods, units, gold_list, ranked, snippets, selected, finished, target)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{STYLE}{method_css(methods)}</style></head>"
        f'<body><main id="rcstat-attribution" data-unit="{selected}">{radios}{header}'
        '<div class="layout"><aside>'
        '<section class="card units-card"><h2>Answer units</h2>'
        f"{_render_units(units, selected, finished)}</section>"
        '<section class="card rank-card"><h2>Ranked '
        f'{noun} <span class="what">· unit <span class="unit-no">{selected + 1}</span> · '
        + "".join(f'<span class="only o-{m.key}">{_esc(m.label)}</span>' for m in methods)
        + f"</span></h2>{lists}"
        f'<p class="count">Top {min(RANKED, n_items)} of {_count(n_items, noun[:-1])} by '
        "score; click a row to jump to it.</p></section></aside>"
        '<section class="card ctx-card"><h2>Context '
        f'<span class="what">· {_count(len(tokens), "token")}{span_count}</span></h2>'
        '<div class="toolbar"><div><span class="lbl">Method</span>'
        f'<span class="tabs" role="group" aria-label="attribution method">{tabs}</span></div>'
        f"{_render_legend(methods, selected, bool(spans), gold_list is not None)}</div>"
        "<noscript><p>JavaScript is off: the page shows answer unit "
        f"{selected + 1}; the method switch and jump links still work.</p></noscript>"
        f'<div class="ctx" id="ctx" tabindex="0">{context}</div></section></div></main>'
        f'<script type="application/json" id="{DATA_ID}">{blob}</script>'
        f"<script>{SCRIPT}</script></body></html>"
    )


def attribution_page(
    attribution: AttributionLike, *, unit: int = 0, title: str = "rcstat attribution"
) -> str:
    """The page of an ``rcstat.attribution.Attribution`` (read by duck typing).

    Three methods: the result's own configuration, all heads (when the configuration is not
    already all heads) and the mean-attention baseline, each with its exact span scores
    (eq. 10, or the normalised attention mass). The answer is flagged as cut when the
    result's ``finished`` attribute is False (missing: taken as finished).
    """
    a = attribution
    first = a.context_start
    spans = drawable_spans(
        [(s - first, e - first) for s, e in a.span_tokens], len(a.context_tokens)
    )
    own = a.scores_for(a.head_ranking, a.top_k)
    panels = {a.method: a.token_weights()}
    scores = {a.method: own}
    if a.head_ranking != "all":
        label = (
            "all heads (RC)"
            if a.statistic == "expected"
            else f"all heads (RC, {a.statistic} bound)"
        )
        panels[label] = a.token_weights(a.heads_for("all", None))
        scores[label] = a.scores_for("all", None)
    attention = np.asarray(a.attention, dtype=np.float64)  # [U, C]
    totals = attention.sum(axis=1, keepdims=True)
    panels["mean attention"] = np.divide(
        attention, totals, out=np.zeros_like(attention), where=totals > 0
    )
    scores["mean attention"] = a.attention_scores()
    return attribution_html(
        a.context_tokens,
        panels,
        [u.text for u in a.units],
        title=title,
        question=a.question,
        answer=a.answer,
        spans=spans,
        attributed={k: v[1] for k, v in scores.items()} if spans else None,
        span_scores={k: v[0] for k, v in scores.items()} if spans else None,
        gold=a.gold,
        selected=unit,
        finished=bool(getattr(a, "finished", True)),
    )


def save_attribution_html(
    path: str | os.PathLike[str],
    tokens: Sequence[str],
    panels: Mapping[str, np.ndarray],
    units: Sequence[str],
    **options: Any,
) -> Path:
    """Write :func:`attribution_html` to ``path`` atomically; ``options`` go to it unchanged.

    The document is written through :func:`rcstat.files.write_atomic`, so a reader never
    sees a half-written page.

    Returns
    -------
    Path
        ``path``.
    """
    return write_atomic(path, attribution_html(tokens, panels, units, **options))


def save_attribution_page(
    path: str | os.PathLike[str],
    attribution: AttributionLike,
    *,
    unit: int = 0,
    title: str = "rcstat attribution",
) -> Path:
    """Write :func:`attribution_page` of ``attribution`` to ``path`` atomically.

    Returns
    -------
    Path
        ``path``.
    """
    return write_atomic(path, attribution_page(attribution, unit=unit, title=title))


# --------------------------------------------------------------------------- rendering


def _esc(text: str) -> str:
    """HTML-escaped text, quotes included (safe in element content and attribute values)."""
    return html.escape(text, quote=True)


def _count(n: int, noun: str) -> str:
    """``"1 span"``, ``"3,000 tokens"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _render_header(title: str, question: str, answer: str, finished: bool) -> str:
    rows = []
    if question:
        rows.append(f"<dt>Question</dt><dd>{_esc(question)}</dd>")
    if answer:
        cut = "" if finished else ' <span class="pill cut">cut at the token limit</span>'
        rows.append(f"<dt>Answer</dt><dd>{_esc(answer)}{cut}</dd>")
    warning = (
        ""
        if finished
        else '<p class="warn" id="cut-warning" role="alert"><b>⚠ Answer cut at the token '
        "limit.</b> Generation stopped at <code>max_new_tokens</code> before the answer "
        "ended: the last unit is incomplete and its attribution may mislead.</p>"
    )
    qa = f'<dl class="qa">{"".join(rows)}</dl>' if rows else ""
    return f"<header><h1>{_esc(title)}</h1>{qa}{warning}</header>"


def _render_units(units: Sequence[str], selected: int, finished: bool) -> str:
    items = []
    for u, text in enumerate(units):
        on = u == selected
        cut = ' <span class="pill cut">cut</span>' if not finished and u == len(units) - 1 else ""
        items.append(
            f'<li><button type="button" class="unit{" active" if on else ""}" data-unit="{u}" '
            f'aria-pressed="{"true" if on else "false"}"><span class="n">{u + 1}</span>'
            f'<span class="t">{_esc(text.strip())}{cut}</span></button></li>'
        )
    return f'<ol class="units" aria-label="answer units">{"".join(items)}</ol>'


def _render_legend(methods: list[Method], unit: int, spans: bool, gold: bool) -> str:
    swatches = "".join(f'<i style="background:{c}"></i>' for c in PALETTE)
    ends = "".join(
        f'<span class="end max only o-{m.key}">{fmt(float(m.weights[unit].max()))}</span>'
        for m in methods
    )
    keys = []
    if spans:
        keys.append(
            '<span class="key"><span class="mk att"></span>span the method attributes the '
            "unit to</span>"
        )
    if gold:
        keys.append('<span class="key"><span class="mk gold"></span>gold span</span>')
    return (
        '<div class="legend" aria-label="legend">'
        '<span class="scale" title="Colour: a token\'s weight for the selected answer unit '
        'under the selected method, in 8 linear steps from 0 to the largest weight">'
        '<span class="lbl">Token weight</span><span class="end">0</span>'
        f'<span class="sw">{swatches}</span>{ends}</span>{"".join(keys)}</div>'
    )


def _render_context(
    tokens: Sequence[str],
    spans: list[tuple[int, int]],
    methods: list[Method],
    gold: list[int | None] | None,
    unit: int,
    token_ids: set[int],
) -> str:
    """The context once: a ``<span>`` per token with one class per method (key + bin)."""
    bins = [colour_bins(m.levels[unit]) for m in methods]  # per method [token]

    def toks(start: int, end: int) -> str:
        out = []
        for t in range(start, end):
            cls = " ".join(f"{m.key}{b[t]}" for m, b in zip(methods, bins, strict=True) if b[t])
            attrs = (f' id="tok-{t}"' if t in token_ids else "") + (
                f' class="{cls}"' if cls else ""
            )
            out.append(f"<span{attrs}>{_esc(tokens[t])}</span>")
        return "".join(out)

    parts, cursor = [], 0
    for k in sorted(range(len(spans)), key=lambda k: spans[k][0]):
        start, end = spans[k]
        parts.append(toks(cursor, start))
        marks = " gold" if gold is not None and gold[unit] == k else ""
        marks += "".join(
            f" at-{m.key}" for m in methods if m.attributed is not None and m.attributed[unit] == k
        )
        parts.append(
            f'<span class="box{marks}" id="span-{k}" data-span="{k}">'
            f'{toks(start, end)}<sup class="tag">{k}</sup></span>'
        )
        cursor = end
    parts.append(toks(cursor, len(tokens)))
    return "".join(parts)


def _render_ranked(
    method: Method,
    rows: list[tuple[int, str, int, int]],
    unit: int,
    gold: list[int | None] | None,
    target: str,
    snippets: Mapping[int, str],
) -> str:
    """One method's ranked list for ``unit`` (the page's script builds the same markup)."""
    items, prev = [], 0
    for index, score, width, rank in rows:
        if rank != prev + 1:
            items.append('<li class="gap">⋯</li>')
        prev = rank
        is_gold = at_unit(gold, unit) == index
        cls = " ".join(
            name
            for name, on in (
                ("att", method.attributed is not None and method.attributed[unit] == index),
                ("gold", is_gold),
            )
            if on
        )
        sid = str(index) if target == "span-" else f"#{index}"
        pill = ' <span class="pill gold">gold</span>' if is_gold else ""
        li = f'<li class="{cls}">' if cls else "<li>"
        items.append(
            f'{li}<a href="#{target}{index}">'
            f'<span class="rk">{rank}</span><span class="txt"><span class="sid">{sid}</span>'
            f"{_esc(snippets[index])}{pill}</span>"
            f'<span class="sc">{score}</span><span class="bar"><i style="width:{width}%"></i>'
            "</span></a></li>"
        )
    return f'<ol class="ranked only o-{method.key}">{"".join(items)}</ol>'
