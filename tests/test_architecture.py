"""The shape of the code: tickui's modules import one another without a cycle (imports made
inside a function, to load a part only when it is used, and TYPE_CHECKING ones aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "tickui"


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The tickui modules a module imports as it loads (its top-level statements)."""
    wanted = set()
    for node in ast.parse(path.read_text()).body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from a.b import c` depends on module a.b.c when there is one, else on a.b
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.append(sub if sub in modules else node.module)
        wanted.update(name for name in names if name in modules)
    return wanted


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as a path, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_no_module_imports_itself_back_through_others():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert len(graph) > 50  # every module was read
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
