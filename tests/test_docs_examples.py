"""Every ```python block of README.md and docs/*.md runs as written.

The blocks of one page run in order in one namespace (a later block may use an earlier one's
names), in a temporary working folder (examples that write ``runs/...`` write there). A block
whose first line is ``# needs: <thing>[, <thing>]`` is skipped with that reason where the
thing is missing:

- ``gpu``: a CUDA device;
- ``shared-data``: the developer slices (``shared/data``, see ``rcstat.data.find_shared_data``);
- ``long``: minutes of work (a dataset job, the demo); run with ``RCSTAT_DOCS_LONG=1``;
- ``press``: the ``rcstat[press]`` extra (kvpress);
- ``server``: a running ``rcstat serve``; run with ``RCSTAT_DOCS_SERVER=1``;
- anything else is a module name, present when it can be imported (``ragas``, ...).

A ```text block right after a ```python block (nothing but blank lines between) is that block's
printed output: what the block prints must end with it, line for line (trailing spaces aside;
a framework may print its own lines before the example's).
Other output and pseudo-code are fenced as ```text or ```bash, never ```python. Pages whose
examples load the default model carry the ``slow`` marker; the model is loaded once per
session (``rcstat.load_model()`` without arguments returns the same model and tokenizer).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(
    r"^```python[ \t]*\n(.*?)^```[ \t]*$(?:\n\s*^```text[ \t]*\n(.*?)^```[ \t]*$)?",
    re.MULTILINE | re.DOTALL,
)
_NEEDS = re.compile(r"\A#\s*needs:\s*(.+)")
_SLOW = ("load_model(", ".run(", "run_demo(")


@dataclass(frozen=True)
class Block:
    """One ```python block: its page, its first line's number, its code and the output the
    page shows for it (None: none)."""

    page: Path
    line: int
    code: str
    output: str | None = None

    @property
    def needs(self) -> tuple[str, ...]:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        found = _NEEDS.match(first)
        return tuple(n.strip() for n in found.group(1).split(",")) if found else ()

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The ```python blocks of ``page``, in order."""
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, m.start()) + 2, m.group(1), m.group(2))
        for m in _FENCE.finditer(text)
    ]


def missing(need: str) -> str | None:
    """Why ``need`` is not available here, or None when it is."""
    if need == "gpu":
        import torch

        return None if torch.cuda.is_available() else "needs: gpu (no CUDA device)"
    if need == "shared-data":
        from rcstat.data import find_shared_data

        return None if find_shared_data() else "needs: shared-data (no shared/data slices)"
    if need in ("long", "server"):
        env = f"RCSTAT_DOCS_{need.upper()}"
        return None if os.environ.get(env) == "1" else f"needs: {need} (set {env}=1)"
    if need == "press":
        return None if importlib.util.find_spec("kvpress") else "needs: press (kvpress missing)"
    module = need.replace("-", "_")
    if module.isidentifier() and importlib.util.find_spec(module) is not None:
        return None
    return f"needs: {need} (not installed)"


ALL = [block for page in PAGES for block in blocks_of(page)]


def _param(block: Block) -> Any:
    page_code = "".join(b.code for b in ALL if b.page == block.page)
    marks = [pytest.mark.slow] if any(s in page_code for s in _SLOW) else []
    return pytest.param(block, id=block.id, marks=marks)


@dataclass
class _PageRun:
    """A page's namespace and the blocks already run in it."""

    namespace: dict[str, Any] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    failed: str | None = None


@pytest.fixture(scope="module")
def runs() -> dict[Path, _PageRun]:
    return {}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs-examples")


@pytest.fixture(scope="module", autouse=True)
def _one_default_model() -> Any:
    """``rcstat.load_model()`` (no arguments) loads the embedded model once for the module."""
    import rcstat

    original = rcstat.load_model
    loaded: list[Any] = []

    def load_model(*args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return original(*args, **kwargs)
        if not loaded:
            loaded.append(original())
        return loaded[0]

    rcstat.load_model = load_model  # type: ignore[attr-defined]
    yield
    rcstat.load_model = original  # type: ignore[attr-defined]


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def _run(block: Block, namespace: dict[str, Any]) -> None:
    """Run ``block`` in ``namespace``; where the page shows its output, what it prints must be
    that output."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(block.code, block.id, "exec"), namespace)
    if block.output is not None:
        shown = _lines(block.output)
        assert _lines(printed.getvalue())[-len(shown) :] == shown, (
            f"{block.id} prints other than the page shows:\n{printed.getvalue()}"
        )


def test_pages_have_examples() -> None:
    assert blocks_of(ROOT / "README.md"), "README.md has no ```python example"


def test_an_output_block_is_the_output_of_the_block_before_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint('a ')\n```\n\n```text\na\n```\n\nprose\n\n"
        "```python\nprint('b')\n```\nprose\n```text\nnot an output\n```\n",
        encoding="utf-8",
    )
    first, second = blocks_of(page)
    assert (first.output, second.output) == ("a\n", None)
    here = ROOT / "README.md"  # a block's id names its page in the repository
    _run(Block(here, first.line, first.code, first.output), {})
    _run(Block(here, 1, "print('banner'); print('a')", "a\n"), {})  # its lines last
    for code in ("print('c')", "print('a'); print('c')"):
        with pytest.raises(AssertionError, match="prints other than the page shows"):
            _run(Block(here, 1, code, "a\n"), {})


def test_needs_lines_are_known_or_modules() -> None:
    for block in ALL:
        for need in block.needs:
            assert re.fullmatch(r"[a-z][a-z0-9_-]*", need), f"{block.id}: bad need {need!r}"


@pytest.mark.parametrize("block", [_param(b) for b in ALL])
def test_example_runs_as_written(
    block: Block,
    runs: dict[Path, _PageRun],
    workdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reasons = [r for r in map(missing, block.needs) if r]
    if reasons:
        pytest.skip("; ".join(reasons))
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    state = runs.setdefault(block.page, _PageRun())
    if state.failed:
        pytest.fail(f"an earlier block of the page failed: {state.failed}")
    page = [b for b in ALL if b.page == block.page]
    for earlier in page[: page.index(block) + 1]:  # catch up when run alone (-k)
        if earlier.line in state.done or any(map(missing, earlier.needs)):
            continue
        try:
            _run(earlier, state.namespace)
        except BaseException:
            state.failed = earlier.id
            raise
        state.done.add(earlier.line)
