"""Tests of rcstat.report.attribution_html: the attribution view as HTML and in a real browser.

The document is parsed back with ``html.parser`` (an independent oracle for escaping: the
text of the token elements must join to the context, attributes must decode to the labels)
and the shades are checked against ``weight / max`` computed here. The browser tests drive a
headless Chromium (skipped when none is on PATH): a screenshot against an unshaded twin
page, and ``--dump-dom`` after ``#unit=1`` and after a scripted click, to check that the
JavaScript re-shades every panel.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rcstat.report.attribution_html import attribution_html, save_attribution_html

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
    "</script><script>alert(1)</script>",
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
ATTRIBUTED: dict[str, list[int | None]] = {"top-20 RC heads": [0, 1, None], "all heads": [1, 0, 0]}
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _page(**options: Any) -> str:
    arguments: dict[str, Any] = {
        "title": "attribution <test>",
        "question": "When was the tower built?",
        "answer": "It was built in 1889.",
        "spans": SPANS,
        "attributed": ATTRIBUTED,
        "gold": GOLD,
    }
    arguments.update(options)
    return attribution_html(TOKENS, PANELS, UNITS, **arguments)


class _Parsed(HTMLParser):
    """What the tests read back: per panel its tokens (alpha, title, text) and spans."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.panels: list[dict[str, Any]] = []
        self.buttons: list[dict[str, Any]] = []
        self.unit = -1
        self.blob = ""
        self._in: str | None = None  # "tok", "button", "json" while inside one
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        if tag == "main":
            self.unit = int(a["data-unit"])
        elif "panel" in classes:
            self.panels.append({"label": a["data-method"], "toks": [], "spans": {}})
        elif "tok" in classes:
            alpha = re.fullmatch(r"\s*--a:\s*([0-9.]+);?\s*", a["style"])
            assert alpha is not None, a["style"]
            self.panels[-1]["toks"].append([float(alpha[1]), float(a["title"]), ""])
            self._in = "tok"
        elif "span" in classes:
            self.panels[-1]["spans"][int(a["data-span"])] = set(classes) - {"span"}
        elif tag == "button":
            self.buttons.append({"active": "active" in classes, "text": ""})
            self._in = "button"
        elif tag == "script" and a.get("type") == "application/json":
            self._in = "json"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("span", "button", "script"):
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "tok":
            self.panels[-1]["toks"][-1][2] += data
        elif self._in == "button":
            self.buttons[-1]["text"] += data
        elif self._in == "json":
            self.blob += data


def _check_shaded(parsed: _Parsed, unit: int) -> None:
    """Every panel shows unit ``unit``: shades, tooltips, text and span marks."""
    assert parsed.unit == unit
    assert [b["active"] for b in parsed.buttons] == [u == unit for u in range(len(UNITS))]
    assert [p["label"] for p in parsed.panels] == list(PANELS)
    for panel in parsed.panels:
        weights = PANELS[panel["label"]][unit]
        alpha, title, text = zip(*panel["toks"], strict=True)
        assert list(text) == TOKENS
        np.testing.assert_allclose(alpha, weights / weights.max(), atol=5e-4)
        np.testing.assert_allclose(title, weights, rtol=1e-3)
        chosen = ATTRIBUTED.get(panel["label"], [None] * len(UNITS))[unit]
        for k, marks in panel["spans"].items():
            assert marks == {
                m for m, on in (("attributed", k == chosen), ("gold", k == GOLD[unit])) if on
            }
        assert sorted(panel["spans"]) == list(range(len(SPANS)))


# --------------------------------------------------------------------------- the document


def test_is_self_contained_without_network_references():
    page = _page()
    assert page.startswith("<!doctype html>") and page.endswith("</html>")
    assert "http://" not in page and "https://" not in page
    assert re.search(r"\b(src|href)\s*=", page) is None
    assert "<style>" in page and "<script>" in page


def test_selected_unit_is_rendered_server_side():
    _check_shaded(_Parsed(_page()), 0)
    _check_shaded(_Parsed(_page(selected=2)), 2)


def test_hand_computed_shades_and_tooltips():
    page = attribution_html(["a", "b", "c", "d"], {"m": np.array([[1.0, 3.0, 0.0, 6.0]])}, ["u"])
    (panel,) = _Parsed(page).panels
    assert [t[0] for t in panel["toks"]] == [0.167, 0.5, 0.0, 1.0]
    assert [t[1] for t in panel["toks"]] == [1.0, 3.0, 0.0, 6.0]


def test_zero_weights_give_no_shading():
    page = attribution_html(["a", "b"], {"m": np.zeros((2, 2))}, ["u", "v"], selected=1)
    (panel,) = _Parsed(page).panels
    assert [t[:2] for t in panel["toks"]] == [[0.0, 0.0], [0.0, 0.0]]


def test_every_text_is_escaped():
    page = _page()
    parsed = _Parsed(page)
    # the parser (an independent decoder) gets the exact texts back ...
    assert [b["text"] for b in parsed.buttons] == UNITS
    assert parsed.panels[2]["label"] == 'mean "attention" <avg>'
    assert "".join(t[2] for t in parsed.panels[0]["toks"]) == "".join(TOKENS)
    # ... and none of them leaked in raw
    assert "<b>the</b>" not in page and "alert(1)</script>" not in page
    assert "<test>" not in page and "<avg>" not in page and "<&>" not in page
    assert "&lt;b&gt;the&lt;/b&gt;" in page and "&amp; &quot;heart&quot;" in page
    assert "white-space:pre-wrap" in page  # spaces and newlines kept as typed
    # exactly one closing tag per script element: the JSON blob cannot end early
    assert page.count("</script>") == 2, "a text closed a script element"


def test_json_blob_parses_back_to_the_inputs():
    data = json.loads(_Parsed(_page(selected=1)).blob)
    assert data["units"] == UNITS and data["gold"] == GOLD and data["selected"] == 1
    assert data["spans"] == [list(s) for s in SPANS]
    assert [p["label"] for p in data["panels"]] == list(PANELS)
    for panel in data["panels"]:
        np.testing.assert_array_equal(np.array(panel["weights"]), PANELS[panel["label"]])
        assert panel["attributed"] == ATTRIBUTED.get(panel["label"])


def test_spans_and_gold_are_optional():
    parsed = _Parsed(attribution_html(TOKENS, PANELS, UNITS))
    assert all(p["spans"] == {} for p in parsed.panels)
    assert json.loads(parsed.blob)["gold"] is None
    assert "".join(t[2] for t in parsed.panels[1]["toks"]) == "".join(TOKENS)


def test_numpy_integers_are_accepted():
    page = _page(
        spans=[(np.int64(s), np.int64(e)) for s, e in SPANS],
        gold=[np.int64(1), None, np.int32(0)],
        attributed={"all heads": [np.int64(0), None, np.int64(1)]},
    )
    assert json.loads(_Parsed(page).blob)["gold"] == [1, None, 0]


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
        ({"attributed": {"nope": [0, 1, 0]}}, r"not panels: \['nope'\]"),
        ({"gold": [0, 1, 5]}, r"gold\[2\] = 5 is not a span index"),
        ({"gold": [0]}, "gold has 1 entries"),
        ({"selected": 3}, "selected = 3 is out of range for 3 units"),
        ({"selected": -1}, "selected = -1 is out of range"),
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


# --------------------------------------------------------------------------- in a browser


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.skip(f"no Chromium on PATH (looked for {', '.join(CHROMIUM_NAMES)})")


def _run_chromium(binary: str, profile: Path, *flags: str) -> str:
    """Run headless Chromium with its own profile folder; its stdout."""
    command = [
        binary,
        "--headless=new",
        "--no-sandbox",  # needed as root (CI containers)
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *flags,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_browser_screenshot_shows_the_shading(chromium, tmp_path):
    import matplotlib.image

    flat = {label: np.zeros_like(w) for label, w in PANELS.items()}
    images = {}
    for name, panels in (("shaded", PANELS), ("flat", flat)):
        page = save_attribution_html(tmp_path / f"{name}.html", TOKENS, panels, UNITS, spans=SPANS)
        png = tmp_path / f"{name}.png"
        flags = ("--hide-scrollbars", "--window-size=1200,1400", f"--screenshot={png}")
        _run_chromium(chromium, tmp_path / f"profile-{name}", *flags, page.as_uri())
        assert png.stat().st_size > 0
        images[name] = matplotlib.image.imread(png)[..., :3]  # [y, x, rgb] in [0, 1]
    shaded, flat_image = images["shaded"], images["flat"]
    assert shaded.shape == (1400, 1200, 3)
    assert shaded.std() > 0.02  # not a blank page
    # the pages differ only by the token shades: orange (230, 85, 13) over white
    changed = np.abs(shaded - flat_image).max(axis=-1) > 0.05  # [y, x]
    assert changed.sum() > 2000
    r, b = shaded[..., 0][changed], shaded[..., 2][changed]
    assert np.mean(r - b > 0.1) > 0.9


def test_browser_hash_selects_the_unit(chromium, tmp_path):
    page = save_attribution_html(
        tmp_path / "view.html", TOKENS, PANELS, UNITS, spans=SPANS, attributed=ATTRIBUTED, gold=GOLD
    )
    dom = _run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri() + "#unit=1")
    parsed = _Parsed(dom)
    assert len(parsed.panels) == len(PANELS)
    assert parsed.blob  # the JSON data element survives in the DOM
    _check_shaded(parsed, 1)


def test_browser_click_switches_the_unit(chromium, tmp_path):
    click = "<script>document.querySelectorAll('button.unit')[2].click();</script></body>"
    page = tmp_path / "view.html"
    page.write_text(
        _page(selected=1).replace("</body>", click), encoding="utf-8"
    )  # the click runs after the page's own script
    dom = _run_chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    _check_shaded(_Parsed(dom), 2)
