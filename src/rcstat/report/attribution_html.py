"""A self-contained HTML view of token attributions (the paper's Fig. 7 / supplement Fig. 22).

The context is shown once per attribution method ("panel"), each token shaded by its weight
to one answer unit: background alpha = weight / (largest weight of that panel for that unit).
A row of buttons, one per answer unit, switches the unit in every panel at once; the URL
fragment ``#unit=K`` selects unit K on load. Candidate spans (e.g. chunks) are outlined with
their index; the span a method attributes the unit to is highlighted in that method's panel,
and the gold span of the unit carries a "gold" badge.

Design: the page works without JavaScript for the initially ``selected`` unit (its shading,
tooltips and span marks are rendered server-side as inline styles and classes); the weights of
every unit travel in one ``<script type="application/json">`` blob that a small inline script
reads to re-shade on a click. Nothing is fetched: CSS and JS are inline, no fonts or images.
This module only renders arrays; the statistics live in ``rcstat.stats`` and
``rcstat.attribution``.
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
from typing import Any

import numpy as np

_SHADE_RGB = "230,85,13"  # orange; alpha carries the weight
_DATA_ID = "rcstat-attribution-data"

_STYLE = f"""
body{{font-family:system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}}
h1{{font-size:1.4em;margin:0 0 .4em}}h2{{font-size:1.05em;margin:0 0 .5em}}
.qa p{{margin:.2em 0}}.qa b{{color:#555}}
.units{{display:flex;flex-wrap:wrap;gap:.3em;margin:.8em 0}}
button.unit{{font:inherit;padding:.15em .55em;border:1px solid #999;border-radius:4px;
background:#f4f4f4;cursor:pointer;white-space:pre-wrap}}
button.unit.active{{background:rgb({_SHADE_RGB});color:#fff;border-color:rgb({_SHADE_RGB})}}
.showing{{color:#555;margin:.2em 0 .8em}}
.panels{{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}}
.panel{{flex:1 1 340px;min-width:0;border:1px solid #ddd;border-radius:6px;padding:.7em}}
.ctx{{white-space:pre-wrap;overflow-wrap:anywhere;line-height:1.7;font-size:.92em}}
.tok{{--a:0;background-color:rgba({_SHADE_RGB},var(--a));border-radius:2px}}
.span{{outline:1px solid #999;outline-offset:1px;box-decoration-break:clone;
-webkit-box-decoration-break:clone}}
.span.attributed{{outline:2px solid #2166ac;background:#eef4fb}}
.tag{{font-size:.7em;color:#666;user-select:none;vertical-align:super}}
.badge{{display:none;font-size:.85em;padding:0 .3em;margin-left:.2em;border-radius:3px;
color:#fff}}
.span.gold .badge.gold{{display:inline;background:#b8860b}}
.span.attributed .badge.attributed{{display:inline;background:#2166ac}}
"""

# Re-shades every panel for unit u; `data` is the JSON blob built by `_blob`.
_SCRIPT = f"""
(function () {{
  "use strict";
  var data = JSON.parse(document.getElementById("{_DATA_ID}").textContent);
  var panels = document.querySelectorAll(".panel");
  var buttons = document.querySelectorAll("button.unit");
  function fmt(w) {{ return String(Number(w.toPrecision(4))); }}
  function show(u) {{
    buttons.forEach(function (b, k) {{
      b.classList.toggle("active", k === u);
      b.setAttribute("aria-pressed", k === u ? "true" : "false");
    }});
    document.getElementById("unit-text").textContent = data.units[u];
    document.getElementById("rcstat-attribution").dataset.unit = String(u);
    data.panels.forEach(function (p, i) {{
      var w = p.weights[u], max = 0;
      for (var j = 0; j < w.length; j++) {{ if (w[j] > max) {{ max = w[j]; }} }}
      panels[i].querySelectorAll(".tok").forEach(function (t, j) {{
        t.style.setProperty("--a", (max > 0 ? w[j] / max : 0).toFixed(3));
        t.title = fmt(w[j]);
      }});
      panels[i].querySelectorAll(".span").forEach(function (s) {{
        var k = Number(s.dataset.span);
        s.classList.toggle("attributed", p.attributed !== null && p.attributed[u] === k);
        s.classList.toggle("gold", data.gold !== null && data.gold[u] === k);
      }});
    }});
  }}
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


@dataclass(frozen=True)
class _Panel:
    """One method's weights and, per unit, the span it attributes the unit to."""

    label: str
    weights: np.ndarray  # [unit, token], float64, finite, >= 0
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
) -> str:
    """A complete, self-contained HTML document shading the context by attribution weight.

    Parameters
    ----------
    tokens
        The context's token texts in order; ``"".join(tokens)`` is the text shown.
    panels
        Method label -> weights ``[units, tokens]`` (finite, >= 0), one panel per label.
    units
        The answer units' texts, ``len(units) == weights.shape[0]``.
    title, question, answer
        Page title and the example's question and answer (shown above the panels).
    spans
        Candidate spans as token ranges ``[start, end)``, non-empty and non-overlapping,
        drawn as outlined blocks labelled with their index in this sequence.
    attributed
        Per panel label, per unit: the index of the span that method attributes the unit
        to (``None``: undecided); highlighted in that panel. Labels may be left out.
    gold
        Per unit: the gold span index, or ``None``; empty when unknown.
    selected
        The unit shaded when the page opens (also without JavaScript).

    Returns
    -------
    str
        The HTML document: inline CSS and JS, no network references.

    Raises
    ------
    ValueError
        On no panels, empty tokens or units, weights that are not ``[len(units), len(tokens)]``
        or not finite and non-negative, empty/overlapping/out-of-range spans, span indices
        out of range, or ``selected`` out of range.

    Notes
    -----
    A token's shade in a panel for unit ``u`` is ``alpha_t = w[u, t] / max_s w[u, s]``
    (0 everywhere when the maximum is 0); its tooltip shows ``w[u, t]``.

    Examples
    --------
    >>> import numpy as np
    >>> page = attribution_html(["The", " cat"], {"all heads": np.array([[0.2, 0.8]])}, ["cat"])
    >>> page.startswith("<!doctype html>"), page.count('class="panel"')
    (True, 1)
    >>> "--a:0.250" in page and "--a:1.000" in page
    True
    """
    checked = _validate(tokens, panels, units, spans, attributed or {}, gold, selected)
    gold_list = _indices(gold) if gold else None
    spans = [(int(start), int(end)) for start, end in spans]
    order = sorted(range(len(spans)), key=lambda k: spans[k][0])
    panels_html = "".join(
        _render_panel(p, tokens, [(k, *spans[k]) for k in order], gold_list, selected)
        for p in checked
    )
    buttons = "".join(
        f'<button type="button" class="unit{" active" if u == selected else ""}" '
        f'data-unit="{u}" aria-pressed="{"true" if u == selected else "false"}">'
        f"{_esc(text)}</button>"
        for u, text in enumerate(units)
    )
    qa = "".join(
        f"<p><b>{name}:</b> {_esc(text)}</p>"
        for name, text in (("Question", question), ("Answer", answer))
        if text
    )
    blob = _blob(checked, units, gold_list, spans, selected)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>"
        f'<main id="rcstat-attribution" data-unit="{selected}">'
        f'<h1>{_esc(title)}</h1><div class="qa">{qa}</div>'
        f'<div class="units" role="group" aria-label="answer units">{buttons}</div>'
        f'<p class="showing">Shading: weight to answer unit '
        f'<b id="unit-text">{_esc(units[selected])}</b></p>'
        f'<div class="panels">{panels_html}</div></main>'
        f'<script type="application/json" id="{_DATA_ID}">{blob}</script>'
        f"<script>{_SCRIPT}</script></body></html>"
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


def _esc(text: str) -> str:
    """HTML-escaped text, quotes included (safe in element content and attribute values)."""
    return html.escape(text, quote=True)


def _indices(indices: Sequence[int | None]) -> list[int | None]:
    """Span indices as plain ints (numpy integers are not JSON-serialisable)."""
    return [None if i is None else int(i) for i in indices]


def _alphas(weights: np.ndarray) -> np.ndarray:
    """Shade per token: weights / their maximum, 0 when the maximum is 0."""
    top = float(weights.max())
    return weights / top if top > 0 else np.zeros_like(weights)


def _render_panel(
    panel: _Panel,
    tokens: Sequence[str],
    spans: list[tuple[int, int, int]],  # (index, start, end), sorted by start
    gold: list[int | None] | None,
    selected: int,
) -> str:
    """One panel's HTML, shaded and marked for the unit ``selected``."""
    weights = panel.weights[selected]  # [token]
    alphas = _alphas(weights)  # [token]

    def toks(start: int, end: int) -> str:
        return "".join(
            f'<span class="tok" style="--a:{alphas[t]:.3f}" title="{weights[t]:.4g}">'
            f"{_esc(tokens[t])}</span>"
            for t in range(start, end)
        )

    chosen = panel.attributed[selected] if panel.attributed is not None else None
    gold_span = gold[selected] if gold is not None else None
    parts, cursor = [], 0
    for k, start, end in spans:
        parts.append(toks(cursor, start))
        marks = "".join(
            f" {name}" for name, on in (("attributed", k == chosen), ("gold", k == gold_span)) if on
        )
        parts.append(
            f'<span class="span{marks}" data-span="{k}"><span class="tag">[{k}]'
            '<span class="badge attributed">attributed</span>'
            '<span class="badge gold">gold</span></span>'
            f"{toks(start, end)}</span>"
        )
        cursor = end
    parts.append(toks(cursor, len(tokens)))
    label = _esc(panel.label)
    return (
        f'<section class="panel" data-method="{label}"><h2>{label}</h2>'
        f'<div class="ctx">{"".join(parts)}</div></section>'
    )


def _blob(
    panels: list[_Panel],
    units: Sequence[str],
    gold: list[int | None] | None,
    spans: Sequence[tuple[int, int]],
    selected: int,
) -> str:
    """The JSON read by the page's script, safe inside ``<script>`` (no ``<`` left raw)."""
    data = {
        "units": list(units),
        "spans": [list(s) for s in spans],
        "gold": gold,
        "selected": selected,
        "panels": [
            {"label": p.label, "weights": p.weights.tolist(), "attributed": p.attributed}
            for p in panels
        ],
    }
    # `<` only occurs inside JSON strings, where \u003c decodes back to it: no `</script>`.
    return json.dumps(data, allow_nan=False).replace("<", "\\u003c")


def _validate(
    tokens: Sequence[str],
    panels: Mapping[str, np.ndarray],
    units: Sequence[str],
    spans: Sequence[tuple[int, int]],
    attributed: Mapping[str, Sequence[int | None]],
    gold: Sequence[int | None],
    selected: int,
) -> list[_Panel]:
    """Check every argument; the panels as float64 arrays with their attributions."""
    if len(tokens) == 0:
        raise ValueError("tokens must not be empty")
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError("tokens must all be str")
    if len(units) == 0:
        raise ValueError("units must not be empty")
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
    ordered = sorted(spans)
    for (_, end), (start, _) in itertools.pairwise(ordered):
        if start < end:
            raise ValueError(f"spans must not overlap: a span starts at {start} before {end}")

    def check_index(name: str, index: int | None) -> None:
        if index is not None and not 0 <= index < n_spans:
            raise ValueError(f"{name} = {index} is not a span index (len(spans) = {n_spans})")

    unknown = sorted(set(attributed) - set(panels))
    if unknown:
        raise ValueError(f"attributed has labels that are not panels: {unknown}")
    checked = []
    for label, raw in panels.items():
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
        checked.append(_Panel(label, weights, per_unit))
    if gold:
        if len(gold) != len(units):
            raise ValueError(f"gold has {len(gold)} entries, expected len(units) = {len(units)}")
        for u, index in enumerate(gold):
            check_index(f"gold[{u}]", index)
    if not 0 <= selected < len(units):
        raise ValueError(f"selected = {selected} is out of range for {len(units)} units")
    return checked
