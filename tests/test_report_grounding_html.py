"""Tests of rcstat.report.grounding_html: the grounding page as HTML and in a real browser.

Groundings are built by hand (tokens and contexts with HTML specials, a carriage return, a
sentence without support, overlapping supports, NaN and out-of-range token scores). The
document is parsed back with ``html.parser`` (an independent decoder for the escaping: the token
texts must join to the response, the context must decode to itself), colour bins are checked
against ``floor(10 · s)`` computed here one Python float at a time. The browser tests drive a
headless Chromium (skipped when none is on PATH): a script appended to the page clicks and
presses keys, reads computed styles and layout boxes, and writes what it saw into the DOM that
``--dump-dom`` returns.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rcstat.attribution.spans import TextSpan
from rcstat.grounding.result import Grounding, SentenceGrounding
from rcstat.report import grounding_html as module
from rcstat.report.grounding_html import PALETTE, grounding_page, save_grounding_html
from rcstat.report.score_scale import BINS, bin_edges, score_bins
from tests._browser import PageReader, probe, rgb

HOSTILE = '<img src=x onerror="window.__pwned = 9"><script>window.__pwned = 8</script>'
CONTEXT = (
    'The <b>Eiffel</b> Tower & "friends" was built in 1889.\r\n'
    "It is 330 m tall.</script><script>window.__pwned = 1</script> "
    "Gustave Eiffel's company built it.\n\nParis <!-- is --> in France."
)
# (token texts, index of the sentence it belongs to or None) in response order
_TOKENS: list[tuple[str, int | None]] = [
    ("The", 0),
    (" <b>tower</b>", 0),
    (" was", 0),
    (" built", 0),
    (" in", 0),
    (" 1889", 0),
    (".", 0),
    (" ", None),
    ("It", 1),
    (" is", 1),
    (' 330 m & "tall"', 1),
    (".", 1),
    ("  ", None),
    ("</script><script>window.__pwned = 2</script>", 2),
    (" It", 2),
    (" glows", 2),
    (".", 2),
    ("\r\n", None),
    ("Eiffel's", 3),
    (" firm", 3),
    (" '", 3),
    ("built", 3),
    ("' it", 3),
]
TOKENS = [t for t, _ in _TOKENS]
RESPONSE = "".join(TOKENS)
# NaN, exact bin edges, below 0 and above 1 among them
SCORES = [
    0.95, 0.91, 0.9, 1.0, 0.87, 0.5, 0.72, math.nan, 0.66, 0.61, 0.55, 0.6,
    0.3, 0.04, 0.1, -0.2, 0.0, math.nan, 0.35, 1.3, 0.29, 0.999, 0.45,
]  # fmt: skip
# per sentence: (supported, support text located in CONTEXT or None, share, score)
_SUPPORT = "It is 330 m tall.</script><script>window.__pwned = 1</script> Gustave"
_SENTENCES: list[tuple[bool, tuple[int, int] | None, float | None, float]] = [
    (True, (0, CONTEXT.index("\r\n")), 0.61, 0.81),
    (True, (CONTEXT.index(_SUPPORT), CONTEXT.index(_SUPPORT) + len(_SUPPORT)), 0.47, 0.58),
    (False, None, None, 0.07),
    # overlaps the support of sentence 1 (the page cuts the context at every boundary)
    (False, (CONTEXT.index("Gustave"), CONTEXT.index("\n\n")), 0.33, 0.31),
]
THRESHOLD = 0.5
BASELINES = {"lookback": 0.42, "attention_score": -3.25, "neg_nll": math.nan, HOSTILE: 0.5}


def _grounding(**changes: Any) -> Grounding:
    starts = np.cumsum([0] + [len(t) for t in TOKENS])
    spans = np.stack([starts[:-1], starts[1:]], axis=1).astype(np.int64)  # [G, 2]
    sentences = []
    for i, (supported, support, share, score) in enumerate(_SENTENCES):
        members = [t for t, (_, s) in enumerate(_TOKENS) if s == i]
        first, last = members[0], members[-1] + 1
        start, end = int(spans[first, 0]), int(spans[last - 1, 1])
        sentences.append(
            SentenceGrounding(
                start=start,
                end=end,
                text=RESPONSE[start:end],
                tokens=(first, last),
                score=score,
                supported=supported,
                support=None if support is None else TextSpan(*support, CONTEXT[slice(*support)]),
                support_share=share,
            )
        )
    arguments: dict[str, Any] = {
        "context": CONTEXT,
        "question": f"How tall is it? {HOSTILE}",
        "response": RESPONSE,
        "token_texts": list(TOKENS),
        "token_spans": spans,
        "token_scores": np.array(SCORES, dtype=np.float64),
        "sentences": sentences,
        "score": min(s.score for s in sentences),
        "threshold": THRESHOLD,
        "baselines": dict(BASELINES),
        "probe_score": 0.83,
        "method": {"window": 4, "note": HOSTILE},
        "model": f"tiny-llama {HOSTILE}",
        "finished": False,
    }
    arguments.update(changes)
    return Grounding(**arguments)


def _bin(score: float, threshold: float = THRESHOLD) -> int | None:
    """The oracle: ``5 + floor(5 · log10(s / t) / D)`` with ``D = clamp(log10(1 / t), 1, 6)``,
    clamped to the bins of the score's side of the threshold (0–4 below, 5–9 at or above)."""
    if math.isnan(score):
        return None
    span = min(max(math.log10(1 / threshold), 1.0), 6.0) if threshold > 0 else 6.0
    centre = threshold if threshold > 0 else 10**-span
    if score <= 0 or math.isinf(score):
        raw = 0 if score <= 0 else BINS - 1
    else:
        raw = 5 + math.floor(5 * math.log10(score / centre) / span)
    raw = min(max(raw, 0), BINS - 1)
    return max(raw, 5) if score >= threshold else min(raw, 4)


class _Parsed(PageReader):
    """What the tests read back from a page (or from a DOM dumped by Chromium)."""

    def __init__(self, document: str) -> None:
        super().__init__()
        self.tokens: list[dict[str, Any]] = []  # classes, title, text, sentence
        self.sentences: list[dict[str, Any]] = []  # attributes, classes, badge
        self.between: list[int] = []  # token indices outside any sentence element
        self.context = ""
        self.contexts = 0
        self.segments: list[dict[str, Any]] = []  # start, end, classes, text
        self.facts: dict[str, str] = {}
        self.verdict = ""
        self.note = ""
        self.warning = ""
        self.baselines: list[list[str]] = []
        self.legend_swatches: list[set[str]] = []
        self.legend_text = ""
        self.scripts = 0  # not counting the probe's
        self.detail = ""
        self.images = 0
        self.read(document)

    def _role(self, tag: str, a: dict[str, str], classes: set[str]) -> str:
        roles = {r for _, r in self._stack}
        if a.get("id") == "response":
            return "response"
        if "response" in roles and "sent" in classes:
            self.sentences.append({"attrs": a, "classes": classes, "badge": ""})
            return "sent"
        if "response" in roles and "tok" in classes:
            sentence = len(self.sentences) - 1 if "sent" in roles else None
            if sentence is None:
                self.between.append(len(self.tokens))
            self.tokens.append(
                {"classes": classes, "title": a.get("title"), "text": "", "sentence": sentence}
            )
            return "tok"
        if "sent" in roles and "badge" in classes:
            return "badge"
        if a.get("id") == "ctx":
            self.contexts += 1
            return "ctx"
        if "ctx" in roles and tag == "span":
            self.segments.append(
                {
                    "start": int(a["data-start"]),
                    "end": int(a["data-end"]),
                    "classes": classes,
                    "text": "",
                }
            )
            return "seg"
        if "data-fact" in a:
            self.facts[a["data-fact"]] = ""
            return "fact"
        if a.get("id") == "verdict":
            return "verdict"
        if a.get("id") == "verdict-note":
            return "note"
        if a.get("id") == "cut-warning":
            return "warning"
        if "baselines" in roles and tag == "tr":
            self.baselines.append([])
        if "baselines" in roles and tag in ("td", "th"):
            self.baselines[-1].append("")
            return "cell"
        if a.get("id") == "baselines":
            return "baselines"
        if a.get("id") == "legend":
            return "legend"
        if "legend" in roles and tag == "i":
            self.legend_swatches.append(classes)
        if a.get("id") == "detail":
            return "detail"
        return ""

    def _start(self, tag: str, a: dict[str, str], classes: set[str]) -> None:
        if tag == "script" and a.get("id") != "rcstat-test-probe":
            self.scripts += 1
        if tag == "img":
            self.images += 1

    def _data(self, data: str, role: str, roles: list[str]) -> None:
        if "ctx" in roles:
            self.context += data
        if "legend" in roles:
            self.legend_text += data
        if "detail" in roles:
            self.detail += data
        if role == "tok":
            self.tokens[-1]["text"] += data
        elif role == "badge":
            self.sentences[-1]["badge"] += data
        elif role == "seg":
            self.segments[-1]["text"] += data
        elif role == "fact":
            self.facts[list(self.facts)[-1]] += data
        elif role == "verdict":
            self.verdict += data
        elif role == "note":
            self.note += data
        elif role == "warning":
            self.warning += data
        elif role == "cell":
            self.baselines[-1][-1] += data

    def bins(self) -> list[int | None]:
        """Per token, its colour bin (None: the NaN class)."""
        out: list[int | None] = []
        for token in self.tokens:
            (cls,) = (c for c in token["classes"] if re.fullmatch(r"g(\d+|x)", c))
            out.append(None if cls == "gx" else int(cls[1:]))
        return out


# --------------------------------------------------------------------------- the document


def test_is_self_contained_without_network_references():
    page = grounding_page(_grounding(question="q", model="m", method={}, baselines={"x": 1.0}))
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert "http://" not in page and "https://" not in page and "url(" not in page
    assert re.search(r"\b(src|href)\s*=", page) is None
    assert "<style>" in page and "<script>" in page


def test_tokens_join_to_the_response_grouped_by_sentence():
    parsed = _Parsed(grounding_page(_grounding()))
    assert [t["text"] for t in parsed.tokens] == TOKENS  # every token once, \r kept
    assert "".join(t["text"] for t in parsed.tokens) == RESPONSE
    assert [t["sentence"] for t in parsed.tokens] == [s for _, s in _TOKENS]
    assert parsed.between == [7, 12, 17]  # whitespace between sentences sits between them
    assert [int(s["attrs"]["data-sentence"]) for s in parsed.sentences] == [0, 1, 2, 3]
    for s in parsed.sentences:  # focusable, announced as a button
        assert s["attrs"]["tabindex"] == "0" and s["attrs"]["role"] == "button"


def test_colour_bins_and_tooltips():
    parsed = _Parsed(grounding_page(_grounding()))
    assert parsed.bins() == [_bin(s) for s in SCORES]
    # by hand, threshold 0.5 (one decade a side, 0.2 decades a bin): 0.9 -> 6 (log10 1.8 =
    # 0.26), 0.5 -> 5, 0.6 -> 5, 0.1 -> 1 (log10 0.2 = -0.70), 1.0 -> 6, 1.3 -> 7, -0.2 -> 0,
    # 0.45 -> 4 (just below: red side)
    assert [parsed.bins()[i] for i in (2, 5, 11, 14, 3, 19, 15, 22)] == [6, 5, 5, 1, 6, 7, 0, 4]
    for token, score in zip(parsed.tokens, SCORES, strict=True):
        value = token["title"].removeprefix("score ")
        if math.isnan(score):
            assert value == "n/a"
        else:
            assert float(value) == pytest.approx(score, abs=5e-4)


@pytest.mark.parametrize("threshold", [THRESHOLD, 0.0021, 0.05, 1.0, 0.0, 1e-9])
def test_score_bins_matches_the_oracle_on_random_scores(threshold):
    rng = np.random.default_rng(0)
    scores = np.concatenate(
        [
            rng.uniform(-0.5, 1.5, 1000),
            10 ** rng.uniform(-12, 0, 1000),
            np.arange(11) / 10,
            [threshold, np.nextafter(threshold, 0), np.nan, np.inf, 0.0],
        ]
    )
    expected = [
        -1 if _bin(float(s), threshold) is None else _bin(float(s), threshold) for s in scores
    ]
    assert score_bins(scores, threshold).tolist() == expected


@given(
    st.lists(st.floats(0, 1), min_size=2, max_size=30),
    st.floats(1e-7, 1),
)
def test_score_bins_are_monotone_and_red_exactly_below_the_threshold(scores, threshold):
    bins = score_bins(sorted(scores), threshold)
    assert (np.diff(bins) >= 0).all()
    for score, b in zip(sorted(scores), bins, strict=True):
        assert bool(b >= BINS // 2) == (score >= threshold)


def test_colours_are_relative_to_the_shipped_threshold():
    """At the shipped profile's threshold (0.0021) a supported word is green and a failing one
    red: on a linear 0-1 scale both were the darkest red (bin 0)."""
    t = 0.0021
    supported = [0.0021, 0.005, 0.05, 0.3, 1.0]
    failing = [0.002, 0.0005, 1e-4, 1e-6, 0.0]
    assert score_bins(supported, t).tolist() == [5, 5, 7, 9, 9]
    assert score_bins(failing, t).tolist() == [4, 3, 2, 0, 0]
    g = _grounding(threshold=t, token_scores=np.full(len(TOKENS), 0.01))
    assert set(_Parsed(grounding_page(g)).bins()) == {_bin(0.01, t)} == {6}
    # each bin spans D/5 decades: D = log10(1/t)
    edges = bin_edges(t)
    assert edges[BINS // 2][0] == t and edges[0][0] == 0.0 and edges[-1][1] == 1.0
    ratio = edges[6][0] / edges[5][0]
    assert ratio == pytest.approx(10 ** (math.log10(1 / t) / 5))
    assert edges[-1][0] == pytest.approx(t * ratio**4)


def test_tooltips_show_small_scores_with_two_significant_digits():
    scores = np.full(len(TOKENS), 0.00043)
    parsed = _Parsed(grounding_page(_grounding(threshold=0.0021, token_scores=scores)))
    assert {t["title"] for t in parsed.tokens} == {"score 0.00043"}


def test_the_question_is_shown_only_when_the_user_gave_one():
    page = grounding_page(_grounding(question="How tall is it?"))
    assert "<dt>Question</dt><dd>How tall is it?</dd>" in page
    default = "Write a response based on the text above."
    hidden = grounding_page(_grounding(question=default, question_given=False))
    assert "<dt>Question</dt>" not in hidden and default not in hidden


def test_unsupported_sentences_are_marked():
    parsed = _Parsed(grounding_page(_grounding()))
    for s, (supported, *_) in zip(parsed.sentences, _SENTENCES, strict=True):
        assert s["attrs"]["data-supported"] == ("true" if supported else "false")
        assert ("unsupported" in s["classes"]) is not supported
        assert s["badge"] == ("" if supported else "⚠ unsupported")


def test_context_appears_once_and_decodes_to_itself():
    page = grounding_page(_grounding())
    parsed = _Parsed(page)
    assert parsed.contexts == 1
    assert parsed.context == CONTEXT  # \r, <b>, </script>, &, quotes, <!-- --> all survive
    assert page.count("company built it") == 1
    # pieces tile the context, cut at every support boundary; each piece is its slice
    for seg in parsed.segments:
        assert seg["text"] == CONTEXT[seg["start"] : seg["end"]]
    covered = {
        (seg["start"], seg["end"]) for seg in parsed.segments
    }  # pieces of the overlapping supports: before, shared, after
    first, second = _SENTENCES[1][1], _SENTENCES[3][1]
    assert first is not None and second is not None
    assert covered == {(first[0], second[0]), (second[0], first[1]), (first[1], second[1]),
                       (_SENTENCES[0][1][0], _SENTENCES[0][1][1])}  # fmt: skip


def test_no_user_text_becomes_markup():
    page = grounding_page(_grounding(), title=f"grounding {HOSTILE}")
    parsed = _Parsed(page)
    assert parsed.scripts == 2  # the JSON blob and the page's own script
    assert parsed.images == 0
    assert "<b>Eiffel" not in page and "<b>tower" not in page and "<!--" not in page
    assert page.count("</script>") == 2


def test_json_blob_is_script_safe_and_parses_back():
    g = _grounding()
    g.sentences[0] = SentenceGrounding(**{**vars(g.sentences[0]), "text": "a\u2028b\u2029 </x>&"})
    parsed = _Parsed(grounding_page(g))
    blob = parsed.blob
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in blob
    data = json.loads(blob)
    assert [s["text"] for s in data["sentences"]] == [s.text for s in g.sentences]
    assert data["sentences"][0]["text"] == "a\u2028b\u2029 </x>&"
    assert [s["support"] for s in data["sentences"]] == [
        None if s[1] is None else list(s[1]) for s in _SENTENCES
    ]
    assert [s["supported"] for s in data["sentences"]] == [s[0] for s in _SENTENCES]
    assert [s["share"] for s in data["sentences"]] == ["61%", "47%", "n/a", "33%"]
    assert data["threshold"] == "0.500"


def test_header_shows_score_verdict_model_probe_warning_and_baselines():
    parsed = _Parsed(grounding_page(_grounding()))
    assert parsed.facts["score"] == "0.070" and parsed.facts["threshold"] == "0.500"
    assert parsed.facts["model"] == f"tiny-llama {HOSTILE}"
    assert parsed.facts["probe"] == "0.830"
    assert parsed.facts["sentences"] == "4 · 2 unsupported"
    assert parsed.verdict == "⚠ unsupported"
    assert "the response was cut at the tokens of one pass (max_tokens)" in parsed.warning
    assert parsed.baselines == [
        ["baseline", "score"],
        ["lookback", "0.42"],
        ["attention_score", "-3.25"],
        ["neg_nll", "n/a"],
        [HOSTILE, "0.5"],
    ]


def test_header_of_a_finished_supported_response_without_probe():
    g = _grounding(finished=True, probe_score=None, score=0.81, baselines={}, model="")
    parsed = _Parsed(grounding_page(g))
    assert parsed.warning == "" and "probe" not in parsed.facts
    assert parsed.verdict == "✓ supported"
    assert parsed.facts["model"] == "unknown"
    assert parsed.baselines == []
    nan = _Parsed(grounding_page(_grounding(score=math.nan)))
    assert nan.verdict == "no score" and nan.facts["score"] == "n/a"


def _unverified() -> Grounding:
    """Sentences 0–2 checked and supported, sentence 3 past the cut: verdict unverified."""
    g = _grounding()
    s = g.sentences
    g.sentences = [
        s[0],
        s[1],
        dataclasses.replace(s[2], score=0.62, supported=True),
        dataclasses.replace(
            s[3], score=math.nan, supported=False, support=None, support_share=None,
            verified=False,
        ),
    ]  # fmt: skip
    g.score = 0.58
    assert g.verdict == "unverified" and not g.supported and not g.unsupported
    return g


def test_an_unverified_response_says_so_not_unsupported():
    """Verdict "unverified" (no checked sentence unsupported, part of the response not checked):
    its own badge, style and line in the header; the sentence past the cut is marked unverified,
    never unsupported, in the response, the counts, the legend and the page's data."""
    page = grounding_page(_unverified())
    parsed = _Parsed(page)
    assert parsed.verdict == "? unverified" and "unsupported" not in parsed.verdict
    assert 'class="verdict unverified" id="verdict" data-verdict="unverified"' in page
    assert ".verdict.unverified{" in page and ".badge.unverified{" in page  # its own style
    assert "part of the response could not be checked" in " ".join(parsed.note.split())
    assert "1 sentence past the cut" in parsed.note
    assert parsed.facts["sentences"] == "4 · 0 unsupported · 1 unverified"
    assert "· 1 unverified" in page and "· 0 unsupported" not in page.split("</header>")[1]
    statuses = ["supported"] * 3 + ["unverified"]
    assert [s["attrs"]["data-status"] for s in parsed.sentences] == statuses
    assert [s["attrs"]["data-supported"] for s in parsed.sentences] == ["true"] * 3 + ["false"]
    assert [s["badge"] for s in parsed.sentences] == ["", "", "", "unverified"]
    assert "unverified" in parsed.sentences[3]["classes"]
    assert not any("unsupported" in s["classes"] for s in parsed.sentences)
    assert "not checked" in parsed.legend_text
    data = json.loads(parsed.blob)
    assert [s["status"] for s in data["sentences"]] == statuses
    # the same sentence checked and below the threshold: unsupported, as before
    g = _unverified()
    g.sentences[3] = dataclasses.replace(g.sentences[3], score=0.2, verified=True)
    g.score = 0.2
    assert g.verdict == "unsupported"
    parsed = _Parsed(grounding_page(g))
    assert parsed.verdict == "⚠ unsupported" and parsed.note == ""
    assert [s["badge"] for s in parsed.sentences] == ["", "", "", "⚠ unsupported"]
    assert "not checked" not in parsed.legend_text


def test_legend_has_every_bin_nan_and_the_markers():
    page = grounding_page(_grounding())
    parsed = _Parsed(page)
    assert [c for c in parsed.legend_swatches if c != {"gx"}] == [{f"g{b}"} for b in range(BINS)]
    assert {"gx"} in parsed.legend_swatches
    assert "⚠ unsupported" in parsed.legend_text and "no score" in parsed.legend_text
    assert "below the threshold 0.500" in parsed.legend_text
    assert "log scale" in parsed.legend_text
    # the swatches' titles are their score ranges; the tick sits between bins 4 and 5
    titles = re.findall(r'<i class="g(\d)" title="([^"]*)"', page)
    ranges = [f"{module._value(a)}–{module._value(b)}" for a, b in bin_edges(THRESHOLD)]
    assert [t for _, t in titles] == ranges and titles[5][1].startswith("0.5–")
    assert '<b class="tick" style="left:50%" title="threshold 0.500">' in page
    for b, colour in enumerate(PALETTE):  # the CSS gives each bin its palette colour
        assert f".g{b}{{background:{colour}" in page


def test_a_detectors_legend_names_its_span_threshold_and_marks_sentences_by_spans():
    """With a trained detector the tokens are coloured against the span threshold, not the
    response's threshold, and a sentence is unsupported where a span lies: a supported response
    may hold tokens below the span threshold (doubted, not unsupported), so the legend must not
    call a sentence score below it unsupported."""
    g = _grounding(token_threshold=0.075)
    parsed = _Parsed(grounding_page(g))
    legend = " ".join(parsed.legend_text.split())
    assert "below the span threshold 0.075" in legend
    assert "an unsupported span (underlined) lies in the sentence" in legend
    assert "sentence score below" not in legend and "0.500" not in legend
    page = grounding_page(g)
    assert '<b class="tick" style="left:50%" title="span threshold 0.075">' in page
    assert "red below it (doubted; unsupported inside an underlined span)" in page
    # the zero-shot view keeps the sentence score rule
    plain = " ".join(_Parsed(grounding_page(_grounding())).legend_text.split())
    assert "sentence score below the threshold 0.500" in plain and "span threshold" not in plain


def test_invalid_groundings_raise():
    with pytest.raises(ValueError, match="token_scores has shape"):
        grounding_page(_grounding(token_scores=np.zeros(3)))
    g = _grounding()
    g.sentences[1] = SentenceGrounding(**{**vars(g.sentences[1]), "tokens": (5, 40)})
    with pytest.raises(ValueError, match=r"sentences\[1\]\.tokens = \(5, 40\)"):
        grounding_page(g)
    g.sentences[1] = SentenceGrounding(**{**vars(g.sentences[1]), "tokens": (5, 9)})
    with pytest.raises(ValueError, match="overlaps or precedes"):
        grounding_page(g)
    g = _grounding()
    far = TextSpan(3, len(CONTEXT) + 1, "")
    g.sentences[0] = SentenceGrounding(**{**vars(g.sentences[0]), "support": far})
    with pytest.raises(ValueError, match=r"sentences\[0\]\.support"):
        grounding_page(g)


def test_save_grounding_html(tmp_path):
    g = _grounding()
    target = tmp_path / "grounding.html"
    assert save_grounding_html(target, g) == target
    assert target.read_text(encoding="utf-8") == grounding_page(g)
    assert [p.name for p in tmp_path.iterdir()] == ["grounding.html"]  # no temporary left


def _rcstat_imports(path: Path) -> set[str]:
    """Every ``rcstat`` module a file imports, under ``if TYPE_CHECKING:`` and in functions too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] == "rcstat"}


def test_the_page_and_the_grounding_never_import_each_other():
    """report renders through its protocols; grounding never imports report (a leaf)."""
    report = Path(module.__file__).parent
    for name in ("grounding_html.py", "grounding_view.py"):
        imported = _rcstat_imports(report / name)
        # report and the atomic write of rcstat.files: no application
        assert all(m.startswith("rcstat.report.") or m == "rcstat.files" for m in imported), (
            name,
            imported,
        )
    for path in Path(inspect.getfile(Grounding)).parent.rglob("*.py"):
        imported = _rcstat_imports(path)
        assert not any(m.startswith("rcstat.report") for m in imported), (path.name, imported)


def test_a_round_trip_through_save_load_renders_the_same(tmp_path):
    g = _grounding()
    loaded = Grounding.load(g.save(tmp_path / "g.json"))
    assert grounding_page(loaded) == grounding_page(g)


# --------------------------------------------------------------------------- in a browser


# helpers the probes share: the sentences, a click / a key on sentence i, what is highlighted
_JS_HELPERS = """
  var ctx = document.getElementById("ctx"), detail = document.getElementById("detail");
  function sent(i) { return document.querySelectorAll("#response .sent")[i]; }
  function click(i) { sent(i).querySelector(".tok").click(); }
  function key(i, k) {
    sent(i).focus();
    sent(i).dispatchEvent(new KeyboardEvent("keydown", {key: k, bubbles: true,
                                                        cancelable: true}));
  }
  function visible(e) {
    var r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden";
  }
  function state() {
    var hl = Array.from(ctx.querySelectorAll(".hl"));
    var none = detail.querySelector(".nosupport");
    var pane = ctx.getBoundingClientRect(), first = hl.length ? hl[0].getBoundingClientRect()
                                                              : null;
    return {
      hl: hl.map(function (e) { return e.textContent; }).join(""),
      hlPieces: hl.length,
      active: Array.from(document.querySelectorAll("#response .sent.active")).map(
        function (e) { return Number(e.dataset.sentence); }),
      pressed: Array.from(document.querySelectorAll("#response .sent")).map(
        function (e) { return e.getAttribute("aria-pressed"); }),
      noSupport: none === null ? null : {text: none.textContent, visible: visible(none)},
      share: (detail.querySelector(".d-share") || {}).textContent || null,
      score: (detail.querySelector(".d-score") || {}).textContent || null,
      quote: (detail.querySelector(".d-text") || {}).textContent || null,
      inPane: first === null ? null : first.top >= pane.top && first.bottom <= pane.bottom,
      scrollTop: ctx.scrollTop,
      hlColour: hl.length ? getComputedStyle(hl[0]).backgroundColor : null
    };
  }
"""


def _probe(chromium: str, tmp_path: Path, page: str, body: str, *flags: str) -> tuple[Any, _Parsed]:
    """Open ``page`` with a probe: ``body`` after the sentence and highlight helpers."""
    return probe(_Parsed, chromium, tmp_path, page, _JS_HELPERS + body, *flags)


def test_browser_clicks_show_one_support_at_a_time(chromium, tmp_path):
    body = """var out = {before: state()};
      click(1); out.second = state();
      click(3); out.overlapping = state();
      click(2); out.none = state();
      sent(2).querySelector(".badge").click(); out.badge = state();
      return out;"""
    seen, _ = _probe(chromium, tmp_path, grounding_page(_grounding()), body)
    assert seen["before"]["hl"] == "" and seen["before"]["active"] == []
    assert seen["before"]["noSupport"] is None
    second, overlapping = _SENTENCES[1][1], _SENTENCES[3][1]
    assert second is not None and overlapping is not None
    state = seen["second"]
    assert state["hl"] == CONTEXT[second[0] : second[1]]
    assert state["active"] == [1] and state["pressed"] == ["false", "true", "false", "false"]
    assert state["share"] == "47%" and state["score"] == "0.580 (threshold 0.500)"
    assert state["quote"] == RESPONSE[slice(*_sentence_chars(1))]
    assert state["noSupport"] is None and state["inPane"] is True
    assert state["hlColour"] == "rgb(255, 211, 61)"
    # overlapping supports: only the clicked sentence's span is marked
    assert seen["overlapping"]["hl"] == CONTEXT[overlapping[0] : overlapping[1]]
    assert seen["overlapping"]["active"] == [3]
    for state in (seen["none"], seen["badge"]):  # a click on the badge selects its sentence
        assert state["hl"] == "" and state["hlPieces"] == 0 and state["active"] == [2]
        assert state["noSupport"] == {"text": "no supporting span", "visible": True}
        assert state["share"] is None and state["score"] == "0.070 (threshold 0.500)"


def _sentence_chars(i: int) -> tuple[int, int]:
    s = _grounding().sentences[i]
    return s.start, s.end


def test_browser_keyboard_enter_and_space_select(chromium, tmp_path):
    body = """var out = {};
      key(1, "Enter"); out.enter = state(); out.focused = document.activeElement === sent(1);
      key(0, " "); out.space = state();
      key(2, "a"); out.other = state();
      return out;"""
    seen, _ = _probe(chromium, tmp_path, grounding_page(_grounding()), body)
    first, second = _SENTENCES[0][1], _SENTENCES[1][1]
    assert first is not None and second is not None
    assert seen["focused"]
    assert seen["enter"]["hl"] == CONTEXT[second[0] : second[1]] and seen["enter"]["active"] == [1]
    assert seen["space"]["hl"] == CONTEXT[first[0] : first[1]] and seen["space"]["active"] == [0]
    assert seen["other"] == seen["space"]  # any other key changes nothing


def test_browser_colours_legend_and_no_injected_script(chromium, tmp_path):
    body = """var legend = document.getElementById("legend"), r = legend.getBoundingClientRect();
      return {
        pwned: window.__pwned === undefined ? null : window.__pwned,
        colours: Array.from(document.querySelectorAll("#response .tok")).map(
          function (t) { return getComputedStyle(t).backgroundColor; }),
        response: Array.from(document.querySelectorAll("#response .tok")).map(
          function (t) { return t.textContent; }).join(""),
        context: ctx.textContent,
        legend: visible(legend) && r.top >= 0 && r.bottom <= window.innerHeight,
        outline: getComputedStyle(sent(2)).outlineStyle,
        plain: getComputedStyle(sent(0)).outlineStyle,
        badge: visible(sent(2).querySelector(".badge")),
        imgs: document.querySelectorAll("img").length};"""
    page = grounding_page(_grounding(), title=HOSTILE)
    seen, _ = _probe(chromium, tmp_path, page, body, "--window-size=1280,900")
    assert seen["pwned"] is None and seen["imgs"] == 0
    assert seen["response"] == RESPONSE and seen["context"] == CONTEXT
    expected = [
        rgb(module._NAN_COLOUR) if _bin(s) is None else rgb(PALETTE[_bin(s)]) for s in SCORES
    ]
    assert seen["colours"] == expected
    assert seen["legend"] and seen["badge"]
    assert seen["outline"] == "dashed" and seen["plain"] == "none"


def test_browser_scrolls_a_long_context_to_the_support(chromium, tmp_path):
    filler = "".join(f"Filler sentence number {k} says nothing at all. " for k in range(400))
    context = filler + CONTEXT
    g = _grounding(context=context)
    shift = len(filler)
    for i, s in enumerate(g.sentences):
        if s.support is not None:
            moved = TextSpan(s.support.start + shift, s.support.end + shift, s.support.text)
            g.sentences[i] = SentenceGrounding(**{**vars(s), "support": moved})
    body = "var top = ctx.scrollTop; click(1); var out = state(); out.top = top; return out;"
    seen, _ = _probe(chromium, tmp_path, grounding_page(g), body, "--window-size=1280,900")
    second = _SENTENCES[1][1]
    assert second is not None
    assert seen["top"] == 0 and seen["scrollTop"] > 0 and seen["inPane"] is True
    assert seen["hl"] == context[second[0] + shift : second[1] + shift]
