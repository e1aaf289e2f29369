"""Headless Chromium for the HTML report tests: find it, run it, open a page with a probe.

A probe is a JavaScript function body returning a JSON-able value. ``open_with_probe`` appends
it to the page (after the page's own script, just before ``</body>``), runs Chromium with
``--dump-dom`` and returns the DOM after it ran: the value, JSON-encoded, is the text of
``<pre id="rcstat-test-out">``. ``probe`` reads that DOM back with a test module's own page
reader (a ``PageReader``: an independent ``html.parser`` decoder) and decodes the value. The
probe's script element carries ``id="rcstat-test-probe"`` so that a reader can tell it from the
page's own scripts.
"""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, TypeVar

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# %s: the probe's function body; an exception comes back as {"error": ...}
PROBE_TEMPLATE = """<script id="rcstat-test-probe">(function () {
  var out;
  try { out = (function () { %s })(); }
  catch (e) { out = {error: String(e) + "\\n" + e.stack}; }
  var pre = document.createElement("pre");
  pre.id = "rcstat-test-out";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script></body>"""


def find_chromium() -> str | None:
    """The first Chromium of ``CHROMIUM_NAMES`` on PATH, or None."""
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def run_chromium(binary: str, profile: Path, *flags: str) -> str:
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


def open_with_probe(
    chromium: str, tmp_path: Path, document: str, script: str, *flags: str, name: str = "page"
) -> str:
    """Open ``document`` with the probe ``script`` (a function body returning a JSON-able
    value) appended after the page's own script; the DOM Chromium dumps after it ran."""
    assert document.count("</body>") == 1
    path = tmp_path / f"{name}.html"
    path.write_text(document.replace("</body>", PROBE_TEMPLATE % script), encoding="utf-8")
    return run_chromium(chromium, tmp_path / f"profile-{name}", *flags, "--dump-dom", path.as_uri())


class PageReader(HTMLParser):
    """The plumbing of the test modules' page readers: a stack of (tag, role) in which each
    subclass's ``_role`` names (and records) the elements it reads, ``""`` for the others; the
    page's JSON blob and the probe's output are read here. A subclass sets its own fields after
    ``super().__init__()``, then calls ``read``."""

    _VOID = frozenset({"input", "meta", "br", "img", "link"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blob = ""  # the text of <script type="application/json">
        self.test_out = ""  # the text of the probe's <pre id="rcstat-test-out">
        self._stack: list[tuple[str, str]] = []  # (tag, role)

    def read(self, document: str) -> None:
        self.feed(document)
        self.close()

    def _start(self, tag: str, a: dict[str, str], classes: set[str]) -> None:
        """Every start tag, void ones included (before ``_role``)."""

    def _role(self, tag: str, a: dict[str, str], classes: set[str]) -> str:
        """The subclass's role of a non-void element, ``""`` for none of its roles."""
        return ""

    def _end(self, role: str) -> None:
        """An element of ``role`` is closed."""

    def _data(self, data: str, role: str, roles: list[str]) -> None:
        """Text inside ``roles`` (outermost first, no empty ones); ``role``: the innermost."""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = set(a.get("class", "").split())
        self._start(tag, a, classes)
        if tag in self._VOID:
            return
        role = self._role(tag, a, classes)
        if not role and tag == "script" and a.get("type") == "application/json":
            role = "json"
        elif not role and a.get("id") == "rcstat-test-out":
            role = "test-out"
        self._stack.append((tag, role))

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            done, role = self._stack.pop()
            self._end(role)
            if done == tag:
                return

    def handle_data(self, data: str) -> None:
        roles = [r for _, r in self._stack if r]
        role = roles[-1] if roles else ""
        if role == "json":
            self.blob += data
        elif role == "test-out":
            self.test_out += data
        self._data(data, role, roles)


Reader = TypeVar("Reader", bound=PageReader)


def probe(
    reader: Callable[[str], Reader],
    chromium: str,
    tmp_path: Path,
    document: str,
    script: str,
    *flags: str,
    name: str = "page",
) -> tuple[Any, Reader]:
    """``open_with_probe``; the probe's value and the DOM after it ran, read by ``reader``."""
    dom = open_with_probe(chromium, tmp_path, document, script, *flags, name=name)
    parsed = reader(dom)
    assert parsed.test_out, dom[-2000:]
    value = json.loads(html.unescape(parsed.test_out))
    assert not (isinstance(value, dict) and "error" in value), value
    return value, parsed


def rgb(colour: str) -> str:
    """``#rrggbb`` as a computed style writes it: ``rgb(r, g, b)``."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"
