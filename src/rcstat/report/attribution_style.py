"""The fixed text of an attribution page: its CSS, its script and the colour palette.

The per-method CSS rules (:func:`method_css`) select a token's colour from the checked method
radio, so switching the method needs no JavaScript; the script switches the answer unit from the
JSON blob of :func:`~rcstat.report.attribution_data.page_data`.
"""

from __future__ import annotations

from rcstat.report.attribution_data import B64, Method
from rcstat.report.html import CARD_HEADING_CSS, PAGE_CSS, WARN_CSS, page_script

__all__ = ["DATA_ID", "PALETTE", "SCRIPT", "STYLE", "method_css"]

DATA_ID = "rcstat-attribution-data"
# light to dark orange (after ColorBrewer "Oranges"), one colour per bin; white text from bin 7
# (contrast >= 4.5 against #1f2328 below, against white from there)
PALETTE = ("#fff1e3", "#fee0c1", "#fdc692", "#fda762", "#fd8d3c", "#e9661a", "#c84c0a", "#9a3a06")
DARK_FROM = 7

STYLE = (
    """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--accent:#0969da;
--gold:#1a7f37;--warn:#9a6700;--warn-bg:#fff8c5;color-scheme:light}
"""
    + PAGE_CSS
    + """\
main{display:flex;flex-direction:column;height:100vh;min-height:520px;padding:14px 18px;gap:12px}
input.method{position:absolute;opacity:0;width:1px;height:1px;margin:0;pointer-events:none}
header{flex:none;max-height:34vh;overflow:auto}
h1{font-size:18px;margin:0 0 6px}
dl.qa{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 12px;margin:0}
dl.qa dt{color:var(--muted);font-weight:600}
dl.qa dd{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
"""
    + WARN_CSS
    + """\
.pill{display:inline-block;font-size:11px;line-height:16px;padding:0 6px;border-radius:8px;
font-weight:600;vertical-align:1px;white-space:nowrap}
.pill.cut{background:var(--warn-bg);color:var(--warn);border:1px solid #d4a72c}
.pill.gold{background:#dafbe1;color:var(--gold);border:1px solid #4ac26b}
.layout{flex:1;min-height:0;display:grid;grid-template-columns:minmax(260px,340px) minmax(0,1fr);
gap:14px}
aside{display:flex;flex-direction:column;gap:12px;min-height:0}
.card{border:1px solid var(--line);border-radius:8px;display:flex;flex-direction:column;
min-height:0;overflow:hidden}
"""
    + CARD_HEADING_CSS
    + """\
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
)

# Switches the answer unit: re-classes the tokens and span boxes, rebuilds the ranked lists and
# the legend's maxima from the JSON blob (see `page_data`); fills token tooltips on hover.
SCRIPT = page_script(
    DATA_ID,
    "rcstat-attribution",
    f"""\
  var ctx = document.getElementById("ctx");
  var toks = ctx.querySelectorAll("span:not(.box)");
  var boxes = ctx.querySelectorAll("span.box");
  var buttons = root.querySelectorAll("button.unit");
  var B64 = "{B64}", code = {{}}, cache = {{}}, current = data.selected;
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
""",
)


def method_css(methods: list[Method]) -> str:
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
            f"{';color:#fff' if b >= DARK_FROM else ''}}}"
            for b, colour in enumerate(PALETTE, start=1)
        )
    return "\n".join(rules)
