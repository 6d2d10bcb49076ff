"""The store is a contract: outside tickui/store nothing knows the database is SQLite, and
whatever the rest of tickui asks of a store is declared in tickui.store.abc.Store, which
the SQLite store implements whole."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import tickui.store
from tickui.store.abc import Store
from tickui.store.base import StoreBase
from tickui.store.postgres import PostgresStore
from tickui.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[2] / "tickui"
STORE_DIR = ROOT / "store"
DATABASE_MODULES = {"sqlite3", "aiosqlite", "psycopg", "psycopg_pool"}
ALLOWED_STORE_MODULES = {"tickui.store", "tickui.store.abc"}
STORE_NAMES = {"store", "_store"}  # what callers call a store they hold
# `.sequence.store` is the tick sequence's own store (tickui.ticks.sequence), not the database.
NOT_A_STORE = {"sequence"}
SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|PRAGMA|BEGIN|COMMIT|CREATE|ALTER|DROP)\b")


def _callers() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if STORE_DIR not in p.parents)


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)


def _declared() -> set[str]:
    """What the contract declares: its methods and its attributes."""
    names = {n for n in vars(Store) if not n.startswith("_")}
    return names | set(Store.__annotations__)


def _forbidden_imports(tree: ast.AST) -> list[str]:
    """Every import of a database module or of the store's implementation, at any depth
    (inside functions and TYPE_CHECKING blocks too)."""
    public = set(tickui.store.__all__)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                inside = alias.name.startswith("tickui.store.")
                if root in DATABASE_MODULES or (inside and alias.name not in ALLOWED_STORE_MODULES):
                    found.append(f"import {alias.name} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root in DATABASE_MODULES:
                found.append(f"from {node.module} (line {node.lineno})")
            elif node.module.startswith("tickui.store"):
                if node.module not in ALLOWED_STORE_MODULES:
                    found.append(f"from {node.module} (line {node.lineno})")
                elif node.module == "tickui.store":
                    found += [
                        f"from tickui.store import {alias.name} (line {node.lineno})"
                        for alias in node.names
                        if alias.name not in public
                    ]
    return found


def _mentions_store(annotation: ast.expr | None) -> bool:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return bool(re.search(r"\bStore\b", annotation.value))
    return any(isinstance(n, ast.Name) and n.id == "Store" for n in ast.walk(annotation or []))


def _signature(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> dict[str, bool]:
    """Its parameters with an annotation: name -> whether it is a Store."""
    args = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
    return {a.arg: _mentions_store(a.annotation) for a in args if a.annotation is not None}


class _StoreUses(ast.NodeVisitor):
    """Attribute reads and calls on stores. A name or `self` attribute is a store by its
    annotation (`db: Store`; `store: SequenceStore` is not one); without one, by what
    callers call a store (`store`, `self._store`, `host.store`)."""

    def __init__(self) -> None:
        self.uses: list[tuple[str, int]] = []
        self.scopes: list[dict[str, bool]] = []
        self.classes: list[dict[str, bool]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        fields = {}
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                fields[item.target.id] = _mentions_store(item.annotation)
        for func in ast.walk(node):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                params = _signature(func)
                for stmt in ast.walk(func):
                    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                        for target in stmt.targets:
                            is_self = isinstance(target, ast.Attribute) and _is_self(target.value)
                            if is_self and stmt.value.id in params:
                                fields.setdefault(target.attr, params[stmt.value.id])
        self.classes.append(fields)
        self.generic_visit(node)
        self.classes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.scopes.append(_signature(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if self.scopes and isinstance(node.target, ast.Name):
            self.scopes[-1][node.target.id] = _mentions_store(node.annotation)
        self.generic_visit(node)

    def _is_store(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
            return node.id in STORE_NAMES
        if isinstance(node, ast.Attribute):
            if _is_self(node.value) and self.classes and node.attr in self.classes[-1]:
                return self.classes[-1][node.attr]
            owner = node.value
            owner_name = (
                owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            )
            return node.attr in STORE_NAMES and owner_name not in NOT_A_STORE
        return False

    def visit_Call(self, node: ast.Call) -> None:
        """`getattr(store, "name", ...)` and `hasattr(store, "name")` use `name` too."""
        by_name = isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
        if by_name and len(node.args) >= 2 and self._is_store(node.args[0]):
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self.uses.append((name.value, node.lineno))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._is_store(node.value):
            self.uses.append((node.attr, node.lineno))
        elif isinstance(node.value, ast.Name) and node.value.id == "Store":
            self.uses.append((f"Store.{node.attr}", node.lineno))
        self.generic_visit(node)


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _store_uses(tree: ast.AST) -> list[tuple[str, int]]:
    """(attribute, line) for every attribute read or call on a store, and ("Store.x", line)
    on the `Store` class itself: of the class, only `open` is for callers (an unbound
    `Store.get_task` would run the contract's empty method, not the store's)."""
    finder = _StoreUses()
    finder.visit(tree)
    return finder.uses


def test_nothing_outside_the_store_knows_the_database():
    offenders = {}
    for path in _callers():
        tree = ast.parse(path.read_text())
        found = _forbidden_imports(tree)
        found += [
            f"SQL text (line {node.lineno})"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL.match(node.value)
        ]
        if found:
            offenders[_name(path)] = found
    assert offenders == {}


def test_the_import_check_catches_each_kind():
    source = (
        "import sqlite3\n"
        "def f():\n    from aiosqlite import connect\n"
        "from tickui.store.claims import ClaimQueries\n"
        "from tickui.store import dbfile, Store\n"
        "import tickui.store.sqlite\n"
        "from tickui.store.abc import Store\n"
    )
    found = _forbidden_imports(ast.parse(source))
    assert sorted(line.split(" (")[0] for line in found) == [
        "from aiosqlite",
        "from tickui.store import dbfile",
        "from tickui.store.claims",
        "import sqlite3",
        "import tickui.store.sqlite",
    ]


@pytest.mark.parametrize("kind", [SQLiteStore, PostgresStore], ids=["sqlite", "postgresql"])
def test_each_store_implements_the_whole_contract(kind):
    assert issubclass(kind, Store)
    assert not inspect.isabstract(kind), sorted(kind.__abstractmethods__)
    assert tickui.store.Store is Store
    public = {
        name
        for cls in kind.__mro__
        if cls.__module__.startswith("tickui.store.")
        for name, value in vars(cls).items()
        if not name.startswith("_") and callable(getattr(kind, name))
    }
    assert public - _declared() == set()  # nothing public beyond the contract


def test_every_use_of_a_store_outside_the_store_is_in_the_contract():
    declared = _declared() | {"Store.open"}
    undeclared = {}
    seen = set()
    for path in _callers():
        for attr, line in _store_uses(ast.parse(path.read_text())):
            seen.add(attr)
            if attr not in declared:
                undeclared.setdefault(_name(path), []).append(f"{attr} (line {line})")
    assert undeclared == {}
    assert len(seen) > 60  # the walk found the callers (the engine, the CLI, the dashboard...)


def test_the_use_check_catches_an_undeclared_method():
    source = (
        "async def f(db: Store, store, other: SequenceStore):\n"
        "    await db.vacuum()\n"
        "    await store._all('x')\n"
        "    self.host.store.path\n"
        "    self.sequence.store.name\n"
        "    other.reserve()\n"
        "    getattr(store, 'remote_tail', None)\n"
        "    Store.get_task\n"
        "class Allocator:\n"
        "    def __init__(self, store: SequenceStore, db: 'Store') -> None:\n"
        "        self.store = store\n"
        "        self.db = db\n"
        "    def use(self, store):\n"
        "        self.store.reserve()\n"
        "        self.db.vacuum_too()\n"
        "        store.checkpoint()\n"
    )
    uses = [attr for attr, _ in _store_uses(ast.parse(source))]
    assert sorted(uses) == [
        "Store.get_task",
        "_all",
        "checkpoint",
        "path",
        "remote_tail",
        "vacuum",
        "vacuum_too",
    ]
    assert {"vacuum", "_all"} - _declared() == {"vacuum", "_all"}


def _defined_in(cls: type) -> set[str]:
    """What a class of the store declares: its members, and the attributes its methods set
    on `self`."""
    names = set(vars(cls)) | set(getattr(cls, "__annotations__", {}))
    tree = ast.parse(inspect.getsource(cls))
    for node in ast.walk(tree):
        assigned = isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
        if assigned and isinstance(node.value, ast.Name) and node.value.id == "self":
            names.add(node.attr)
    return names


def test_each_query_group_uses_only_what_it_or_the_base_declares():
    """A group may call the contract's methods (the whole store implements them) but no
    other group's private member: the connection and shared state are StoreBase's."""
    groups = [c for c in SQLiteStore.__mro__[1:] if issubclass(c, StoreBase) and c is not StoreBase]
    assert len(groups) == 8
    shared = _defined_in(StoreBase) | _declared()
    strays = {}
    for group in groups:
        own = _defined_in(group) | shared
        used = {
            node.attr
            for node in ast.walk(ast.parse(inspect.getsource(group)))
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        }
        if used - own:
            strays[group.__name__] = sorted(used - own)
    assert strays == {}


def test_the_database_errors_reach_the_one_line_faults_through_the_store():
    import sqlite3

    from tickui.common.faults import fault_text, is_disk_full, is_outage

    full = sqlite3.OperationalError("database or disk is full")
    locked = sqlite3.OperationalError("database is locked")
    assert is_disk_full(full) and fault_text(full).startswith("disk full: OperationalError")
    assert is_outage(locked) and not is_disk_full(locked)
    assert not is_outage(sqlite3.IntegrityError("UNIQUE constraint failed"))
    assert not is_outage(ValueError("a bug"))
    assert isinstance(locked, tickui.store.DATABASE_ERRORS)
