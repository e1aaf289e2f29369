"""The page at ``/`` of ``rcstat serve``: paste a context, a question and a response; see the
verdict, the unsupported spans with their weakest words, the evidence sentence of each supported
sentence and the attribution heatmap.

One HTML document, its CSS and JS inline: nothing is fetched but the service's own
``/v1/ground`` and ``/v1/attribute`` (the service runs offline). The script writes user text
with ``textContent`` only. Keyboard: every control is a form element in reading order; Ctrl+Enter
(or ⌘+Enter) in a text box checks; each unsupported span is focusable (``tabindex="0"``, its
score in ``title`` and ``aria-label``); the result is announced (``aria-live``).

What the page shows, by element:

* ``#verdict`` (``data-verdict``: ``supported``, ``unsupported`` or ``unverified``) and ``#score``;
* ``#response-view``: the response, each unsupported span one ``<mark class="unsupported"
  data-span="i">`` (``i``: its index in the answer's ``spans``), its weakest words inside as
  ``<b class="weakest">``;
* ``#sentences``: one row per response sentence (``data-verdict``), its score and the context
  sentence that supports it (``td.evidence``);
* ``#heatmap``: one row per response sentence, one cell per context sentence, shaded by its
  attribution score (the row's best cell has the class ``best``).
"""

from __future__ import annotations

__all__ = ["PAGE"]

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:70rem;padding:0 1rem;
 color:#1a1a1a;background:#fff;line-height:1.45}
label{display:block;font-weight:600;margin-top:.8rem}
textarea,input{width:100%;box-sizing:border-box;font:inherit;padding:.4rem;border:1px solid #888;
 border-radius:4px}
textarea{min-height:6rem}
button{margin-top:1rem;font:inherit;padding:.45rem 1.2rem;border-radius:4px;border:1px solid #224;
 background:#234;color:#fff;cursor:pointer}
:focus-visible{outline:3px solid #1f6feb;outline-offset:2px}
.hint{color:#555;font-size:.9em}
#error{color:#a50026;font-weight:600;white-space:pre-wrap}
.badge{display:inline-block;padding:.1rem .6rem;border-radius:1rem;color:#fff;font-weight:700}
.badge[data-verdict=supported]{background:#1a7f37}
.badge[data-verdict=unsupported]{background:#a50026}
.badge[data-verdict=unverified]{background:#9a6700}
#response-view{white-space:pre-wrap;border:1px solid #ccc;border-radius:4px;padding:.6rem;
 margin:.6rem 0}
mark.unsupported{background:#fdd;border-bottom:2px dashed #a50026;color:inherit}
b.weakest{background:#f4a6a6}
table{border-collapse:collapse;margin:.6rem 0;width:100%}
th,td{border:1px solid #ccc;padding:.3rem .5rem;text-align:left;vertical-align:top}
tr[data-verdict=unsupported] td.verdict{color:#a50026;font-weight:700}
tr[data-verdict=unverified] td.verdict{color:#9a6700;font-weight:700}
#heatmap td.cell{text-align:center;min-width:2.5rem;font-variant-numeric:tabular-nums}
#heatmap td.best{outline:2px solid #1a1a1a;outline-offset:-2px;font-weight:700}
"""

_SCRIPT = """
(function () {
  "use strict";
  var form = document.getElementById("ground-form");
  var statusLine = document.getElementById("status");
  var errorLine = document.getElementById("error");
  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }
  function num(v) { return v === null || v === undefined ? "–" : Number(v).toFixed(3); }
  function post(path, body) {
    var headers = {"Content-Type": "application/json"};
    var token = document.getElementById("token").value.trim();
    if (token) { headers.Authorization = "Bearer " + token; }
    return fetch(path, {method: "POST", headers: headers, body: JSON.stringify(body)})
      .then(function (r) {
        return r.json().then(function (data) {
          if (!r.ok) { throw new Error(data.error || ("HTTP " + r.status)); }
          return data;
        });
      });
  }
  function renderResponse(view, text, doc) {
    view.textContent = "";
    var cuts = [0, text.length];
    var weak = [];
    doc.spans.forEach(function (s) { cuts.push(s.start, s.end); });
    doc.sentences.forEach(function (s) {
      if (s.verdict !== "supported" && s.weakest_word) {
        weak.push(s.weakest_word); cuts.push(s.weakest_word.start, s.weakest_word.end);
      }
    });
    cuts = cuts.filter(function (c, i, all) { return all.indexOf(c) === i; })
      .sort(function (a, b) { return a - b; });
    var mark = null, markSpan = -1;
    for (var i = 0; i + 1 < cuts.length; i++) {
      var a = cuts[i], b = cuts[i + 1], piece = text.slice(a, b);
      var span = -1;
      doc.spans.forEach(function (s, k) { if (s.start <= a && b <= s.end) { span = k; } });
      var isWeak = weak.some(function (w) { return w.start <= a && b <= w.end; });
      var node = isWeak ? el("b", {"class": "weakest"}, piece) : document.createTextNode(piece);
      if (span < 0) { view.appendChild(node); mark = null; markSpan = -1; continue; }
      if (mark === null || markSpan !== span) {
        var s = doc.spans[span];
        mark = el("mark", {"class": "unsupported", "data-span": String(span), "tabindex": "0",
          "title": "unsupported (score " + num(s.score) + ")",
          "aria-label": "unsupported: " + s.text + " (score " + num(s.score) + ")"});
        markSpan = span;
        view.appendChild(mark);
      }
      mark.appendChild(node);
    }
  }
  function renderSentences(table, doc) {
    var body = table.tBodies[0];
    body.textContent = "";
    doc.sentences.forEach(function (s) {
      var row = el("tr", {"data-verdict": s.verdict});
      row.appendChild(el("td", {}, s.text));
      row.appendChild(el("td", {"class": "verdict"}, s.verdict));
      row.appendChild(el("td", {}, num(s.score)));
      var evidence = s.support ? s.support.text :
        (s.weakest_word ? "weakest word: " + s.weakest_word.text : "no supporting sentence");
      row.appendChild(el("td", {"class": "evidence"}, evidence));
      body.appendChild(row);
    });
  }
  function shade(cell, value, low, high) {
    var t = high > low ? (value - low) / (high - low) : 1;
    var light = Math.round(95 - 55 * t);
    cell.style.background = "hsl(210, 70%, " + light + "%)";
    cell.style.color = light < 62 ? "#fff" : "#1a1a1a";
  }
  function renderHeatmap(table, att) {
    table.textContent = "";
    var head = el("tr", {});
    head.appendChild(el("th", {"scope": "col"}, "response sentence"));
    att.spans.forEach(function (s, k) {
      head.appendChild(el("th", {"scope": "col", "title": s.text}, "C" + (k + 1)));
    });
    var thead = el("thead", {}); thead.appendChild(head); table.appendChild(thead);
    var body = el("tbody", {});
    att.units.forEach(function (u) {
      var row = el("tr", {});
      row.appendChild(el("th", {"scope": "row"}, u.text));
      var high = Math.max.apply(null, u.scores), low = Math.min.apply(null, u.scores);
      u.scores.forEach(function (v, k) {
        var cell = el("td", {"class": "cell" + (u.attributed === k ? " best" : ""),
          "title": att.spans[k].text + " (" + num(v) + ")"}, Number(v).toFixed(2));
        shade(cell, v, low, high);
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
    table.appendChild(body);
    var legend = document.getElementById("heatmap-spans");
    legend.textContent = "";
    att.spans.forEach(function (s, k) {
      legend.appendChild(el("li", {}, "C" + (k + 1) + ": " + s.text));
    });
  }
  function check(event) {
    event.preventDefault();
    var body = {context: document.getElementById("context").value,
      response: document.getElementById("response").value,
      question: document.getElementById("question").value.trim() || null};
    errorLine.textContent = "";
    statusLine.textContent = "checking…";
    document.body.setAttribute("data-state", "busy");
    post("/v1/ground", body).then(function (doc) {
      var verdict = document.getElementById("verdict");
      verdict.textContent = doc.verdict;
      verdict.setAttribute("data-verdict", doc.verdict);
      document.getElementById("score").textContent =
        "score " + num(doc.score) + " (threshold " + num(doc.threshold) + ", " + doc.method + ")";
      renderResponse(document.getElementById("response-view"), body.response, doc);
      renderSentences(document.getElementById("sentences"), doc);
      document.getElementById("result").hidden = false;
      statusLine.textContent = "verdict: " + doc.verdict + "; attributing…";
      return post("/v1/attribute", body).then(function (att) {
        renderHeatmap(document.getElementById("heatmap"), att);
        document.getElementById("attribution").hidden = false;
        statusLine.textContent = "verdict: " + doc.verdict;
      });
    }).catch(function (err) {
      errorLine.textContent = "error: " + err.message;
      statusLine.textContent = "";
    }).then(function () { document.body.setAttribute("data-state", "done"); });
  }
  form.addEventListener("submit", check);
  form.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
})();
"""

PAGE = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rcstat serve: is the response supported?</title>
<style>{_STYLE}</style>
</head>
<body data-state="idle">
<main>
<h1>Is the response supported by its context?</h1>
<form id="ground-form">
<label for="context">Context</label>
<textarea id="context" name="context" required></textarea>
<label for="question">Question <span class="hint">(optional)</span></label>
<input id="question" name="question" type="text">
<label for="response">Response</label>
<textarea id="response" name="response" required></textarea>
<label for="token">Token <span class="hint">(only if the service needs one)</span></label>
<input id="token" name="token" type="password" autocomplete="off">
<button id="submit" type="submit">Check</button>
<span class="hint">or Ctrl+Enter</span>
</form>
<p id="status" role="status" aria-live="polite"></p>
<p id="error" role="alert"></p>
<section id="result" hidden aria-labelledby="result-title">
<h2 id="result-title">Verdict: <span id="verdict" class="badge"></span>
<span id="score"></span></h2>
<p class="hint">Unsupported spans are marked; their weakest words are in bold.</p>
<div id="response-view"></div>
<table id="sentences">
<caption>Each sentence and the context sentence it rests on</caption>
<thead><tr><th scope="col">sentence</th><th scope="col">verdict</th><th scope="col">score</th>
<th scope="col">evidence</th></tr></thead>
<tbody></tbody>
</table>
</section>
<section id="attribution" hidden aria-labelledby="attribution-title">
<h2 id="attribution-title">Attribution</h2>
<p class="hint">Each response sentence's attribution score over the context's sentences
(darker: more, scaled per row; the outlined cell is its best span).</p>
<table id="heatmap"></table>
<ol id="heatmap-spans" class="hint"></ol>
</section>
</main>
<script>{_SCRIPT}</script>
</body>
</html>
"""
