"""The documentation site builds with ``mkdocs build --strict``; the README stays a front page.

The strict build fails on a broken link or anchor, a page missing from the nav, a nav entry
without its page and a docstring that mkdocstrings cannot parse or resolve (``mkdocs.yml``).
It needs the docs tools (mkdocs-material, mkdocstrings[python]) and is skipped without them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 250


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    # the promise of the first lines: the two commands a newcomer types
    head = "\n".join(lines[:8])
    assert "make demo" in head and "make test" in head
    for page in ("analysis", "compression", "attribution", "grounding", "cli"):
        assert f"(docs/{page}.md)" in README.read_text(encoding="utf-8"), page


def test_readme_links_point_at_files() -> None:
    import re

    text = README.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), f"README.md links to a missing {target}"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None
    or importlib.util.find_spec("mkdocstrings_handlers") is None
    or importlib.util.find_spec("material") is None,
    reason="needs mkdocs-material and mkdocstrings[python] (the docs tools)",
)
def test_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        # not --quiet: it hides the warnings that --strict counts
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()
    assert (site / "api" / "index.html").is_file()
