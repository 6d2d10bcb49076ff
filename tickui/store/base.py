"""The connection every query group shares: opening (checked, private, migrated, or
read-only), one write transaction at a time, and the file check done before any write."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import aiosqlite

from tickui.common.errors import StoreError
from tickui.model.records import Occurrence, occurrence_from_row
from tickui.model.spec import TaskSpec
from tickui.store import bell, dbfile, reads, schema
from tickui.store.abc import LeaseLost, Store
from tickui.store.appended import OwnEvents
from tickui.store.dbfile import BUSY_TIMEOUT_MS, inspect_file

WAL_AUTOCHECKPOINT_PAGES = 10_000  # about 40 MB of WAL before SQLite checkpoints by itself
_OCC_SELECT = reads.OCC_SELECT
_ACTIVE_SQL = reads.ACTIVE_SQL


async def _close_quietly(conn: aiosqlite.Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def json_rows(columns: Sequence[str]) -> str:
    """A subquery naming `columns`, taken from each row of a JSON array of arrays bound
    as its one parameter: a batch's rows for one set-based statement."""
    picks = ", ".join(f"value ->> {i} AS {name}" for i, name in enumerate(columns))
    return f"(SELECT {picks} FROM json_each(?))"


_encode = json.JSONEncoder(check_circular=False).encode
_ROWS_FROM = " FROM json_each(?))"


def json_batch(one: str, rows: Sequence[Sequence[Any]], *values: Any) -> tuple[str, tuple]:
    """`one` (a statement reading its rows through json_rows) and its parameters: the rows
    as one JSON array, then `values`. A column whose value is the same in every row (an
    int, a string or NULL: a batch's state, time, type) is bound once instead: SQLite
    parses a row's JSON again for each column it takes out of it."""
    if len(rows) > 1:
        columns = list(zip(*rows, strict=True))
        same = tuple(i for i, column in enumerate(columns) if _uniform(column))
        sql = _factored(one, same) if same else None
        if sql is not None:
            varying = [column for i, column in enumerate(columns) if i not in same]
            body = list(zip(*varying, strict=True)) if varying else [()] * len(rows)
            return sql, (_encode(body), *(columns[i][0] for i in same), *values)
    return one, (_encode(rows), *values)


def _uniform(column: tuple[Any, ...]) -> bool:
    first = column[0]
    kind = type(first)
    if first is None or kind is str:
        return column.count(first) == len(column)
    if kind is int:  # 1 == True == 1.0: the types must agree as well
        return column.count(first) == len(column) and len(set(map(type, column))) == 1
    return False


@functools.lru_cache(maxsize=256)
def _factored(one: str, same: tuple[int, ...]) -> str | None:
    """`one` with the json_rows columns `same` taken from parameters ?2, ?3, ... and the
    array as ?1; None when its shape is not json_rows' alone (then it is sent as it is)."""
    start = one.find("(SELECT value ->> 0 AS ")
    end = one.find(_ROWS_FROM, start)
    if start < 0 or end < 0 or "?" in one[:start] or one.count("json_each(") != 1:
        return None
    picks, taken, bound = [], 0, 2
    for index, pick in enumerate(one[start + len("(SELECT ") : end].split(", ")):
        name = pick.rsplit(" AS ", 1)[1]
        if index in same:
            picks.append(f"?{bound} AS {name}")
            bound += 1
        else:
            picks.append(f"value ->> {taken} AS {name}")
            taken += 1
    rest = one[end + len(_ROWS_FROM) :]
    return f"{one[:start]}(SELECT {', '.join(picks)} FROM json_each(?1)){rest}"


class StoreBase(Store):
    """One connection to one tickui database file, and the plumbing every query group
    uses: the connection, its write lock, the parsed definitions and the listeners."""

    _Conflict: type[Exception] = sqlite3.IntegrityError  # a unique key refused a row
    # A batch of rows is written by one statement over a JSON array of them (see _batch).
    _json_batches = True
    # Reconcile folds the events this store appended without reading them back, when no
    # other connection wrote meanwhile (tickui.store.appended): sequence numbers given in
    # order under the write lock, and SQLite's data version.
    _own_events = True

    def __init__(self, path: Path, conn: aiosqlite.Connection) -> None:
        self.path = path
        self.where = str(path)
        self._conn = conn
        self._lock = asyncio.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.log_dir = path.with_name(path.name + ".logs")
        self._specs: dict[str, TaskSpec] = {}  # parsed definitions by their JSON text
        self._own = OwnEvents()  # runs claimed and events appended here (if _own_events)
        self.readonly = False
        self._bell = bell.Bell(path)  # heard while this process holds the lease

    # ---- opening -------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str | os.PathLike[str], readonly: bool = False) -> Self:
        """Open for writing (creating the file, private, when missing; migrating it), or
        with `readonly` for commands that only read: SQLite `mode=ro`, no migration, no
        pragma that writes, nothing created when the file is missing."""
        db = Path(path).expanduser()
        if readonly:
            return await cls._open_readonly(db)
        await asyncio.to_thread(inspect_file, db)  # refuses a foreign or newer file
        created: list[Path] = []
        if dbfile.lookup(db) is None:
            created = await asyncio.to_thread(dbfile.create_private, db)
        if not created:
            log_dir = db.with_name(db.name + ".logs")
            await asyncio.to_thread(dbfile.secure_existing, db, log_dir)
        conn = None
        try:
            conn = await aiosqlite.connect(db, isolation_level=None)
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA cache_size = -32000")
            await conn.execute("PRAGMA temp_store = MEMORY")
            # Checkpoints are the engine's to run when a burst is over (checkpoint()), not
            # SQLite's inside a burst's commits; this bound only caps the WAL's growth.
            await conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
            store = cls(db, conn)
            await store._migrate()
        except sqlite3.Error as exc:
            await _close_quietly(conn)
            await asyncio.to_thread(dbfile.remove_created, created)
            raise dbfile.database_failure(exc, db) from None
        except BaseException:
            await _close_quietly(conn)
            await asyncio.to_thread(dbfile.remove_created, created)
            raise
        return store

    @classmethod
    async def _open_readonly(cls, db: Path) -> Self:
        uri = await asyncio.to_thread(dbfile.check_readable, db)
        conn = None
        try:
            conn = await aiosqlite.connect(uri, uri=True, isolation_level=None)
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await conn.execute("PRAGMA query_only = 1")
            await (await conn.execute("SELECT count(*) FROM sqlite_master")).close()
        except sqlite3.Error as exc:
            await _close_quietly(conn)
            raise dbfile.database_failure(exc, db) from None
        except BaseException:
            await _close_quietly(conn)
            raise
        store = cls(db, conn)
        store.readonly = True
        return store

    async def _migrate(self) -> None:
        """Bring the file to this tickui's schema. A current file is left alone: setting
        its version again would commit a write (the header's change counter moves), and a
        change refused after opening must leave the file's bytes as they were."""
        version = (await self._one("PRAGMA user_version"))[0]
        app_id = (await self._one("PRAGMA application_id"))[0]
        if version == schema.VERSION and app_id == schema.APPLICATION_ID:
            return
        async with self._write():
            version = (await self._one("PRAGMA user_version"))[0]
            if version > schema.VERSION:
                raise StoreError(
                    f"database {self.path} has schema {version}, newer than this tickui's"
                )
            for step in schema.MIGRATIONS[version:]:
                for statement in step:
                    await self._conn.execute(statement)
            await self._conn.execute(f"PRAGMA user_version = {schema.VERSION}")
            await self._conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")

    async def checkpoint(self) -> None:
        """Copy the WAL's committed pages back into the database (PASSIVE: never waits
        for readers), at a quiet moment rather than inside a busy commit."""
        if not self.readonly:
            # Not inside another task's write transaction on this connection (a Kafka
            # feed's): SQLite answers "database table is locked" there.
            async with self._lock:
                await self._conn.execute_fetchall("PRAGMA wal_checkpoint(PASSIVE)")

    async def close(self) -> None:
        self._bell.close()
        await self._conn.close()

    # ---- plumbing --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _write(self):
        """One write transaction at a time on this connection, taken eagerly (IMMEDIATE)."""
        async with self._lock:
            began = False
            try:
                await self._begin()
                began = True
                yield
            except BaseException as exc:
                # cancelled while its BEGIN was on the connection's thread, the BEGIN still
                # runs: roll it back too, or the next writer finds a transaction open
                if began or not isinstance(exc, sqlite3.Error):
                    with contextlib.suppress(sqlite3.Error):
                        await self._conn.execute("ROLLBACK")
                raise
            await self._conn.execute("COMMIT")

    async def _begin(self) -> None:
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "within a transaction" not in str(exc):
                raise
            # one left open by a writer cancelled twice: never committed, so undone
            await self._conn.execute("ROLLBACK")
            await self._conn.execute("BEGIN IMMEDIATE")

    async def _batch(self, many: str, one: str, rows: Sequence[Sequence[Any]], *values: Any) -> int:
        """Run `many` once per row, or, where the store takes JSON batches, `one` once
        with the rows as one JSON array (`one` reads them through json_rows). Returns how
        many rows the statement changed. One statement of one step for the whole batch:
        the connection's thread holds the GIL once for it, not once a row, so the loop
        runs Python meanwhile. `values`: more parameters of `one`, after the array."""
        if self._json_batches:
            cursor = await self._conn.execute(*json_batch(one, rows, *values))
        else:
            cursor = await self._many(many, rows)
        return cursor.rowcount

    async def _batches(self, *batches: tuple[Any, ...]) -> list[Any]:
        """Several `_batch` calls (many, one, rows), in order; per batch the rows it changed
        or the error it raised. Where the store takes JSON batches, all are handed to the
        connection's thread at once, so it runs them back to back while the loop works."""
        if not self._json_batches:
            done: list[Any] = []
            for batch in batches:
                try:
                    done.append(await self._batch(*batch))
                except Exception as exc:  # the ones after it are not run
                    return done + [exc] * (len(batches) - len(done))
            return done
        return await asyncio.gather(*(self._batch(*b) for b in batches), return_exceptions=True)

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row (every caller's query has at most one). One trip to the
        connection's thread, not three (execute, fetch, close): an idle dashboard's
        queries are mostly such trips, each waking two threads."""
        rows = await self._conn.execute_fetchall(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(await self._conn.execute_fetchall(sql, params))

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        """`sql` once for each of `rows`, inside the caller's write transaction; the cursor,
        whose rowcount is the rows changed. (The PostgreSQL store runs a batch of the
        shapes it knows as one statement: pgbulk.)"""
        return await self._conn.executemany(sql, rows)

    async def _columns(self, table: str) -> list[str]:
        """The table's columns, in the schema's order (for a copy between stores)."""
        return [row[1] for row in await self._all(f"PRAGMA table_info({table})")]

    async def _after_copy(self) -> None:
        """What a copy into this store must set after its rows (nothing, for SQLite)."""

    async def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap 'has anything changed'."""
        return (await self._one("PRAGMA data_version"))[0]

    def on_events(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the loop) after runtime events are appended through this store."""
        self._listeners.append(listener)

    async def announce_request(self) -> None:
        """A datagram to the file's bell (see store/bell.py): no I/O on the file."""
        bell.ring(self.path)

    def hear_requests(self, listener: Callable[[], None] | None) -> None:
        self._bell.listen(listener)

    # ---- reads and checks more than one query group makes ------------------------------

    async def _check_lease(self, owner: str, token: int, now: int) -> None:
        row = await self._one(  # one trip to the connection's thread, not two
            "SELECT 1 FROM lease WHERE name = 'engine' AND owner = ? AND token = ?"
            " AND expires_at > ?",
            (owner, token, now),
        )
        if row is None:
            raise LeaseLost("the lease is no longer held by this engine")

    async def occurrences_by_id(self, ids: Sequence[int]) -> list[Occurrence]:
        result: list[Occurrence] = []
        for chunk in _chunks(list(ids), 900):
            marks = ",".join("?" * len(chunk))
            rows = await self._all(f"{_OCC_SELECT} WHERE id IN ({marks}) ORDER BY id", chunk)
            result.extend(occurrence_from_row(row) for row in rows)
        return result
