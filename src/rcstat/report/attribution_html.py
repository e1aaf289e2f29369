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
module only renders arrays: :func:`attribution_page` reads an ``Attribution`` by duck typing
(no import of :mod:`rcstat.attribution`).
"""

from __future__ import annotations

import html
import itertools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["BINS", "attribution_html", "attribution_page", "save_attribution_html"]

BINS = 8
"""Colour bins: bin ``b`` (1..8) holds tokens with ``(b - 1)/8 < w / max w <= b/8`` (the
relative weight rounded to 1/4088 first); bin 0, uncoloured, those that round to 0."""

# w / max w is quantised to 0..4088 in the blob (two base64url characters); 4088 = 8 · 511, so
# a relative weight of exactly b/8 is level 511·b and lands in bin b
_LEVELS = 8 * 511
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_RANKED = 10  # rows of a ranked list (the gold span is added below when ranked lower)
_SNIPPET = 90  # characters of a span's text shown in a ranked row
_DATA_ID = "rcstat-attribution-data"
# light to dark orange (after ColorBrewer "Oranges"), one colour per bin; white text from bin 7
# (contrast >= 4.5 against #1f2328 below, against white from there)
_PALETTE = ("#fff1e3", "#fee0c1", "#fdc692", "#fda762", "#fd8d3c", "#e9661a", "#c84c0a", "#9a3a06")
_DARK_FROM = 7

_STYLE = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--accent:#0969da;
--gold:#1a7f37;--warn:#9a6700;--warn-bg:#fff8c5;color-scheme:light}
*{box-sizing:border-box}
html,body{margin:0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:#fff}
main{display:flex;flex-direction:column;height:100vh;min-height:520px;padding:14px 18px;gap:12px}
input.method{position:absolute;opacity:0;width:1px;height:1px;margin:0;pointer-events:none}
header{flex:none;max-height:34vh;overflow:auto}
h1{font-size:18px;margin:0 0 6px}
dl.qa{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 12px;margin:0}
dl.qa dt{color:var(--muted);font-weight:600}
dl.qa dd{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
.warn{margin:8px 0 0;padding:6px 10px;border:1px solid #d4a72c;border-radius:6px;
background:var(--warn-bg);color:#4d3800}
.warn b{color:var(--warn)}
.pill{display:inline-block;font-size:11px;line-height:16px;padding:0 6px;border-radius:8px;
font-weight:600;vertical-align:1px;white-space:nowrap}
.pill.cut{background:var(--warn-bg);color:var(--warn);border:1px solid #d4a72c}
.pill.gold{background:#dafbe1;color:var(--gold);border:1px solid #4ac26b}
.layout{flex:1;min-height:0;display:grid;grid-template-columns:minmax(260px,340px) minmax(0,1fr);
gap:14px}
aside{display:flex;flex-direction:column;gap:12px;min-height:0}
.card{border:1px solid var(--line);border-radius:8px;display:flex;flex-direction:column;
min-height:0;overflow:hidden}
.card>h2{flex:none;font-size:12px;font-weight:600;letter-spacing:.03em;text-transform:uppercase;
color:var(--muted);margin:0;padding:7px 12px;border-bottom:1px solid var(--line);
background:var(--soft)}
.card>h2 .what{text-transform:none;letter-spacing:0;color:var(--fg)}
.units-card{flex:0 1 auto;max-height:42%}
ol.units,ol.ranked{list-style:none;margin:0;padding:6px;overflow:auto;min-height:0}
button.unit{display:flex;gap:8px;width:100%;text-align:left;font:inherit;color:inherit;
border:1px solid transparent;border-radius:6px;background:none;padding:5px 8px;cursor:pointer}
button.unit:hover{background:var(--soft)}
button.unit.active{background:#ddf4ff;border-color:#54aeff}
button.unit .n,.rk{color:var(--muted);font-variant-numeric:tabular-nums;flex:none;min-width:1.4em}
button.unit .t{white-space:pre-wrap;overflow-wrap:anywhere}
.rank-card{flex:1 1 auto}
ol.ranked li a{display:grid;grid-template-columns:1.6em minmax(0,1fr) auto;gap:2px 8px;
padding:5px 8px;border-radius:6px;color:inherit;text-decoration:none;border:1px solid transparent}
ol.ranked li a:hover{background:var(--soft);border-color:var(--line)}
ol.ranked li.att a{border-left:3px solid var(--accent)}
ol.ranked .txt{overflow:hidden;display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;
overflow-wrap:anywhere}
ol.ranked .sid{color:var(--accent);font-weight:600;margin-right:4px}
ol.ranked .sc{font-variant-numeric:tabular-nums;font-weight:600}
ol.ranked .bar{grid-column:2/4;height:4px;background:var(--soft);border-radius:2px}
ol.ranked .bar i{display:block;height:100%;background:#fd8d3c;border-radius:2px}
ol.ranked li.gap{color:var(--muted);text-align:center;line-height:1}
p.count{flex:none;margin:0;padding:6px 12px;border-top:1px solid var(--line);color:var(--muted);
font-size:12px}
.ctx-card{min-width:0}
.toolbar{flex:none;display:flex;flex-wrap:wrap;align-items:center;gap:8px 18px;padding:8px 12px;
border-bottom:1px solid var(--line);background:var(--soft)}
.toolbar .lbl{color:var(--muted);font-size:12px;font-weight:600;margin-right:6px}
.tabs{display:inline-flex;flex-wrap:wrap;border:1px solid var(--line);border-radius:6px;
overflow:hidden;background:#fff}
.tabs label{padding:3px 10px;cursor:pointer;border-left:1px solid var(--line);user-select:none}
.tabs label:first-child{border-left:0}
.tabs label:hover{background:var(--soft)}
.legend{display:flex;flex-wrap:wrap;align-items:center;gap:4px 14px;font-size:12px;
color:var(--muted)}
.legend .scale{display:inline-flex;align-items:center;gap:5px}
.legend .sw{display:inline-flex;border:1px solid var(--line)}
.legend .sw i{width:16px;height:12px}
.legend .end{font-variant-numeric:tabular-nums;color:var(--fg)}
.legend .key{display:inline-flex;align-items:center;gap:5px}
.legend .mk{display:inline-block;width:22px;height:12px;border-radius:2px}
.legend .mk.att{outline:2px solid var(--accent)}
.legend .mk.gold{border-bottom:3px solid var(--gold);background:var(--soft)}
.ctx{flex:1;min-height:0;overflow:auto;padding:12px 16px;white-space:pre-wrap;
overflow-wrap:anywhere;font-size:15px;line-height:1.85}
.ctx .box{box-decoration-break:clone;-webkit-box-decoration-break:clone;border-radius:3px}
.ctx .box:hover{outline:1px solid #8c959f}
.ctx .tag{font-size:10px;line-height:0;font-weight:600;color:var(--muted);padding:0 2px;
margin-right:1px;user-select:none;font-variant-numeric:tabular-nums}
.ctx .box.gold{border-bottom:3px solid var(--gold)}
.ctx .box.gold>.tag::after{content:"gold";margin-left:3px;padding:1px 4px;border-radius:6px;
background:var(--gold);color:#fff}
.ctx span{scroll-margin:4.5em 0}
.ctx :target{box-shadow:0 0 0 3px rgba(191,57,137,.35);animation:flash 1.6s ease-out 1}
@keyframes flash{from{box-shadow:0 0 0 5px rgba(191,57,137,.9)}}
noscript p{margin:0;padding:4px 12px;font-size:12px;color:var(--muted)}
@media (max-width:820px){main{height:auto}.layout{grid-template-columns:1fr}
.ctx{max-height:75vh}header{max-height:none}}
"""

# Switches the answer unit: re-classes the tokens and span boxes, rebuilds the ranked lists and
# the legend's maxima from the JSON blob (see `_blob`); fills token tooltips on hover.
_SCRIPT = f"""
(function () {{
  "use strict";
  var data = JSON.parse(document.getElementById("{_DATA_ID}").textContent);
  var root = document.getElementById("rcstat-attribution");
  var ctx = document.getElementById("ctx");
  var toks = ctx.querySelectorAll("span:not(.box)");
  var boxes = ctx.querySelectorAll("span.box");
  var buttons = root.querySelectorAll("button.unit");
  var B64 = "{_B64}", code = {{}}, cache = {{}}, current = data.selected;
  for (var c = 0; c < B64.length; c++) {{ code[B64[c]] = c; }}
  toks.forEach(function (t, i) {{ if (!t.id) {{ t.id = "tok-" + i; }} }});
  function levels(k, u) {{
    var key = k + ":" + u;
    if (!(key in cache)) {{
      var s = data.methods[k].codes[u], out = new Uint16Array(s.length / 2);
      for (var i = 0; i < out.length; i++) {{
        out[i] = code[s[2 * i]] * 64 + code[s[2 * i + 1]];
      }}
      cache[key] = out;
    }}
    return cache[key];
  }}
  function bin(level) {{
    return Math.floor((level * data.bins + data.levels - 1) / data.levels);
  }}
  function el(tag, cls, text) {{
    var e = document.createElement(tag);
    if (cls) {{ e.className = cls; }}
    if (text !== undefined) {{ e.textContent = text; }}
    return e;
  }}
  function row(m, u, r, prev) {{
    var out = [];
    if (r[3] !== prev + 1) {{ out.push(el("li", "gap", "\\u22ef")); }}
    var cls = [];
    if (m.attributed !== null && m.attributed[u] === r[0]) {{ cls.push("att"); }}
    if (data.gold !== null && data.gold[u] === r[0]) {{ cls.push("gold"); }}
    var li = el("li", cls.join(" ")), a = el("a");
    a.setAttribute("href", "#" + data.target + r[0]);
    a.appendChild(el("span", "rk", String(r[3])));
    var txt = el("span", "txt");
    txt.appendChild(el("span", "sid", data.target === "span-" ? String(r[0]) : "#" + r[0]));
    txt.appendChild(document.createTextNode(data.snippets[r[0]]));
    if (cls.indexOf("gold") >= 0) {{
      txt.appendChild(document.createTextNode(" "));
      txt.appendChild(el("span", "pill gold", "gold"));
    }}
    a.appendChild(txt);
    a.appendChild(el("span", "sc", r[1]));
    var bar = el("span", "bar"), fill = el("i");
    fill.setAttribute("style", "width:" + r[2] + "%");
    bar.appendChild(fill);
    a.appendChild(bar);
    li.appendChild(a);
    out.push(li);
    return out;
  }}
  function show(u) {{
    current = u;
    var ls = data.methods.map(function (m, k) {{ return levels(k, u); }});
    for (var i = 0; i < toks.length; i++) {{
      var cls = [];
      for (var k = 0; k < ls.length; k++) {{
        var b = bin(ls[k][i]);
        if (b > 0) {{ cls.push(data.methods[k].key + b); }}
      }}
      if (cls.length > 0) {{ toks[i].className = cls.join(" "); }}
      else {{ toks[i].removeAttribute("class"); }}
    }}
    boxes.forEach(function (box) {{
      var s = Number(box.dataset.span), cls = ["box"];
      if (data.gold !== null && data.gold[u] === s) {{ cls.push("gold"); }}
      data.methods.forEach(function (m) {{
        if (m.attributed !== null && m.attributed[u] === s) {{ cls.push("at-" + m.key); }}
      }});
      box.className = cls.join(" ");
    }});
    data.methods.forEach(function (m) {{
      var items = [], prev = 0;
      m.ranked[u].forEach(function (r) {{
        items = items.concat(row(m, u, r, prev));
        prev = r[3];
      }});
      var list = root.querySelector("ol.ranked.o-" + m.key);
      list.replaceChildren.apply(list, items);
      root.querySelector(".legend .end.max.o-" + m.key).textContent = m.max[u];
    }});
    buttons.forEach(function (b, k) {{
      b.classList.toggle("active", k === u);
      b.setAttribute("aria-pressed", k === u ? "true" : "false");
    }});
    root.querySelectorAll(".unit-no").forEach(function (e) {{ e.textContent = String(u + 1); }});
    root.dataset.unit = String(u);
  }}
  ctx.addEventListener("mouseover", function (event) {{
    var t = event.target;
    if (t.tagName !== "SPAN" || t.classList.contains("box")) {{ return; }}
    var i = Number(t.id.slice(4)), checked = root.querySelector("input.method:checked");
    var k = checked === null ? 0 : Number(checked.dataset.k), m = data.methods[k];
    var level = levels(k, current)[i];
    t.title = "weight \\u2248 " + Number((level / data.levels * m.maxv[current]).toPrecision(3)) +
      " (" + Math.round(100 * level / data.levels) + "% of max) \\u00b7 " + m.label;
  }});
  function fromHash() {{
    var m = /^#unit=(\\d+)$/.exec(window.location.hash);
    if (m !== null && Number(m[1]) < data.units.length) {{ show(Number(m[1])); }}
  }}
  buttons.forEach(function (b, k) {{
    b.addEventListener("click", function () {{ show(k); window.location.hash = "unit=" + k; }});
  }});
  window.addEventListener("hashchange", fromHash);
  fromHash();
}})();
"""


class AttributionLike(Protocol):
    """What :func:`attribution_page` reads of an ``rcstat.attribution.Attribution``."""

    @property
    def question(self) -> str: ...
    @property
    def answer(self) -> str: ...
    @property
    def units(self) -> Sequence[Any]: ...  # each with a ``.text``
    @property
    def span_tokens(self) -> Sequence[tuple[int, int]]: ...
    @property
    def attention(self) -> np.ndarray: ...  # [unit, context token]
    @property
    def context_tokens(self) -> Sequence[str]: ...
    @property
    def context_start(self) -> int: ...
    @property
    def statistic(self) -> str: ...
    @property
    def head_ranking(self) -> str: ...
    @property
    def top_k(self) -> int | None: ...
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


@dataclass(frozen=True)
class _Method:
    """One method's weights and, per unit, its ranked rows and attributed span."""

    key: str  # "a", "b", ...: its CSS class prefix
    label: str
    weights: np.ndarray  # [unit, token], float64, finite, >= 0
    levels: np.ndarray  # [unit, token] int, round(_LEVELS * weights / max)
    scores: np.ndarray  # [unit, item]: span scores, or token weights when there are no spans
    attributed: list[int | None] | None  # per unit; None when the method decides no span


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
    methods = _validate(
        tokens, panels, units, spans, attributed or {}, gold, selected, span_scores or {}
    )
    if not isinstance(finished, bool | np.bool_):
        raise ValueError(f"finished must be a bool, got {finished!r}")
    gold_list = _indices(gold) if gold else None
    ranked = [[_ranked(m.scores[u], _at(gold_list, u)) for u in range(len(units))] for m in methods]
    target = "span-" if spans else "tok-"
    items = sorted({r[0] for per_unit in ranked for rows in per_unit for r in rows})
    snippets = {
        i: _snippet("".join(tokens[slice(*spans[i])]) if spans else tokens[i]) for i in items
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
    blob = _blob(methods, units, gold_list, ranked, snippets, selected, finished, target)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_STYLE}{_method_css(methods)}</style></head>"
        f'<body><main id="rcstat-attribution" data-unit="{selected}">{radios}{header}'
        '<div class="layout"><aside>'
        '<section class="card units-card"><h2>Answer units</h2>'
        f"{_render_units(units, selected, finished)}</section>"
        '<section class="card rank-card"><h2>Ranked '
        f'{noun} <span class="what">· unit <span class="unit-no">{selected + 1}</span> · '
        + "".join(f'<span class="only o-{m.key}">{_esc(m.label)}</span>' for m in methods)
        + f"</span></h2>{lists}"
        f'<p class="count">Top {min(_RANKED, n_items)} of {_count(n_items, noun[:-1])} by '
        "score; click a row to jump to it.</p></section></aside>"
        '<section class="card ctx-card"><h2>Context '
        f'<span class="what">· {_count(len(tokens), "token")}{span_count}</span></h2>'
        '<div class="toolbar"><div><span class="lbl">Method</span>'
        f'<span class="tabs" role="group" aria-label="attribution method">{tabs}</span></div>'
        f"{_render_legend(methods, selected, bool(spans), gold_list is not None)}</div>"
        "<noscript><p>JavaScript is off: the page shows answer unit "
        f"{selected + 1}; the method switch and jump links still work.</p></noscript>"
        f'<div class="ctx" id="ctx" tabindex="0">{context}</div></section></div></main>'
        f'<script type="application/json" id="{_DATA_ID}">{blob}</script>'
        f"<script>{_SCRIPT}</script></body></html>"
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
    spans = _drawable([(s - first, e - first) for s, e in a.span_tokens], len(a.context_tokens))
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

    The document is written to a temporary file in the same folder, then moved over
    ``path`` with :func:`os.replace`, so a reader never sees a half-written page.

    Returns
    -------
    Path
        ``path``.
    """
    document = attribution_html(tokens, panels, units, **options)
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(document)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


# --------------------------------------------------------------------------- rendering


def _esc(text: str) -> str:
    """HTML-escaped text, quotes included (safe in element content and attribute values)."""
    return html.escape(text, quote=True)


def _fmt(value: float) -> str:
    """A score or weight with 3 significant digits (the same string in HTML and in the blob)."""
    return f"{value:.3g}"


def _count(n: int, noun: str) -> str:
    """``"1 span"``, ``"3,000 tokens"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _key(k: int) -> str:
    """Method ``k``'s CSS key: a, b, ..., z, ba, bb, ... (letters only; bins add a digit)."""
    key = ""
    while True:
        k, r = divmod(k, 26)
        key = chr(ord("a") + r) + key
        if k == 0:
            return key


def _indices(indices: Sequence[int | None]) -> list[int | None]:
    """Span indices as plain ints (numpy integers are not JSON-serialisable)."""
    return [None if i is None else int(i) for i in indices]


def _at(values: list[int | None] | None, u: int) -> int | None:
    return None if values is None else values[u]


def _levels(weights: np.ndarray) -> np.ndarray:
    """``round(4088 · w / max w)`` per unit row (0 for a row whose maximum is 0)."""
    top = weights.max(axis=-1, keepdims=True)  # [U, 1]
    rel = np.divide(weights, top, out=np.zeros_like(weights), where=top > 0)
    return np.rint(rel * _LEVELS).astype(np.int64)


def _bins(levels: np.ndarray) -> np.ndarray:
    """Colour bin ``ceil(BINS · level / 4088)`` in integers (as the page's script computes it)."""
    return (levels * BINS + _LEVELS - 1) // _LEVELS


def _ranked(scores: np.ndarray, gold: int | None) -> list[tuple[int, str, int, int]]:
    """Ranked rows ``(index, score text, bar width %, rank)``: the top :data:`_RANKED` by
    score (ties by index), and the gold item with its rank when it is ranked lower."""
    order = np.argsort(-scores, kind="stable")
    keep = [int(i) for i in order[:_RANKED]]
    if gold is not None and gold not in keep:
        keep.append(gold)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    top = float(scores[order[0]])
    return [
        (
            i,
            _fmt(float(scores[i])),
            round(100 * min(max(float(scores[i]) / top, 0.0), 1.0)) if top > 0 else 0,
            int(rank[i]),
        )
        for i in keep
    ]


def _snippet(text: str) -> str:
    """A span's text on one line, cut to :data:`_SNIPPET` characters; blank tokens shown."""
    flat = " ".join(text.split())
    if not flat:
        return text.replace("\n", "⏎").replace(" ", "␣").replace("\t", "⇥") or "∅"
    return flat if len(flat) <= _SNIPPET else flat[: _SNIPPET - 1].rstrip() + "…"


def _method_css(methods: list[_Method]) -> str:
    """Per method: its tab when checked, what shows only for it, its bins and its outline."""
    rules = []
    for m in methods:
        on = f"#m-{m.key}:checked~"
        rules.append(
            f"{on}.layout .tabs label[for=m-{m.key}]{{background:var(--accent);color:#fff}}"
            f"#m-{m.key}:focus-visible~.layout .tabs label[for=m-{m.key}]"
            "{outline:2px solid var(--accent);outline-offset:2px}"
            f"{on}.layout .only:not(.o-{m.key}){{display:none}}"
            f"{on}.layout .ctx .box.at-{m.key}"
            "{outline:2px solid var(--accent);outline-offset:1px}"
            f"{on}.layout .ctx .box.at-{m.key}>.tag{{color:var(--accent)}}"
        )
        rules.extend(
            f"{on}.layout .ctx .{m.key}{b}{{background:{colour}"
            f"{';color:#fff' if b >= _DARK_FROM else ''}}}"
            for b, colour in enumerate(_PALETTE, start=1)
        )
    return "\n".join(rules)


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


def _render_legend(methods: list[_Method], unit: int, spans: bool, gold: bool) -> str:
    swatches = "".join(f'<i style="background:{c}"></i>' for c in _PALETTE)
    ends = "".join(
        f'<span class="end max only o-{m.key}">{_fmt(float(m.weights[unit].max()))}</span>'
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
    methods: list[_Method],
    gold: list[int | None] | None,
    unit: int,
    token_ids: set[int],
) -> str:
    """The context once: a ``<span>`` per token with one class per method (key + bin)."""
    bins = [_bins(m.levels[unit]) for m in methods]  # per method [token]

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
    method: _Method,
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
        is_gold = _at(gold, unit) == index
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


def _blob(
    methods: list[_Method],
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
                "max": [_fmt(float(v)) for v in m.weights.max(axis=1)],
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
    alphabet = np.frombuffer(_B64.encode("ascii"), dtype=np.uint8)
    pairs = np.stack([alphabet[levels // 64], alphabet[levels % 64]], axis=-1)  # [token, 2]
    return pairs.astype(np.uint8).tobytes().decode("ascii")


def _drawable(spans: list[tuple[int, int]], tokens: int) -> list[tuple[int, int]]:
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


def _validate(
    tokens: Sequence[str],
    panels: Mapping[str, np.ndarray],
    units: Sequence[str],
    spans: list[tuple[int, int]],
    attributed: Mapping[str, Sequence[int | None]],
    gold: Sequence[int | None],
    selected: int,
    span_scores: Mapping[str, np.ndarray],
) -> list[_Method]:
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
        weights = np.asarray(raw, dtype=np.float64)
        if weights.shape != expected:
            raise ValueError(
                f"panels[{label!r}] has shape {weights.shape}, expected "
                f"(len(units), len(tokens)) = {expected}"
            )
        if not np.isfinite(weights).all():
            raise ValueError(f"panels[{label!r}] has NaN or infinite weights")
        if (weights < 0).any():
            raise ValueError(f"panels[{label!r}] has negative weights")
        per_unit = None
        if label in attributed:
            per_unit = _indices(attributed[label])
            if len(per_unit) != len(units):
                raise ValueError(
                    f"attributed[{label!r}] has {len(per_unit)} entries, expected "
                    f"len(units) = {len(units)}"
                )
            for u, index in enumerate(per_unit):
                check_index(f"attributed[{label!r}][{u}]", index)
        if label in span_scores:
            scores = np.asarray(span_scores[label], dtype=np.float64)
            if scores.shape != (len(units), n_spans):
                raise ValueError(
                    f"span_scores[{label!r}] has shape {scores.shape}, expected "
                    f"(len(units), len(spans)) = {(len(units), n_spans)}"
                )
            if not np.isfinite(scores).all():
                raise ValueError(f"span_scores[{label!r}] has NaN or infinite scores")
        elif spans:
            mass = np.stack([weights[:, s:e].sum(axis=1) for s, e in spans], axis=1)  # [U, S]
            total = mass.sum(axis=1, keepdims=True)
            scores = np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)
        else:
            scores = weights
        methods.append(_Method(_key(k), str(label), weights, _levels(weights), scores, per_unit))
    if gold:
        if len(gold) != len(units):
            raise ValueError(f"gold has {len(gold)} entries, expected len(units) = {len(units)}")
        for u, index in enumerate(gold):
            check_index(f"gold[{u}]", index)
    if not 0 <= selected < len(units):
        raise ValueError(f"selected = {selected} is out of range for {len(units)} units")
    return methods
