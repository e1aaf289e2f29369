"""The style sheet and the script of the grounding page (:mod:`rcstat.report.grounding_html`):
inline, so the page needs no network."""

from __future__ import annotations

from rcstat.report.html import CARD_HEADING_CSS, PAGE_CSS, WARN_CSS, page_script

__all__ = ["DATA_ID", "SCRIPT", "STYLE"]

#: The id of the page's JSON data element.
DATA_ID = "rcstat-grounding-data"

STYLE = (
    """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--soft:#f6f8fa;--accent:#0969da;
--bad:#cf222e;--bad-bg:#ffebe9;--ok:#1a7f37;--ok-bg:#dafbe1;--warn:#9a6700;--warn-bg:#fff8c5;
--hl:#ffd33d;color-scheme:light}
.tok.uns{text-decoration:underline wavy var(--bad);text-underline-offset:3px;font-weight:600}
"""
    + PAGE_CSS
    + """\
main{max-width:1400px;margin:0 auto;padding:14px 18px;display:flex;flex-direction:column;gap:12px}
h1{font-size:18px;margin:0 0 8px;display:flex;flex-wrap:wrap;align-items:center;gap:6px 12px}
.verdict{font-size:13px;line-height:20px;padding:0 10px;border-radius:10px;font-weight:600;
white-space:nowrap}
.verdict.ok{background:var(--ok-bg);color:var(--ok);border:1px solid #4ac26b}
.verdict.bad{background:var(--bad-bg);color:var(--bad);border:1px solid #ff8182}
.verdict.none{background:var(--soft);color:var(--muted);border:1px solid var(--line)}
.verdict.unverified{background:var(--warn-bg);color:var(--warn);border:1px solid #d4a72c}
.verdict-note{margin:6px 0 0;color:var(--warn)}
dl.facts{display:flex;flex-wrap:wrap;gap:2px 22px;margin:0}
dl.facts>div{display:flex;gap:6px;align-items:baseline;min-width:0}
dl.facts dt,dl.qa dt{color:var(--muted);font-weight:600}
dl.facts dd{margin:0;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
dl.qa{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:2px 12px;margin:6px 0 0}
dl.qa dd{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
"""
    + WARN_CSS
    + """\
.extras{display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start;margin-top:8px}
.extras h2{font-size:12px;font-weight:600;letter-spacing:.03em;text-transform:uppercase;
color:var(--muted);margin:0 0 2px}
.baselines table{border-collapse:collapse;font-size:13px}
.baselines td,.baselines th{border:1px solid var(--line);padding:1px 8px;text-align:right;
font-variant-numeric:tabular-nums}
.baselines th{background:var(--soft)}
.baselines .text{text-align:left}
details summary{cursor:pointer;color:var(--muted);font-weight:600}
details pre{margin:4px 0 0;padding:6px 8px;background:var(--soft);border-radius:6px;
font-size:12px;max-height:12em;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}
.legend{display:flex;flex-wrap:wrap;align-items:center;gap:6px 18px;font-size:12px;
color:var(--muted);padding:6px 10px;border:1px solid var(--line);border-radius:8px;
background:var(--soft)}
.legend .lbl{font-weight:600;color:var(--fg)}
.legend .scale{display:inline-flex;align-items:center;gap:6px}
.legend .sw{position:relative;display:inline-flex;border:1px solid var(--line)}
.legend .sw i{width:18px;height:12px}
.legend .tick{position:absolute;top:-4px;bottom:-4px;width:2px;margin-left:-1px;
background:var(--fg)}
.legend .key{display:inline-flex;align-items:center;gap:5px}
.legend .key i.gx{width:18px;height:12px;border:1px solid var(--line)}
.legend .mk{display:inline-block;padding:0 4px;border-radius:2px;color:var(--fg);line-height:16px}
.legend .mk.sent.unsupported{outline:2px dashed var(--bad);outline-offset:1px;margin:0 4px}
.legend .mk.sent.unverified{outline:2px dotted var(--warn);outline-offset:1px;margin:0 4px}
.legend .mk.hl{background:var(--hl);box-shadow:0 2px 0 #bf8700}
.layout{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:14px;align-items:start}
.card{border:1px solid var(--line);border-radius:8px;display:flex;flex-direction:column;
min-width:0;overflow:hidden}
"""
    + CARD_HEADING_CSS
    + """\
.pane{max-height:70vh;overflow:auto;padding:12px 16px;white-space:pre-wrap;
overflow-wrap:anywhere;font-size:15px;line-height:1.9}
.resp .sent{cursor:pointer;border-radius:3px;box-decoration-break:clone;
-webkit-box-decoration-break:clone}
.resp .sent:hover{box-shadow:0 0 0 1px #8c959f}
.resp .sent.unsupported{outline:2px dashed var(--bad);outline-offset:1px}
.resp .sent.unverified{outline:2px dotted var(--warn);outline-offset:1px}
.resp .sent.active{box-shadow:0 0 0 3px rgba(9,105,218,.55)}
.resp .sent:focus-visible{outline:2px solid var(--accent);outline-offset:2px}
.badge{display:inline-block;font-size:11px;line-height:16px;padding:0 6px;margin:0 2px 0 4px;
border-radius:8px;font-weight:600;white-space:nowrap;vertical-align:1px;user-select:none;
background:var(--bad);color:#fff}
.badge.unverified{background:var(--warn)}
.detail{flex:none;padding:8px 12px;border-bottom:1px solid var(--line);min-height:3.2em}
.detail p{margin:0}
.detail .hint{color:var(--muted)}
.detail .d-head{display:flex;gap:8px;align-items:center}
.detail .pill{font-size:11px;line-height:16px;padding:0 6px;border-radius:8px;font-weight:600}
.detail .pill.ok{background:var(--ok-bg);color:var(--ok)}
.detail .pill.bad{background:var(--bad-bg);color:var(--bad)}
.detail .pill.unverified{background:var(--warn-bg);color:var(--warn)}
.detail blockquote{margin:4px 0;padding:0 0 0 8px;border-left:3px solid var(--line);
white-space:pre-wrap;overflow-wrap:anywhere;max-height:6em;overflow:auto}
.detail dl{display:flex;flex-wrap:wrap;gap:2px 18px;margin:0}
.detail dl>div{display:flex;gap:6px}
.detail dt{color:var(--muted);font-weight:600}
.detail dd{margin:0;font-variant-numeric:tabular-nums}
.detail .nosupport{color:var(--bad);font-weight:600}
.ctx .seg{border-radius:2px;scroll-margin:3em 0}
.ctx .seg.hl{background:var(--hl);box-shadow:0 2px 0 #bf8700}
noscript p{margin:0;padding:4px 12px;font-size:12px;color:var(--muted)}
@media (max-width:820px){.layout{grid-template-columns:1fr}}
"""
)

# Selects a sentence on click, Enter or Space: marks its sentence element and the context
# pieces of its support, fills the detail panel (textContent only), scrolls the span into view.
SCRIPT = page_script(
    DATA_ID,
    "rcstat-grounding",
    """\
  var resp = document.getElementById("response");
  var ctx = document.getElementById("ctx");
  var detail = document.getElementById("detail");
  var sents = Array.from(resp.querySelectorAll(".sent"));
  var segs = Array.from(ctx.querySelectorAll(".seg"));
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function fact(dl, name, cls, text) {
    var d = el("div");
    d.appendChild(el("dt", "", name));
    d.appendChild(el("dd", cls, text));
    dl.appendChild(d);
  }
  function select(i) {
    var s = data.sentences[i], first = null;
    sents.forEach(function (e) {
      var on = Number(e.dataset.sentence) === i;
      e.classList.toggle("active", on);
      e.setAttribute("aria-pressed", on ? "true" : "false");
    });
    segs.forEach(function (g) {
      var on = s.support !== null && Number(g.dataset.start) >= s.support[0] &&
        Number(g.dataset.end) <= s.support[1];
      g.classList.toggle("hl", on);
      if (on && first === null) { first = g; }
    });
    var head = el("p", "d-head");
    head.appendChild(el("b", "", "Sentence " + (i + 1)));
    var pill = s.status === "supported" ? ["ok", "supported"] :
      s.status === "unverified" ? ["unverified", "unverified"] : ["bad", "\\u26a0 unsupported"];
    head.appendChild(el("span", "pill " + pill[0], pill[1]));
    var dl = el("dl");
    fact(dl, "Score", "d-score", s.score + " (threshold " + data.threshold + ")");
    var parts = [head, el("blockquote", "d-text", s.text), dl];
    if (s.support === null) {
      parts.push(el("p", "nosupport", "no supporting span"));
    } else {
      fact(dl, "Support share", "d-share", s.share);
      fact(dl, "Context characters", "d-where", s.support[0] + "\\u2013" + s.support[1]);
    }
    detail.replaceChildren.apply(detail, parts);
    root.dataset.sentence = String(i);
    if (first !== null) { first.scrollIntoView({block: "center", inline: "nearest"}); }
  }
  function target(event) {
    var t = event.target;
    return t instanceof Element ? t.closest(".sent") : null;
  }
  resp.addEventListener("click", function (event) {
    var t = target(event);
    if (t !== null) { select(Number(t.dataset.sentence)); }
  });
  resp.addEventListener("keydown", function (event) {
    var t = target(event);
    if (t === null || (event.key !== "Enter" && event.key !== " ")) { return; }
    event.preventDefault();
    select(Number(t.dataset.sentence));
  });
""",
)
