"""Self-contained HTML reports (figures embedded as base64 PNG; no network).

A report is a list of :class:`Section` s, each a row of :class:`Panel` s. A panel holds, in
this order: warnings (a red box each, for results the reader must not miss), notices (a green
box each), texts, preformatted texts, an HTML table (:func:`html_table` escapes its cells),
links to files written next to the report, and figures. All text is escaped.

Helpers shared by the interactive pages (``attribution_html``, ``grounding_html``):
:func:`script_json` embeds data for a page's script, :func:`page_script` wraps that script (the
data read back, the page's root element), :func:`~rcstat.files.write_atomic` writes a page
without a half-written file.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}.row{display:flex;gap:1em;flex-wrap:wrap}
.panel{flex:1 1 480px}img{max-width:100%}pre{white-space:pre-wrap;background:#f7f7f7;
padding:.6em;font-size:.85em;max-height:14em;overflow:auto}
td.text,th.text{text-align:left}tr.differs td{background:#fdecea}
.warning{background:#fdecea;border-left:6px solid #c62828;padding:.5em .8em;margin:.6em 0;
font-weight:600;color:#7f1d1d}.notice{background:#e8f5e9;border-left:6px solid #2e7d32;
padding:.5em .8em;margin:.6em 0}a{color:#1565c0}
"""

# The CSS that the single-page reports (attribution, grounding) share; each page defines the
# custom properties (--fg, --muted, --line, --soft, --warn, --warn-bg) in its own :root.
#: The page base: box sizing, margins, the body font and colours.
PAGE_CSS = """\
*{box-sizing:border-box}
html,body{margin:0}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:#fff}
"""
#: The warning box (``<p class="warn">``, its ``<b>`` in the warning colour).
WARN_CSS = """\
.warn{margin:8px 0 0;padding:6px 10px;border:1px solid #d4a72c;border-radius:6px;
background:var(--warn-bg);color:#4d3800}
.warn b{color:var(--warn)}
"""
#: A card's heading (``.card>h2``) and the ``.what`` part of it.
CARD_HEADING_CSS = """\
.card>h2{flex:none;font-size:12px;font-weight:600;letter-spacing:.03em;text-transform:uppercase;
color:var(--muted);margin:0;padding:7px 12px;border-bottom:1px solid var(--line);
background:var(--soft)}
.card>h2 .what{text-transform:none;letter-spacing:0;color:var(--fg)}
"""

# outside a JSON string none of these can occur, and inside one the \\uXXXX escape decodes back
_SCRIPT_SAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def figure_png(fig: Any) -> bytes:
    """PNG bytes of a matplotlib figure (closes it)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


@dataclass
class Panel:
    """One column of a section: a heading, texts, an optional table and figures."""

    heading: str
    texts: list[str] = field(default_factory=list)
    preformatted: list[str] = field(default_factory=list)
    table_html: str = ""
    images: list[bytes] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (relative href, text)

    def render(self) -> str:
        parts = [f"<div class='panel'><h3>{html.escape(self.heading)}</h3>"]
        parts += [f"<p class='warning' role='alert'>⚠ {html.escape(t)}</p>" for t in self.warnings]
        parts += [f"<p class='notice'>{html.escape(t)}</p>" for t in self.notices]
        parts += [f"<p>{html.escape(t)}</p>" for t in self.texts]
        parts += [f"<pre>{html.escape(t)}</pre>" for t in self.preformatted]
        parts.append(self.table_html)
        parts += [
            f"<p><a href='{html.escape(href, quote=True)}'>{html.escape(text)}</a></p>"
            for href, text in self.links
        ]
        for png in self.images:
            data = base64.b64encode(png).decode("ascii")
            parts.append(
                f"<img alt='{html.escape(self.heading)}' src='data:image/png;base64,{data}'>"
            )
        parts.append("</div>")
        return "".join(parts)


@dataclass
class Section:
    """A titled row of panels shown side by side."""

    title: str
    panels: list[Panel]
    intro: str = ""

    def render(self) -> str:
        intro = f"<p>{html.escape(self.intro)}</p>" if self.intro else ""
        body = "".join(p.render() for p in self.panels)
        title = f"<h2>{html.escape(self.title)}</h2>"
        return f"<section>{title}{intro}<div class='row'>{body}</div></section>"


def html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    text_columns: Sequence[int] = (),
    row_classes: Sequence[str] = (),
) -> str:
    """An HTML table with escaped cells.

    Numbers are right-aligned; the columns in ``text_columns`` (e.g. answers) are
    left-aligned; ``row_classes[i]`` (e.g. ``"differs"``) is the class of row ``i``.

    >>> page = html_table(["x", "n"], [["a<b", 2]], text_columns=[0], row_classes=["differs"])
    >>> page.split("</tr>")[1]
    "<tr class='differs'><td class='text'>a&lt;b</td><td>2</td>"
    """

    def cell(tag: str, column: int, value: object) -> str:
        align = " class='text'" if column in text_columns else ""
        return f"<{tag}{align}>{html.escape(str(value))}</{tag}>"

    head = "<tr>" + "".join(cell("th", i, h) for i, h in enumerate(header)) + "</tr>"
    body = []
    for r, row in enumerate(rows):
        name = row_classes[r] if r < len(row_classes) else ""
        kind = f" class='{html.escape(name, quote=True)}'" if name else ""
        cells = "".join(cell("td", i, v) for i, v in enumerate(row))
        body.append(f"<tr{kind}>{cells}</tr>")
    return f"<table>{head}{''.join(body)}</table>"


def render_report(title: str, sections: list[Section]) -> str:
    """A complete HTML document."""
    body = "".join(s.render() for s in sections)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


def page_script(data_id: str, root_id: str, body: str) -> str:
    """The script of an interactive page: ``body`` run once in strict mode, with ``data`` (the
    JSON of the element ``data_id``, written by :func:`script_json`) and ``root`` (the element
    ``root_id``) in scope.

    >>> print(page_script("d", "r", "  show(data);\\n"))
    <BLANKLINE>
    (function () {
      "use strict";
      var data = JSON.parse(document.getElementById("d").textContent);
      var root = document.getElementById("r");
      show(data);
    })();
    <BLANKLINE>
    """
    return (
        '\n(function () {\n  "use strict";\n'
        f'  var data = JSON.parse(document.getElementById("{data_id}").textContent);\n'
        f'  var root = document.getElementById("{root_id}");\n'
        f"{body}}})();\n"
    )


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe as the content of a ``<script>`` element.

    ``<``, ``>``, ``&`` and the line separators U+2028/U+2029 are written as ``\\uXXXX``
    escapes (they only occur inside JSON strings, where the escape decodes back to them), so no
    text can close the element (``</script>``) or open a comment; NaN and infinities raise.

    >>> script_json({"t": "</script> & more"})
    '{"t":"\\\\u003c/script\\\\u003e \\\\u0026 more"}'
    """
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.translate(_SCRIPT_SAFE)
