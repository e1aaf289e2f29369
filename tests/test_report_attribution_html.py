"""Tests of rcstat.report.attribution_html: the attribution page as HTML and in a real browser.

The document is parsed back with ``html.parser`` (an independent decoder for escaping: the
token texts must join to the context, attributes must decode to the labels), colour bins are
checked against ``ceil(8 · w / max w)`` computed here, and ranked lists against ``argsort``.
The browser tests drive a headless Chromium (skipped when none is on PATH): a script appended
to the page clicks, reads computed styles and layout boxes, and writes what it saw into the
DOM that ``--dump-dom`` returns.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat.report.attribution_data import B64, BINS
from rcstat.report.attribution_html import (
    attribution_html,
    attribution_page,
    save_attribution_html,
    save_attribution_page,
)
from rcstat.report.attribution_style import PALETTE, SCRIPT
from tests._attribution_pages import long_example
from tests._browser import PageReader, probe, rgb, run_chromium

TOKENS = [
    "Paris",
    " is",
    " <b>the</b>",
    " capital",
    ' & "heart"',
    " of France's",
    ".",
    "\n\n",
    "The",
    "  Eiffel   Tower",
    " was built",
    " in",
    " 1889",
    ".\n",
    "</script><script>window.__pwned = 1</script>",
]
UNITS = ["It was built", " in 1889", " </script><&>"]
SPANS = [(8, 14), (0, 7)]  # given out of order: labels are the indices in this list
GOLD = [0, 0, None]
_RNG = np.random.default_rng(7)
PANELS = {
    "top-20 RC heads": _RNG.random((3, len(TOKENS))),
    "all heads": _RNG.random((3, len(TOKENS))),
    'mean "attention" <avg>': _RNG.random((3, len(TOKENS))),
}
KEYS = ["a", "b", "c"]  # the methods' CSS keys, in order
ATTRIBUTED: dict[str, list[int | None]] = {"top-20 RC heads": [0, 1, None], "all heads": [1, 0, 0]}
SCORES = {"top-20 RC heads": np.array([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])}


def _page(**options: Any) -> str:
    arguments: dict[str, Any] = {
        "title": "attribution <test>",
        "question": "When was the tower built?",
        "answer": "It was built in 1889.",
        "spans": SPANS,
        "attributed": ATTRIBUTED,
        "gold": GOLD,
        "span_scores": SCORES,
    }
    arguments.update(options)
    return attribution_html(TOKENS, PANELS, UNITS, **arguments)


def _bins(weights: np.ndarray) -> list[int]:
    """The oracle: bin ``ceil(8 · w / max w)``, one Python float at a time."""
    top = float(np.max(weights))
    return [math.ceil(BINS * float(w) / top) if top > 0 else 0 for w in weights]


def _expected_scores(label: str, unit: int) -> np.ndarray:
    """A span's score: given, or the share of the method's token weight inside it."""
    if label in SCORES:
        return SCORES[label][unit]
    mass = np.array([PANELS[label][unit, a:b].sum() for a, b in SPANS])
    return mass / mass.sum()


class _Parsed(PageReader):
    """What the tests read back from a page (or from a DOM dumped by Chromium)."""

    def __init__(self, document: str) -> None:
        super().__init__()
        self.unit = -1
        self.radios: list[dict[str, Any]] = []
        self.tabs: list[str] = []
        self.buttons: list[dict[str, Any]] = []
        self.tokens: list[dict[str, Any]] = []  # classes, id, text, box
        self.boxes: dict[int, dict[str, Any]] = {}
        self.ranked: dict[str, list[dict[str, Any]]] = {}  # method key -> rows
        self.swatches: list[str] = []
        self.ends: list[tuple[set[str], str]] = []
        self.contexts = 0
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.warning = ""
        self._box: int | None = None
        self.read(document)

    def _role(self, tag: str, a: dict[str, str], classes: set[str]) -> str:
        roles = {r for _, r in self._stack}
        if tag == "div" and a.get("id") == "ctx":
            self.contexts += 1
            return "ctx"
        if "ctx" in roles and tag == "span" and "box" in classes:
            self._box = int(a["data-span"])
            self.boxes[self._box] = {"classes": classes - {"box"}, "id": a.get("id")}
            return "box"
        if "ctx" in roles and tag == "sup":
            return "tag"
        if "ctx" in roles and tag == "span":
            box = self._box if "box" in roles else None
            self.tokens.append({"classes": classes, "id": a.get("id"), "text": "", "box": box})
            return "tok"
        if tag == "ol" and "ranked" in classes:
            (key,) = (c[2:] for c in classes if c.startswith("o-"))
            self.ranked[key] = []
            return "ranked"
        if tag == "li" and "ranked" in roles:
            key = list(self.ranked)[-1]
            self.ranked[key].append({"classes": classes, "text": "", "gap": "gap" in classes})
            return "row"
        if "row" in roles:
            row = self.ranked[list(self.ranked)[-1]][-1]
            if tag == "a":
                row["href"] = a["href"]
            elif tag == "i":
                row["width"] = a["style"]
            for part in ("rk", "sid", "sc", "pill"):
                if part in classes:
                    row[part] = ""
                    return part
            return "row-text" if "txt" in classes else "row"
        if "button" in roles and "n" in classes:
            return "number"  # the unit's number, not its text
        if tag == "button" and "unit" in classes:
            self.buttons.append({"active": "active" in classes, "text": ""})
            return "button"
        if tag == "label":
            self.tabs.append("")
            return "label"
        if tag == "i" and "sw" in roles:
            self.swatches.append(a["style"])
        if tag == "span" and "end" in classes:
            self.ends.append((classes, ""))
            return "end"
        if tag == "span" and "sw" in classes:
            return "sw"
        if a.get("id") == "cut-warning":
            return "warning"
        return ""

    def _start(self, tag: str, a: dict[str, str], classes: set[str]) -> None:
        if "id" in a:
            self.ids.add(a["id"])
        if "href" in a:
            self.hrefs.append(a["href"])
        if tag == "main":
            self.unit = int(a["data-unit"])
        if tag == "input" and "method" in classes:
            self.radios.append(
                {"id": a["id"], "label": a["data-method"], "checked": "checked" in a}
            )

    def _end(self, role: str) -> None:
        if role == "box":
            self._box = None

    def _data(self, data: str, role: str, roles: list[str]) -> None:
        if role == "tok":
            self.tokens[-1]["text"] += data
        elif role in ("rk", "sid", "sc", "pill"):
            self.ranked[list(self.ranked)[-1]][-1][role] += data
        elif role in ("row-text", "row"):
            self.ranked[list(self.ranked)[-1]][-1]["text"] += data
        elif role == "button":
            self.buttons[-1]["text"] += data
        elif role == "label":
            self.tabs[-1] += data
        elif role == "end":
            self.ends[-1] = (self.ends[-1][0], self.ends[-1][1] + data)
        elif role == "warning":
            self.warning += data

    def bins(self, key: str) -> list[int]:
        """Per token, its colour bin under method ``key`` (0: no class)."""
        out = []
        for token in self.tokens:
            found = [c[len(key) :] for c in token["classes"] if re.fullmatch(key + r"\d+", c)]
            out.append(int(found[0]) if found else 0)
        return out

    def rows(self, key: str) -> list[dict[str, Any]]:
        return [r for r in self.ranked[key] if not r["gap"]]


def _check_unit(parsed: _Parsed, unit: int) -> None:
    """The page shows unit ``unit``: colours of every method, span marks, ranked lists."""
    assert parsed.unit == unit
    assert [b["active"] for b in parsed.buttons] == [u == unit for u in range(len(UNITS))]
    assert [t["text"] for t in parsed.tokens] == TOKENS
    for key, (label, weights) in zip(KEYS, PANELS.items(), strict=True):
        assert parsed.bins(key) == _bins(weights[unit]), label
        chosen = ATTRIBUTED.get(label, [None] * len(UNITS))[unit]
        for k, box in parsed.boxes.items():
            assert (f"at-{key}" in box["classes"]) == (k == chosen)
        scores = _expected_scores(label, unit)
        rows = parsed.rows(key)
        assert [r["href"] for r in rows] == [f"#span-{k}" for k in np.argsort(-scores)]
        assert [float(r["sc"]) for r in rows] == pytest.approx(sorted(scores, reverse=True), 1e-2)
        assert [int(r["rk"]) for r in rows] == [1, 2]
        assert [("att" in r["classes"]) for r in rows] == [
            r["href"] == f"#span-{chosen}" for r in rows
        ]
    for k, box in parsed.boxes.items():
        assert ("gold" in box["classes"]) == (k == GOLD[unit])


# --------------------------------------------------------------------------- the document


def test_is_self_contained_without_network_references():
    page = _page()
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert "http://" not in page and "https://" not in page and "url(" not in page
    assert re.search(r"\bsrc\s*=", page) is None
    parsed = _Parsed(page)
    assert parsed.hrefs and all(h.startswith("#") for h in parsed.hrefs)  # in-page links only
    assert "<style>" in page and "<script>" in page


def test_context_is_rendered_once_with_a_method_switch():
    page = _page()
    parsed = _Parsed(page)
    assert parsed.contexts == 1
    assert [t["text"] for t in parsed.tokens] == TOKENS  # every token once, in order
    assert page.count("Eiffel   Tower") == 1  # ranked rows show a span's text on one line
    assert [r["label"] for r in parsed.radios] == list(PANELS)
    assert [r["checked"] for r in parsed.radios] == [True, False, False]
    assert parsed.tabs == list(PANELS)
    assert sorted(parsed.ranked) == KEYS  # one ranked list per method, shown by the switch
    # every method's colours ride on the one copy of each token
    for key in KEYS:
        assert any(b > 0 for b in parsed.bins(key))


def test_selected_unit_is_rendered_server_side():
    for unit in range(len(UNITS)):
        _check_unit(_Parsed(_page(selected=unit)), unit)


def test_hand_computed_bins():
    weights = np.array([[1.0, 3.0, 0.0, 6.0, 0.75, 6.0 * 5 / 8 + 1e-9]])
    page = attribution_html(["a", "b", "c", "d", "e", "f"], {"m": weights}, ["u"])
    # 1/6 -> 2, 1/2 -> 4 (a boundary stays in the lower bin), 0 -> none, 1 -> 8, 1/8 -> 1,
    # just above 5/8 -> 5 (within the 1/4088 quantisation of the boundary)
    assert _Parsed(page).bins("a") == [2, 4, 0, 8, 1, 5]


def test_bins_match_the_definition_away_from_boundaries():
    rng = np.random.default_rng(3)
    weights = rng.gamma(0.5, 1.0, (4, 500))
    tokens = [f"t{i} " for i in range(500)]
    parsed = _Parsed(attribution_html(tokens, {"m": weights}, ["u"] * 4, selected=2))
    rel = weights[2] / weights[2].max()
    far = np.abs(rel * BINS - np.rint(rel * BINS)) > 1e-3  # not within rounding of a boundary
    assert far.sum() > 450
    np.testing.assert_array_equal(np.array(parsed.bins("a"))[far], np.ceil(rel * BINS)[far])


def test_zero_weights_give_no_colour():
    page = attribution_html(["a", "b"], {"m": np.zeros((2, 2))}, ["u", "v"], selected=1)
    parsed = _Parsed(page)
    assert parsed.bins("a") == [0, 0]
    assert [t["classes"] for t in parsed.tokens] == [set(), set()]


def test_legend_has_the_scale_its_ends_and_the_markers():
    parsed = _Parsed(_page(selected=1))
    assert parsed.swatches == [f"background:{c}" for c in PALETTE]
    assert len(parsed.swatches) == BINS
    lows = [text for classes, text in parsed.ends if "max" not in classes]
    assert lows == ["0"]
    maxima = {frozenset(c): t for c, t in parsed.ends if "max" in c}
    for key, weights in zip(KEYS, PANELS.values(), strict=True):
        (text,) = (t for c, t in maxima.items() if f"o-{key}" in c)
        assert float(text) == pytest.approx(weights[1].max(), rel=5e-3)
    page = _page()
    assert "gold span" in page and "span the method attributes the unit to" in page
    bare = attribution_html(TOKENS, PANELS, UNITS)  # no spans, no gold: no such keys
    assert "gold span" not in bare and "attributes the unit to" not in bare


def test_ranked_list_orders_by_score_and_links_to_the_spans():
    rng = np.random.default_rng(5)
    n = 40
    tokens = [f" w{i}" for i in range(n)]
    spans = [(i, i + 2) for i in range(0, n, 2)]  # 20 spans
    scores = rng.random((2, 20))
    gold = [int(np.argsort(-scores[0])[15]), int(np.argsort(-scores[1])[0])]
    page = attribution_html(
        tokens,
        {"m": rng.random((2, n))},
        ["u", "v"],
        spans=spans,
        span_scores={"m": scores},
        gold=gold,
    )
    parsed = _Parsed(page)
    rows = parsed.ranked["a"]
    order = np.argsort(-scores[0], kind="stable")
    # the top 10 in order, then a gap and the gold span with its own rank
    assert [r["href"] for r in rows[:10]] == [f"#span-{k}" for k in order[:10]]
    assert rows[10]["gap"] and rows[11]["href"] == f"#span-{gold[0]}"
    assert rows[11]["rk"] == "16" and rows[11]["pill"] == "gold" and "gold" in rows[11]["classes"]
    shown = [float(r["sc"]) for r in rows if not r["gap"]]
    assert shown == sorted(shown, reverse=True)
    assert shown[:10] == pytest.approx(scores[0][order[:10]], rel=5e-3)
    widths = [int(r["width"][len("width:") : -1]) for r in rows[:10]]
    assert widths[0] == 100 and widths == sorted(widths, reverse=True)
    # every link resolves to an element of the context
    assert {h[1:] for h in parsed.hrefs} <= parsed.ids
    assert {f"span-{k}" for k in range(20)} <= parsed.ids
    assert "Top 10 of 20 spans" in page


def test_without_spans_the_tokens_are_ranked_and_linked():
    weights = np.array([[0.1, 0.5, 0.2, 0.0]])
    parsed = _Parsed(attribution_html(["a", " b", "\n", " d"], {"m": weights}, ["u"]))
    rows = parsed.rows("a")
    assert [r["href"] for r in rows] == ["#tok-1", "#tok-2", "#tok-0", "#tok-3"]
    assert [r["sid"] for r in rows] == ["#1", "#2", "#0", "#3"]
    assert rows[1]["text"].endswith("⏎")  # a blank token is made visible
    assert [t["id"] for t in parsed.tokens] == ["tok-0", "tok-1", "tok-2", "tok-3"]


def test_default_span_scores_are_the_share_of_token_weight():
    parsed = _Parsed(_page(span_scores=None))
    for key, label in zip(KEYS, PANELS, strict=True):
        mass = np.array([PANELS[label][0, a:b].sum() for a, b in SPANS])
        shown = {r["href"]: float(r["sc"]) for r in parsed.rows(key)}
        assert shown == pytest.approx(
            {f"#span-{k}": v for k, v in enumerate(mass / mass.sum())}, 5e-3
        )


def test_every_text_is_escaped():
    page = _page()
    parsed = _Parsed(page)
    # the parser (an independent decoder) gets the exact texts back ...
    assert [b["text"] for b in parsed.buttons] == [u.strip() for u in UNITS]
    assert parsed.radios[2]["label"] == 'mean "attention" <avg>'
    assert parsed.tabs[2] == 'mean "attention" <avg>'
    assert "".join(t["text"] for t in parsed.tokens) == "".join(TOKENS)
    # ... and none of them leaked in raw
    assert "<b>the</b>" not in page and "__pwned = 1</script>" not in page
    assert "<test>" not in page and "<avg>" not in page and "<&>" not in page
    assert "&lt;b&gt;the&lt;/b&gt;" in page and "&amp; &quot;heart&quot;" in page
    assert "white-space:pre-wrap" in page  # spaces and newlines kept as typed
    # exactly one closing tag per script element: the JSON blob cannot end early
    assert page.count("</script>") == 2, "a text closed a script element"


def test_json_blob_parses_back_to_the_inputs():
    data = json.loads(_Parsed(_page(selected=1)).blob)
    assert data["units"] == UNITS and data["gold"] == GOLD and data["selected"] == 1
    assert data["finished"] is True and data["bins"] == BINS
    assert [m["label"] for m in data["methods"]] == list(PANELS)
    for m, (label, weights) in zip(data["methods"], PANELS.items(), strict=True):
        assert m["attributed"] == ATTRIBUTED.get(label)
        assert m["maxv"] == pytest.approx(weights.max(axis=1))
        for u, codes in enumerate(m["codes"]):
            pairs = [codes[i : i + 2] for i in range(0, len(codes), 2)]
            levels = np.array([B64.index(a) * 64 + B64.index(b) for a, b in pairs])
            np.testing.assert_allclose(
                levels / data["levels"], weights[u] / weights[u].max(), atol=0.5 / data["levels"]
            )


def test_cut_answer_is_marked():
    assert _Parsed(_page()).warning == ""
    page = _page(finished=False)
    parsed = _Parsed(page)
    assert "Answer cut at the token limit" in parsed.warning
    assert "cut at the token limit" in page.split('<dl class="qa">')[1].split("</dl>")[0]
    assert [b["text"].endswith("cut") for b in parsed.buttons] == [False, False, True]
    assert json.loads(parsed.blob)["finished"] is False


def test_numpy_integers_and_bools_are_accepted():
    page = _page(
        spans=[(np.int64(s), np.int64(e)) for s, e in SPANS],
        gold=[np.int64(1), None, np.int32(0)],
        attributed={"all heads": [np.int64(0), None, np.int64(1)]},
        finished=np.bool_(False),
    )
    data = json.loads(_Parsed(page).blob)
    assert data["gold"] == [1, None, 0] and data["finished"] is False


def test_save_writes_atomically(tmp_path):
    target = tmp_path / "view.html"
    target.write_text("old", encoding="utf-8")
    assert save_attribution_html(target, TOKENS, PANELS, UNITS, selected=1) == target
    assert target.read_text(encoding="utf-8") == attribution_html(TOKENS, PANELS, UNITS, selected=1)
    assert sorted(tmp_path.iterdir()) == [target]  # no temporary file left over


def test_save_leaves_the_old_file_on_error(tmp_path):
    target = tmp_path / "view.html"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(ValueError, match="selected"):
        save_attribution_html(target, TOKENS, PANELS, UNITS, selected=9)
    assert target.read_text(encoding="utf-8") == "old"
    assert sorted(tmp_path.iterdir()) == [target]


_BAD = np.ones((3, len(TOKENS)))


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"tokens": []}, "tokens must not be empty"),
        ({"tokens": ["a", 3]}, "tokens must all be str"),
        ({"units": [], "panels": {"m": np.ones((0, len(TOKENS)))}}, "units must not be empty"),
        ({"units": ["a", None, "c"]}, "units must all be str"),
        ({"panels": {}}, "panels must hold at least one"),
        ({"panels": {"m": np.ones((2, len(TOKENS)))}}, r"panels\['m'\] has shape \(2, 15\)"),
        ({"panels": {"m": np.ones(len(TOKENS))}}, r"expected \(len\(units\), len\(tokens\)\)"),
        ({"panels": {"m": np.where(np.eye(3, 15) > 0, np.nan, _BAD)}}, "NaN or infinite"),
        ({"panels": {"m": np.where(np.eye(3, 15) > 0, np.inf, _BAD)}}, "NaN or infinite"),
        ({"panels": {"m": np.where(np.eye(3, 15) > 0, -0.1, _BAD)}}, "negative weights"),
        ({"spans": [(0, 16)]}, r"spans\[0\] = \(0, 16\) must satisfy 0 <= start < end"),
        ({"spans": [(0, 3), (4, 4)]}, r"spans\[1\] = \(4, 4\)"),
        ({"spans": [(-1, 3)]}, r"spans\[0\] = \(-1, 3\)"),
        ({"spans": [(5, 9), (0, 6)]}, "spans must not overlap"),
        ({"attributed": {"all heads": [0, 2, None]}}, r"attributed\['all heads'\]\[1\] = 2"),
        ({"attributed": {"all heads": [0, 1]}}, r"attributed\['all heads'\] has 2 entries"),
        ({"attributed": {"nope": [0, 1, 0]}}, r"attributed has labels that are not panels"),
        ({"span_scores": {"nope": np.ones((3, 2))}}, r"span_scores has labels that are not"),
        ({"span_scores": {"all heads": np.ones((3, 3))}}, r"span_scores\['all heads'\] has shape"),
        ({"span_scores": {"all heads": np.full((3, 2), np.nan)}}, "NaN or infinite scores"),
        ({"span_scores": {"all heads": np.ones((3, 0))}, "spans": []}, "span_scores needs spans"),
        ({"gold": [0, 1, 5]}, r"gold\[2\] = 5 is not a span index"),
        ({"gold": [0]}, "gold has 1 entries"),
        ({"selected": 3}, "selected = 3 is out of range for 3 units"),
        ({"selected": -1}, "selected = -1 is out of range"),
        ({"finished": "no"}, "finished must be a bool"),
    ],
)
def test_invalid_arguments_raise(change, match):
    arguments: dict[str, Any] = {
        "tokens": TOKENS,
        "panels": PANELS,
        "units": UNITS,
        "spans": SPANS,
        "gold": GOLD,
    }
    arguments.update(change)
    with pytest.raises(ValueError, match=match):
        attribution_html(**arguments)


def test_a_3000_token_page_stays_small():
    example = long_example(3000)
    page = attribution_html(example.tokens, example.panels, example.units, **example.kwargs())
    size = len(page.encode("utf-8"))
    # 3 methods x 3 units x 3,002 tokens: the markup is about 35 bytes a token, the blob
    # 2 bytes a token per (method, unit); one copy of the context
    assert size < 260_000, size
    assert _Parsed(page).contexts == 1


# --------------------------------------------------------------------------- an Attribution


@pytest.fixture(scope="module")
def attributions() -> dict[str, Any]:
    from rcstat.attribution import Attributor
    from tests._tiny_models import tiny_model
    from tests._tiny_tokenizer import make_tiny_tokenizer

    chunks = [
        "The cat sat on the warm mat near the door.",
        "The dog slept in the garden all day long.",
        "A bird sang in the old tree by the river.",
    ]
    question, answer = "Where did the dog sleep?", "The dog slept in the garden. The cat sat."
    attributor = Attributor(tiny_model("llama"), make_tiny_tokenizer(), top_k=5)
    return {
        "chunk": attributor.attribute(chunks, question, answer),
        "token": attributor.attribute(" ".join(chunks), question, answer, granularity="token"),
    }


def test_page_of_an_attribution_ranks_its_eq10_scores(attributions):
    result = attributions["chunk"]
    parsed = _Parsed(attribution_page(result, unit=1))
    assert parsed.contexts == 1 and parsed.unit == 1
    assert "".join(t["text"] for t in parsed.tokens) == "".join(result.context_tokens)
    assert [r["label"] for r in parsed.radios] == [
        "top-5 RC heads, best sentence",
        "all heads (RC)",
        "mean attention",
    ]
    expected = {
        "a": result.scores_for("top", 5),
        "b": result.scores_for("all", None),
        "c": result.attention_scores(),
    }
    for key, (scores, attributed) in expected.items():
        rows = parsed.rows(key)
        assert [r["href"] for r in rows] == [
            f"#span-{k}" for k in np.argsort(-scores[1], kind="stable")
        ]
        assert [float(r["sc"]) for r in rows] == pytest.approx(sorted(scores[1])[::-1], 5e-3)
        assert [r["href"] for r in rows if "att" in r["classes"]] == [f"#span-{attributed[1]}"]
    assert parsed.warning == ""


def test_page_of_a_cut_attribution_warns(attributions, monkeypatch):
    result = attributions["chunk"]
    monkeypatch.setattr(result, "finished", False, raising=False)
    parsed = _Parsed(attribution_page(result))
    assert "Answer cut at the token limit" in parsed.warning
    assert parsed.buttons[-1]["text"].endswith("cut")


def test_page_of_a_token_attribution_ranks_tokens(attributions):
    result = attributions["token"]
    parsed = _Parsed(attribution_page(result))
    assert parsed.boxes == {}
    rows = parsed.rows("a")
    weights = result.token_weights()[0]
    assert [r["href"] for r in rows] == [
        f"#tok-{i}" for i in np.argsort(-weights, kind="stable")[:10]
    ]
    assert {h[1:] for h in parsed.hrefs} <= parsed.ids


def test_saved_page_renders_one_context(attributions, tmp_path):
    result = attributions["chunk"]
    path = save_attribution_page(tmp_path / "a.html", result)
    assert path.read_text(encoding="utf-8") == attribution_page(result)
    parsed = _Parsed(path.read_text(encoding="utf-8"))
    assert parsed.contexts == 1 and len(parsed.radios) == 3


# --------------------------------------------------------------------------- in a browser


# helpers the probes share: computed background of every token, click a method / a unit
_JS_HELPERS = """
  var ctx = document.getElementById("ctx");
  function toks() { return Array.from(ctx.querySelectorAll("span:not(.box)")); }
  function colours() {
    return toks().map(function (t) { return getComputedStyle(t).backgroundColor; });
  }
  function method(k) { document.querySelectorAll(".tabs label")[k].click(); }
  function unit(u) { document.querySelectorAll("button.unit")[u].click(); }
"""


def _probe(
    chromium: str, tmp_path: Path, page: str, body: str, *flags: str, name: str = "page"
) -> tuple[Any, _Parsed]:
    """Open ``page`` with a probe: ``body`` after the token and click helpers."""
    return probe(_Parsed, chromium, tmp_path, page, _JS_HELPERS + body, *flags, name=name)


def _expected_colours(weights: np.ndarray) -> list[str]:
    return [rgb(PALETTE[b - 1]) if b else "rgba(0, 0, 0, 0)" for b in _bins(weights)]


def test_browser_method_switch_recolours_the_context(chromium, tmp_path):
    body = (
        "var out = []; for (var k = 0; k < 3; k++) { method(k); out.push(colours()); } return out;"
    )
    seen, _ = _probe(chromium, tmp_path, _page(selected=1), body)
    for colours, weights in zip(seen, PANELS.values(), strict=True):
        assert colours == _expected_colours(weights[1])
    assert seen[0] != seen[1] != seen[2]


def test_browser_method_switch_needs_no_javascript(chromium, tmp_path):
    page = _page(selected=2)
    own = f"<script>{SCRIPT}</script>"
    assert own in page
    body = """var out = [];
      for (var k = 0; k < 3; k++) {
        method(k);
        var lists = Array.from(document.querySelectorAll("ol.ranked"));
        out.push({colours: colours(), shown: lists.map(function (l) {
          return getComputedStyle(l).display !== "none"; })});
      }
      return out;"""
    seen, _ = _probe(chromium, tmp_path, page.replace(own, ""), body)
    for k, (state, weights) in enumerate(zip(seen, PANELS.values(), strict=True)):
        assert state["colours"] == _expected_colours(weights[2])
        assert state["shown"] == [j == k for j in range(3)]  # only that method's ranked list


def test_browser_unit_click_matches_the_server_rendering(chromium, tmp_path):
    body = "unit(2); method(1); return colours();"
    seen, clicked = _probe(chromium, tmp_path, _page(selected=0), body, name="clicked")
    assert seen == _expected_colours(PANELS["all heads"][2])
    _check_unit(clicked, 2)
    _, served = _probe(chromium, tmp_path, _page(selected=2), "return 0;", name="served")
    # the script builds the same ranked lists, token classes and span marks as the server
    assert clicked.ranked == served.ranked
    assert [t["classes"] for t in clicked.tokens] == [t["classes"] for t in served.tokens]
    assert clicked.boxes == served.boxes
    assert clicked.ends == served.ends


def test_browser_hash_selects_the_unit(chromium, tmp_path):
    path = tmp_path / "view.html"
    save_attribution_html(
        path, TOKENS, PANELS, UNITS, spans=SPANS, attributed=ATTRIBUTED, gold=GOLD
    )
    dom = run_chromium(chromium, tmp_path / "profile", "--dump-dom", path.as_uri() + "#unit=1")
    parsed = _Parsed(dom)
    assert parsed.unit == 1
    assert parsed.bins("a") == _bins(PANELS["top-20 RC heads"][1])


def test_browser_tooltip_shows_the_weight(chromium, tmp_path):
    body = """method(2); unit(1);
      var t = toks()[4];
      t.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
      return t.title;"""
    title, _ = _probe(chromium, tmp_path, _page(), body)
    weights = PANELS['mean "attention" <avg>'][1]
    match = re.fullmatch(r"weight ≈ ([0-9.e-]+) \((\d+)% of max\) · (.*)", title)
    assert match is not None, title
    assert float(match[1]) == pytest.approx(weights[4], rel=5e-3, abs=weights.max() / 4000)
    assert abs(int(match[2]) - 100 * weights[4] / weights.max()) <= 0.51
    assert match[3] == 'mean "attention" <avg>'


def test_browser_runs_no_injected_script(chromium, tmp_path):
    hostile = '<img src=x onerror="window.__pwned = 2"><script>window.__pwned = 3</script>'
    page = attribution_html(
        TOKENS,
        {hostile: PANELS["all heads"]},
        [hostile, "</script>", "b"],
        title=hostile,
        question=hostile,
        answer=hostile,
        spans=[(14, 15)],  # the hostile token is a span: its text is in the ranked list too
    )
    body = """unit(1); unit(0);
      return {pwned: window.__pwned === undefined ? null : window.__pwned,
              text: toks().map(function (t) { return t.textContent; }).join(""),
              snippet: document.querySelector("ol.ranked .txt").textContent,
              imgs: document.querySelectorAll("img").length};"""
    seen, _ = _probe(chromium, tmp_path, page, body)
    assert seen["pwned"] is None and seen["imgs"] == 0
    assert seen["text"] == "".join(TOKENS)
    assert "window.__pwned = 1</script>" in seen["snippet"]


def test_browser_3000_tokens_render_fast_and_scroll_in_their_pane(chromium, tmp_path):
    example = long_example(3000)
    page = attribution_html(example.tokens, example.panels, example.units, **example.kwargs())
    body = """
      var root = document.documentElement;
      ctx.getBoundingClientRect();  // layout done
      var loaded = performance.now();
      var sidebar = document.querySelector("aside").getBoundingClientRect();
      var t0 = performance.now(); unit(1); ctx.getBoundingClientRect();
      var switched = performance.now() - t0;
      var links = Array.from(document.querySelectorAll("ol.ranked a")).map(function (a) {
        return a.getAttribute("href"); });
      var missing = links.filter(function (h) {
        var e = document.getElementById(h.slice(1)); return e === null || !ctx.contains(e); });
      var a = document.querySelector("ol.ranked.o-a li:last-child a");
      var target = document.getElementById(a.getAttribute("href").slice(1));
      a.click();
      var box = target.getBoundingClientRect(), pane = ctx.getBoundingClientRect();
      var units = document.querySelector(".units-card").getBoundingClientRect();
      var ranked = document.querySelector(".rank-card").getBoundingClientRect();
      return {loaded: loaded, switched: switched, links: links.length, missing: missing,
              paneScrolls: ctx.scrollHeight > 2 * ctx.clientHeight, scrollTop: ctx.scrollTop,
              targetInPane: box.top >= pane.top && box.bottom <= pane.bottom,
              pageScroll: root.scrollHeight - window.innerHeight,
              sideInView: [units.top >= 0, ranked.bottom <= window.innerHeight,
                           sidebar.top >= 0]};"""
    seen, parsed = _probe(chromium, tmp_path, page, body, "--window-size=1440,900")
    print(f"3,000 tokens: {len(page.encode())} bytes, {seen}")
    assert parsed.contexts == 1
    assert seen["links"] >= 30 and seen["missing"] == []
    assert seen["paneScrolls"] and seen["pageScroll"] <= 0  # the context scrolls, not the page
    assert seen["scrollTop"] > 0 and seen["targetInPane"]  # the jump link scrolled the pane
    assert all(seen["sideInView"])  # unit and ranked lists stay visible
    # generous bounds for a busy CI machine (measured: about 0.1 s to load, 0.08 s a switch)
    assert seen["loaded"] < 5_000, seen
    assert seen["switched"] < 1_000, seen


def test_browser_screenshot_shows_the_colours(chromium, tmp_path):
    import matplotlib.image

    page = _page()
    # the same page with the token colours switched off by one more style rule
    plain = page.replace("</head>", "<style>.ctx span{background:none!important}</style></head>")
    images = {}
    for name, document in (("coloured", page), ("plain", plain)):
        path = tmp_path / f"{name}.html"
        path.write_text(document, encoding="utf-8")
        png = tmp_path / f"{name}.png"
        flags = ("--hide-scrollbars", "--window-size=1200,900", f"--screenshot={png}")
        run_chromium(chromium, tmp_path / f"profile-{name}", *flags, path.as_uri())
        images[name] = matplotlib.image.imread(png)[..., :3]  # [y, x, rgb] in [0, 1]
    coloured, plain_image = images["coloured"], images["plain"]
    assert coloured.shape == (900, 1200, 3)
    assert coloured.std() > 0.02  # not a blank page
    # the pages differ only by the token colours: orange over white
    changed = np.abs(coloured - plain_image).max(axis=-1) > 0.05  # [y, x]
    assert changed.sum() > 2000
    r, b = coloured[..., 0][changed], coloured[..., 2][changed]
    assert np.mean(r - b > 0.1) > 0.8
