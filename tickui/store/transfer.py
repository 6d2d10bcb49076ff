"""Moving a setup from one store to another (a SQLite file to PostgreSQL, or back): every
row of what a store keeps, but the lease, in one transaction on the target.

Rows move by column name, so the two schemas' column orders do not matter; ids move with
them (a run's events and hook deliveries name it by id). The source is only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tickui.common.errors import BadInput
from tickui.store.abc import Store
from tickui.store.base import StoreBase

# What a copy moves, each table with its key (read in key order, a page at a time); the
# lease is not moved: whoever runs an engine on the target takes it anew.
TABLES: tuple[tuple[str, str], ...] = (
    ("tasks", "id"),
    ("occurrences", "id"),
    ("events", "seq"),
    ("hook_deliveries", "id"),
    ("requests", "id"),
    ("sequences", "key"),
    ("workers", "id"),
    ("dispatch_security", "name"),
    ("audit", "id"),
)
CONTENT = ("tasks", "occurrences", "events", "hook_deliveries")  # "not empty" means these
PAGE = 5000


@dataclass(frozen=True)
class CopyReport:
    counts: dict[str, int]  # rows per table, in the source (and copied unless dry run)
    replaced: dict[str, int]  # rows the target had and lost (with replace)
    dry_run: bool


def _base(store: Store) -> StoreBase:
    if not isinstance(store, StoreBase):
        raise TypeError(f"cannot copy {type(store).__name__}")
    return store


async def _rows(store: StoreBase, table: str, key: str, columns: Sequence[str]):
    cols = ", ".join(columns)
    after: Any = None
    while True:
        where, params = (f" WHERE {key} > ?", (after,)) if after is not None else ("", ())
        page = await store._all(
            f"SELECT {cols} FROM {table}{where} ORDER BY {key} LIMIT {PAGE}", params
        )
        if not page:
            return
        yield page
        after = page[-1][columns.index(key)]
        if len(page) < PAGE:
            return


async def _count(store: StoreBase, table: str) -> int:
    """The table's rows; 0 when the store predates it (the audit, before SQLite schema 10:
    a source is only read, so never migrated)."""
    if table == "audit" and not await store._columns(table):
        return 0
    return (await store._one(f"SELECT count(*) FROM {table}"))[0]


async def copy_store(
    source: Store, target: Store | None, *, dry_run: bool = False, replace: bool = False
) -> CopyReport:
    """Copy every table but the lease from `source` into `target`. A target that holds
    tasks, runs, events or deliveries is refused (BadInput) unless `replace`, which empties
    the copied tables first, in the same transaction. A dry run may name no target (one
    that does not exist yet, so is empty) and writes nothing."""
    src = _base(source)
    counts = {t: await _count(src, t) for t, _ in TABLES}
    if target is None:
        if not dry_run:
            raise TypeError("a copy needs a target")
        return CopyReport(counts, {}, True)
    dst = _base(target)
    held = {t: (await dst._one(f"SELECT count(*) FROM {t}"))[0] for t, _ in TABLES}
    busy = {t: n for t, n in held.items() if n and t in CONTENT}
    if busy and not replace:
        said = ", ".join(f"{n} {t}" for t, n in busy.items())
        raise BadInput("--to", f"{target.where} is not empty ({said}); --replace empties it first")
    replaced = {t: n for t, n in held.items() if n} if replace else {}
    if dry_run:
        return CopyReport(counts, replaced, True)
    async with dst._write():
        if replace:
            for table, _ in reversed(TABLES):
                await dst._conn.execute(f"DELETE FROM {table}")
        for table, key in TABLES:
            if not await src._columns(table):  # a source from before the audit
                continue
            mine = await dst._columns(table)
            columns = [c for c in await src._columns(table) if c in mine]
            marks = ", ".join("?" * len(columns))
            insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
            async for page in _rows(src, table, key, columns):
                await dst._conn.executemany(insert, [tuple(row) for row in page])
        await dst._after_copy()
    dst._own.reset()  # events written with seqs of their own
    return CopyReport(counts, replaced, False)
