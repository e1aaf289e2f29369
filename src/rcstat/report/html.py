"""Self-contained HTML reports (figures embedded as base64 PNG; no network)."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from typing import Any

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}.row{display:flex;gap:1em;flex-wrap:wrap}
.panel{flex:1 1 480px}img{max-width:100%}pre{white-space:pre-wrap;background:#f7f7f7;
padding:.6em;font-size:.85em;max-height:14em;overflow:auto}
"""


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

    def render(self) -> str:
        parts = [f"<div class='panel'><h3>{html.escape(self.heading)}</h3>"]
        parts += [f"<p>{html.escape(t)}</p>" for t in self.texts]
        parts += [f"<pre>{html.escape(t)}</pre>" for t in self.preformatted]
        parts.append(self.table_html)
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


def render_report(title: str, sections: list[Section]) -> str:
    """A complete HTML document."""
    body = "".join(s.render() for s in sections)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
