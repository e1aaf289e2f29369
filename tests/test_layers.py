"""The architecture of ``src/rcstat`` as a test: one-way layers and no import cycle.

Each row of :data:`LAYERS` may import only its own component and the rows above it, so data
flows model → capture → statistics → applications → evaluation → CLI, and ``report`` stays a
leaf: it renders results and imports no application, and no application imports it. Every
import counts, function-level ones and those under ``if TYPE_CHECKING:`` included. Inside a
package, modules import their siblings, never their own package's face (its ``__init__``). The
package root is the lazy public facade and may name anything.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "rcstat"

#: Components from the bottom up; a component may import only its own modules and rows above.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"defaults", "checks", "progress", "files", "lazy"}),
    frozenset({"stats", "metrics", "report"}),
    frozenset({"segments", "models", "data", "runs"}),
    frozenset({"capture"}),
    frozenset({"generation"}),
    frozenset({"analysis", "press", "attribution"}),
    frozenset({"heads", "grounding"}),
    frozenset({"evaluation"}),
    frozenset({"demo", "commands"}),
    frozenset({"serve", "integrations"}),
    frozenset({"cli"}),
    frozenset({"__main__"}),
)
RANK = {component: rank for rank, row in enumerate(LAYERS) for component in row}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """``(imported rcstat module, line)`` for every import, wherever it stands."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield _resolve(base, alias.name), node.lineno


def _resolve(base: str, name: str) -> str:
    """``from base import name``: the submodule when ``name`` is one, else ``base``."""
    candidate = f"{base}.{name}"
    path = SRC / Path(*candidate.split("."))
    return candidate if path.with_suffix(".py").is_file() or path.is_dir() else base


def _graph() -> dict[str, list[tuple[str, int]]]:
    graph: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = _imports(tree, module, path.name == "__init__.py")
        graph[module] = [(t, line) for t, line in targets if t.split(".")[0] == "rcstat"]
    return graph


def _component(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_component_has_a_layer() -> None:
    components = {_component(m) for m in _graph()} - {None}
    assert components <= set(RANK), f"components without a layer: {components - set(RANK)}"


def test_imports_go_only_down_the_layers() -> None:
    violations = []
    for module, targets in _graph().items():
        source = _component(module)
        if source is None:  # the package root: the lazy public facade
            continue
        for target, line in targets:
            component = _component(target)
            if component is None:
                violations.append(f"{module}:{line} imports the package root")
            elif component != source and RANK[component] >= RANK[source]:
                violations.append(f"{module}:{line} imports {target} (layer {component})")
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_report_imports_nothing_of_the_applications() -> None:
    for module, targets in _graph().items():
        if _component(module) == "report":
            allowed = LAYERS[0] | LAYERS[1]
            above = [t for t, _ in targets if _component(t) not in allowed]
            assert not above, f"{module} imports {above}"


#: The components that render results through report: everything below them is rendered.
RENDERERS = frozenset(
    {"report", "evaluation", "demo", "commands", "serve", "integrations", "cli", "__main__"}
)


def test_no_application_imports_report() -> None:
    """Results are rendered by their callers (evaluation, demo, CLI), never by themselves."""
    found = [
        f"{module}:{line} imports {target}"
        for module, targets in _graph().items()
        if _component(module) not in RENDERERS
        for target, line in targets
        if _component(target) == "report"
    ]
    assert not found, "applications importing report:\n" + "\n".join(found)


def _packages() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("__init__.py")} - {"rcstat"}


def test_submodules_import_siblings_not_their_package_face() -> None:
    """``rcstat.stats.rc`` imports ``rcstat.stats.blocks``, never ``rcstat.stats`` itself."""
    packages = _packages()
    found = [
        f"{module}:{line} imports {target}"
        for module, targets in _graph().items()
        for target, line in targets
        if target in packages and module.startswith(target + ".")
    ]
    assert not found, "imports of a package's own face:\n" + "\n".join(found)


def test_there_is_no_import_cycle() -> None:
    graph = {
        m: sorted({t for t, _ in targets if t in _graph_keys()}) for m, targets in _graph().items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                pytest.fail("import cycle: " + " → ".join(cycle))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in graph:
        if node not in state and node != "rcstat":
            visit(node)


def _graph_keys() -> set[str]:
    return {_module_name(p) for p in PACKAGE.rglob("*.py")} - {"rcstat"}


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    """The parser finds function-level and TYPE_CHECKING imports alike."""
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rcstat.cli import main\n"
        "def f():\n    from rcstat.evaluation import kv\n"
    )
    found = [t for t, _ in _imports(ast.parse(code), "rcstat.stats.x", False)]
    assert "rcstat.evaluation.kv" in found
    assert "rcstat.cli" in found


def _contributing_layers() -> list[frozenset[str]]:
    """The components of each row of CONTRIBUTING.md's layer table, in order."""
    text = (SRC.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            rows.append(frozenset(re.findall(r"`([\w.]+)`", cells[1])))
    return rows


def test_contributing_lists_the_layers_of_this_test() -> None:
    """CONTRIBUTING.md's layer table is the one enforced here, row for row."""
    assert _contributing_layers() == list(LAYERS)


#: The most lines of a module, and of a command-line module (a module past its limit is split
#: where its code has a seam).
MODULE_LINES, CLI_LINES = 600, 250


def test_no_module_is_over_its_line_limit() -> None:
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        limit = CLI_LINES if "cli" in path.relative_to(PACKAGE).parts[:-1] else MODULE_LINES
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            too_long.append(f"{path.relative_to(SRC)}: {lines} > {limit}")
    assert not too_long, too_long
