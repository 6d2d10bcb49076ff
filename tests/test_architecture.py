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


# Each part imports only itself and the parts below it; parts on one level are independent.
LAYERS = {
    "common": 0,
    "schedules": 1,
    "supervisor": 1,
    "model": 2,
    "store": 3,
    "dispatch": 4,
    "ticks": 4,
    "engine": 5,
    "worker": 5,
    "hooks": 6,
    "runtime": 7,
    "ui": 8,
    "cli": 9,
}
PURE = ("schedules", "model")  # decisions that take `now` and do no I/O
IO_MODULES = {
    "aiokafka",
    "aiosqlite",
    "asyncio",
    "os",
    "redis",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "subprocess",
    "textual",
    "threading",
}


def _part(module: str) -> str | None:
    """The part a tickui module belongs to (None for the package itself)."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 2 or module in {f"tickui.{p}" for p in LAYERS} else None


def _every_import(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module a module imports, anywhere in it (inside functions too)."""
    wanted = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                wanted.add(sub if sub in modules else node.module)
    return wanted


def test_every_part_has_a_level():
    parts = {_part(name) for name in _modules()} - {None}
    assert parts == set(LAYERS)


def test_imports_go_only_downward():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        mine = _part(name)
        if mine is None:
            continue
        for target in _every_import(path, modules):
            theirs = _part(target) if target in modules else None
            if theirs is not None and theirs != mine and LAYERS[theirs] >= LAYERS[mine]:
                upward.append(f"{name} -> {target}")
    assert not upward, "\n".join(sorted(upward))


def test_the_dashboards_view_code_is_pure():
    """ui/view says what rows, cells and columns show: no widget, screen or I/O."""
    found = []
    for name, path in _modules().items():
        if name.startswith("tickui.ui.view."):
            for target in _every_import(path, {}):
                top = target.split(".")[0]
                # signal: only its names (an exit by SIGTERM reads TERM)
                if (top in IO_MODULES - {"signal"}) or target.startswith(
                    ("tickui.ui.widgets", "tickui.ui.screens", "tickui.ui.app")
                ):
                    found.append(f"{name} imports {target}")
    assert not found, "\n".join(found)


def test_pure_parts_import_no_io():
    found = []
    for name, path in _modules().items():
        if _part(name) in PURE:
            for target in _every_import(path, {}):
                if target.split(".")[0] in IO_MODULES:
                    found.append(f"{name} imports {target}")
    assert not found, "\n".join(found)


MODULE_LINES = 550  # "about 500": a module past it is split by responsibility


def test_no_module_outgrows_about_500_lines():
    long = {
        name: count
        for name, path in _modules().items()
        if (count := len(path.read_text().splitlines())) > MODULE_LINES
    }
    assert not long, f"split by responsibility: {long}"
