"""The SQLite store: tasks, occurrences, the runtime event log, the lease and requests.

All I/O goes through aiosqlite so the event loop never waits on the disk. Hot paths
(claims, acceptances, settlements, event appends) are batched: a handful of calls per
transaction, whatever the number of rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import sqlite3
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from tickui import dbfile, schema
from tickui.errors import NotFound, StoreError, Unavailable
from tickui.models import (
    OCCURRENCE_COLUMNS,
    Lease,
    LeaseResult,
    Occurrence,
    RunRequest,
    Task,
    TaskStats,
    occurrence_from_row,
)
from tickui.occurrence import ACTIVE, Change, Progress, RuntimeEvent
from tickui.planning import Plan, due_time
from tickui.schedules import jitter_offset
from tickui.spec import TaskSpec
from tickui.timeutil import MICROS

NO_STATS = TaskStats()
SPEC_CACHE_MAX = 100_000
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5000
DEFAULT_KEEP = 1000
_OCC_SELECT = "SELECT " + ", ".join(OCCURRENCE_COLUMNS) + " FROM occurrences"
_ACTIVE_SQL = "('" + "', '".join(ACTIVE) + "')"


OLDEST_READABLE = 2  # read-only commands read every column from this schema on


async def _close_quietly(conn: aiosqlite.Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()


class LeaseLost(StoreError):
    """A claim was made with a token that no longer holds the lease (fencing)."""


@dataclass(slots=True)
class NewEvent:
    at: int
    type: str
    command_id: str | None
    run_id: str | None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def inspect_file(path: Path) -> int | None:
    """Check a database file before using it; return its schema version.

    None means the file is new or empty. A file that is not SQLite, belongs to another
    program, or was written by a newer tickui raises StoreError and is left untouched.
    Reads only (a read-only connection), so it works on read-only media and beside a writer.
    """
    info = dbfile.lookup(path)
    if info is None:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"database {path} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"database {path} is not a regular file")
    try:
        with open(path, "rb") as handle:  # read even when the size says 0 (/proc files)
            header = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise dbfile.os_failure(exc, f"cannot read database {path}") from None
    if not header:
        return None
    if header != SQLITE_MAGIC:
        raise StoreError(
            f"database {path} is not a SQLite file (corrupt or foreign); left untouched"
        )
    try:
        conn = dbfile.connect_ro(path, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            conn.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        raise dbfile.sqlite_failure(exc, path) from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"database {path} is unreadable ({exc}); left untouched") from None
    if app_id != schema.APPLICATION_ID:
        if not tables and app_id == 0:
            return None
        shown = ", ".join(tables[:4]) or "none"
        raise StoreError(
            f"database {path} belongs to another program (tables: {shown}); left untouched"
        )
    if version > schema.VERSION:
        raise StoreError(
            f"database {path} has schema {version}, newer than this tickui's {schema.VERSION}; "
            "upgrade tickui (the file was left untouched)"
        )
    return version


def default_anchor(spec: TaskSpec, now: int) -> int:
    """An interval task's grid starts at its creation, rounded up to a whole second so
    that slots fall on the ticker's second boundaries."""
    if spec.anchor is not None:
        return spec.anchor
    return -(-now // MICROS) * MICROS


class Store:
    """One connection to one tickui database file."""

    def __init__(self, path: Path, conn: aiosqlite.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = asyncio.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.log_dir = path.with_name(path.name + ".logs")
        self._specs: dict[str, TaskSpec] = {}  # parsed definitions by their JSON text
        self.readonly = False

    # ---- opening -------------------------------------------------------------------

    @classmethod
    async def open(cls, path: str | os.PathLike[str], readonly: bool = False) -> Store:
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
            store = cls(db, conn)
            await store._migrate()
        except sqlite3.Error as exc:
            await _close_quietly(conn)
            await asyncio.to_thread(dbfile.remove_created, created)
            raise dbfile.sqlite_failure(exc, db) from None
        except BaseException:
            await _close_quietly(conn)
            await asyncio.to_thread(dbfile.remove_created, created)
            raise
        return store

    @classmethod
    async def _open_readonly(cls, db: Path) -> Store:
        if dbfile.lookup(db) is None:
            raise Unavailable(f"no database at {db} (tickui task add or tickui run creates one)")
        version = await asyncio.to_thread(inspect_file, db)
        if version is None:
            raise Unavailable(f"database {db} is empty (tickui task add or tickui run sets it up)")
        if version < OLDEST_READABLE:
            raise Unavailable(
                f"database {db} has schema {version}, older than this tickui's {schema.VERSION};"
                " run `tickui run` (or any task change) once to migrate it"
            )
        uri = await asyncio.to_thread(dbfile.read_only_uri, db)
        conn = None
        try:
            conn = await aiosqlite.connect(uri, uri=True, isolation_level=None)
            await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await conn.execute("PRAGMA query_only = 1")
            await (await conn.execute("SELECT count(*) FROM sqlite_master")).close()
        except sqlite3.Error as exc:
            await _close_quietly(conn)
            raise dbfile.sqlite_failure(exc, db) from None
        except BaseException:
            await _close_quietly(conn)
            raise
        store = cls(db, conn)
        store.readonly = True
        return store

    async def _migrate(self) -> None:
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

    async def close(self) -> None:
        await self._conn.close()

    # ---- plumbing --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _write(self):
        """One write transaction at a time on this connection, taken eagerly (IMMEDIATE)."""
        async with self._lock:
            await self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                await self._conn.execute("ROLLBACK")
                raise
            await self._conn.execute("COMMIT")

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        async with self._conn.execute(sql, params) as cursor:
            return await cursor.fetchone()

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self._conn.execute(sql, params) as cursor:
            return list(await cursor.fetchall())

    async def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap 'has anything changed'."""
        return (await self._one("PRAGMA data_version"))[0]

    def on_events(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the loop) after runtime events are appended through this store."""
        self._listeners.append(listener)

    # ---- tasks -----------------------------------------------------------------------

    _TASK_COLS = (
        "id, name, spec, source, enabled, note, generation, created_at, updated_at, anchor, "
        "next_run_at, due_at"
    )

    def _task(self, row: Any, stats: TaskStats | None = None) -> Task:
        spec = self._specs.get(row[2])
        if spec is None:
            if len(self._specs) > SPEC_CACHE_MAX:
                self._specs.clear()
            spec = self._specs[row[2]] = TaskSpec.from_json(row[2])
        return Task(
            id=row[0],
            name=row[1],
            spec=spec,
            source=row[3],
            enabled=bool(row[4]),
            note=row[5],
            generation=row[6],
            created_at=row[7],
            updated_at=row[8],
            anchor=row[9],
            next_run_at=row[10],
            due_at=row[11],
            stats=stats or NO_STATS,
        )

    @staticmethod
    def _next(spec: TaskSpec, name: str, anchor: int, after: int) -> tuple[int | None, int | None]:
        """The next slot strictly after `after`, and when it is due (with jitter)."""
        slot = spec.schedule(anchor).next_after(after)
        if slot is None:
            return None, None
        return slot, slot + jitter_offset(name, slot, spec.jitter)

    async def _insert_task(self, spec: TaskSpec, now: int, source: str) -> None:
        """Insert a new task row, its first slot computed from its anchor (in a write)."""
        anchor = default_anchor(spec, now)
        nxt, due = self._next(spec, spec.name, anchor, now - 1)
        await self._conn.execute(
            "INSERT INTO tasks (name, spec, definition_hash, source, enabled, created_at,"
            " updated_at, anchor, next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                spec.name,
                spec.to_json(),
                spec.definition_hash(),
                source,
                int(spec.enabled),
                now,
                now,
                anchor,
                nxt,
                due,
            ),
        )

    async def add_task(self, spec: TaskSpec, now: int, source: str = "cli") -> Task:
        try:
            async with self._write():
                await self._insert_task(spec, now, source)
        except sqlite3.IntegrityError:
            from tickui.errors import BadInput

            raise BadInput("name", f"a task named {spec.name!r} exists already") from None
        return await self.get_task(spec.name)

    async def find_task(self, name: str) -> Task | None:
        row = await self._one(f"SELECT {self._TASK_COLS} FROM tasks WHERE name = ?", (name,))
        if row is None:
            return None
        stats = (await self.task_stats([row[0]])).get(row[0])
        return self._task(row, stats)

    async def get_task(self, name: str) -> Task:
        task = await self.find_task(name)
        if task is None:
            raise NotFound(f"no task named {name!r}")
        return task

    async def list_tasks(self, with_stats: bool = True) -> list[Task]:
        rows = await self._all(f"SELECT {self._TASK_COLS} FROM tasks ORDER BY name")
        stats = await self.task_stats() if with_stats else {}
        return [self._task(row, stats.get(row[0])) for row in rows]

    async def task_stats(self, ids: Iterable[int] | None = None) -> dict[int, TaskStats]:
        where, params = "", []
        if ids is not None:
            params = list(ids)
            where = f"WHERE task_id IN ({','.join('?' * len(params))})"
        rows = await self._all(
            "SELECT task_id, max(id), sum(missed), sum(state = 'skipped'),"
            f" sum(state IN {_ACTIVE_SQL}) FROM occurrences {where} GROUP BY task_id",
            params,
        )
        last_ids = [row[1] for row in rows]
        last: dict[int, Any] = {}
        for chunk in _chunks(last_ids, 500):
            marks = ",".join("?" * len(chunk))
            for r in await self._all(
                "SELECT task_id, state, scheduled_for, started_at, finished_at FROM occurrences"
                f" WHERE id IN ({marks})",
                chunk,
            ):
                last[r[0]] = r
        result = {}
        for task_id, _, missed, skipped, active in rows:
            lr = last.get(task_id)
            result[task_id] = TaskStats(
                last_state=lr[1] if lr else None,
                last_scheduled_for=lr[2] if lr else None,
                last_started_at=lr[3] if lr else None,
                last_finished_at=lr[4] if lr else None,
                missed=missed or 0,
                skipped=skipped or 0,
                active=active or 0,
            )
        return result

    async def set_enabled(
        self, name: str, enabled: bool, now: int, note: str | None = None
    ) -> Task:
        """Disable keeps history; enable schedules the next slot after now (no misfires)."""
        task = await self.get_task(name)
        if enabled:
            nxt, due = self._next(task.spec, name, task.anchor, now)
            sql = (
                "UPDATE tasks SET enabled = 1, note = NULL, next_run_at = ?, due_at = ?,"
                " updated_at = ? WHERE id = ?"
            )
            params: tuple[Any, ...] = (nxt, due, now, task.id)
        else:
            sql = "UPDATE tasks SET enabled = 0, note = ?, updated_at = ? WHERE id = ?"
            params = (note, now, task.id)
        async with self._write():
            await self._conn.execute(sql, params)
        return await self.get_task(name)

    async def remove_task(self, name: str) -> None:
        """Remove the task; its history stays (occurrences keep the task's name)."""
        task = await self.get_task(name)
        async with self._write():
            await self._conn.execute("DELETE FROM tasks WHERE id = ?", (task.id,))

    async def sync_tasks(self, specs: Sequence[TaskSpec], now: int) -> SyncReport:
        """Make the config-declared tasks match `specs` (DESIGN 6); CLI-made tasks are kept."""
        report = SyncReport()
        rows = await self._all("SELECT id, name, definition_hash, source, anchor FROM tasks")
        existing = {row[1]: row for row in rows}
        wanted = {spec.name for spec in specs}
        async with self._write():
            for spec in specs:
                row = existing.get(spec.name)
                if row is None:
                    await self._insert_task(spec, now, "config")
                    report.added.append(spec.name)
                elif row[2] != spec.definition_hash() or row[3] != "config":
                    keep_anchor = spec.anchor if spec.anchor is not None else row[4]
                    nxt, due = self._next(spec, spec.name, keep_anchor, now)
                    await self._conn.execute(
                        "UPDATE tasks SET spec = ?, definition_hash = ?, source = 'config',"
                        " enabled = ?, note = NULL, generation = generation + 1, updated_at = ?,"
                        " anchor = ?, next_run_at = ?, due_at = ? WHERE id = ?",
                        (
                            spec.to_json(),
                            spec.definition_hash(),
                            int(spec.enabled),
                            now,
                            keep_anchor,
                            nxt,
                            due,
                            row[0],
                        ),
                    )
                    report.updated.append(spec.name)
            for name, row in existing.items():
                if row[3] == "config" and name not in wanted:
                    await self._conn.execute("DELETE FROM tasks WHERE id = ?", (row[0],))
                    report.removed.append(name)
        return report

    # ---- scanning and claiming -----------------------------------------------------------

    async def due_task_ids(self, now: int) -> list[int]:
        """Ids of the enabled tasks due at `now`: a snapshot, so a task a scan moves to a
        slot that is still due is not visited twice in that scan."""
        rows = await self._all(
            "SELECT id FROM tasks WHERE enabled = 1 AND due_at IS NOT NULL AND due_at <= ?"
            " ORDER BY due_at, id",
            (now,),
        )
        return [row[0] for row in rows]

    async def tasks_by_id(self, ids: Sequence[int]) -> list[Task]:
        marks = ",".join("?" * len(ids))
        rows = await self._all(f"SELECT {self._TASK_COLS} FROM tasks WHERE id IN ({marks})", ids)
        order = {task_id: index for index, task_id in enumerate(ids)}
        return sorted((self._task(row) for row in rows), key=lambda t: order[t.id])

    async def task_versions(self) -> dict[int, tuple[int, int | None, int, int]]:
        """Per task what a viewer compares to spot another process's change: updated_at,
        next_run_at, enabled and generation. One narrow scan, no definitions parsed."""
        rows = await self._all("SELECT id, updated_at, next_run_at, enabled, generation FROM tasks")
        return {row[0]: (row[1], row[2], row[3], row[4]) for row in rows}

    async def newest_occurrences(self, limit: int, after_id: int = 0) -> list[Occurrence]:
        """The newest `limit` occurrences with an id above `after_id`, newest first."""
        rows = await self._all(
            f"{_OCC_SELECT} WHERE id > ? ORDER BY id DESC LIMIT ?", (after_id, limit)
        )
        return [occurrence_from_row(row) for row in rows]

    async def active_occurrences(self) -> list[Occurrence]:
        rows = await self._all(f"{_OCC_SELECT} WHERE state IN {_ACTIVE_SQL} ORDER BY id")
        return [occurrence_from_row(row) for row in rows]

    async def _check_lease(self, owner: str, token: int, now: int) -> None:
        cursor = await self._conn.execute(
            "SELECT 1 FROM lease WHERE name = 'engine' AND owner = ? AND token = ?"
            " AND expires_at > ?",
            (owner, token, now),
        )
        if await cursor.fetchone() is None:
            raise LeaseLost("the lease is no longer held by this engine")

    async def claim(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """Advance each task and insert its planned occurrences, in one transaction.

        Each task row moves only if its generation, slot and enabled flag are what the
        plan was made from, and only while `token` still holds the lease. The unique
        slot key makes a second claim of a slot impossible whatever process tries.
        """
        if not plans:
            return []
        try:
            async with self._write():
                await self._check_lease(owner, token, now)
                first = (await self._one("SELECT coalesce(max(id), 0) FROM occurrences"))[0] + 1
                rows = _occurrence_rows(plans, first, owner, token, now)
                cursor = await self._conn.executemany(_ADVANCE_TASK, [_advance(p) for p in plans])
                if cursor.rowcount != len(plans):
                    raise _SlowPath
                try:
                    await self._conn.executemany(_INSERT_OCC, rows)
                except sqlite3.IntegrityError:
                    raise _SlowPath from None
        except _SlowPath:
            return await self.claim_one_by_one(plans, owner, token, now)
        return [_claimed(row) for row in rows]

    async def claim_one_by_one(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """The careful path: each plan applies alone; stale plans and taken slots drop out."""
        ids: list[int] = []
        async with self._write():
            await self._check_lease(owner, token, now)
            next_id = (await self._one("SELECT coalesce(max(id), 0) FROM occurrences"))[0] + 1
            for plan in plans:
                cursor = await self._conn.execute(_ADVANCE_TASK, _advance(plan))
                if cursor.rowcount != 1:
                    continue
                for row in _occurrence_rows([plan], next_id, owner, token, now):
                    try:
                        await self._conn.execute(_INSERT_OCC, row)
                    except sqlite3.IntegrityError:
                        continue  # that slot was claimed before: never twice
                    ids.append(row[0])
                    next_id += 1
        return await self.occurrences_by_id(ids)

    async def claim_manual(self, task: Task, owner: str, token: int, now: int) -> Occurrence:
        async with self._write():
            await self._check_lease(owner, token, now)
            cursor = await self._conn.execute(
                "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
                " owner, lease_token, generation, command_id)"
                " VALUES (?, ?, 'manual', ?, 'claimed', ?, ?, ?, ?, ?)",
                (task.id, task.name, now, now, owner, token, task.generation, None),
            )
            occ_id = cursor.lastrowid
            await self._conn.execute(
                "UPDATE occurrences SET command_id = ? WHERE id = ?", (f"cmd-{occ_id}", occ_id)
            )
        return (await self.occurrences_by_id([occ_id]))[0]

    async def occurrences_by_id(self, ids: Sequence[int]) -> list[Occurrence]:
        result: list[Occurrence] = []
        for chunk in _chunks(list(ids), 900):
            marks = ",".join("?" * len(chunk))
            rows = await self._all(f"{_OCC_SELECT} WHERE id IN ({marks}) ORDER BY id", chunk)
            result.extend(occurrence_from_row(row) for row in rows)
        return result

    async def get_occurrence(self, occ_id: int) -> Occurrence:
        found = await self.occurrences_by_id([occ_id])
        if not found:
            raise NotFound(f"no occurrence {occ_id}")
        return found[0]

    async def mark_accepted(
        self, items: Sequence[tuple[int, str | None, str | None]], now: int
    ) -> None:
        """Receipts from the dispatcher: (occurrence id, command id, log path)."""
        if not items:
            return
        async with self._write():
            await self._conn.executemany(
                "UPDATE occurrences SET state = 'accepted', accepted_at = ?,"
                " command_id = coalesce(?, command_id),"
                " log_path = coalesce(?, log_path) WHERE id = ? AND state = 'claimed'",
                [(now, command_id, log, occ_id) for occ_id, command_id, log in items],
            )

    async def fail_occurrences(
        self, items: Sequence[tuple[int, str, str]], now: int, states: tuple[str, ...] = ACTIVE
    ) -> None:
        """Settle directly as failed: (id, error code, detail). Only for non-runtime facts."""
        if not items:
            return
        marks = "('" + "', '".join(states) + "')"
        async with self._write():
            await self._conn.executemany(
                "UPDATE occurrences SET state = 'failed', finished_at = ?, error_code = ?,"
                f" detail = ? WHERE id = ? AND state IN {marks}",
                [(now, code, detail, occ_id) for occ_id, code, detail in items],
            )

    # ---- runtime events and reconcile -------------------------------------------------

    async def append_events(self, events: Sequence[NewEvent]) -> None:
        if not events:
            return
        async with self._write():
            await self._conn.executemany(
                "INSERT INTO events (at, command_id, run_id, type, payload) VALUES (?,?,?,?,?)",
                [(e.at, e.command_id, e.run_id, e.type, json.dumps(e.payload)) for e in events],
            )
        for listener in list(self._listeners):
            listener()

    async def unreconciled(
        self, after_id: int = 0, limit: int = 500
    ) -> tuple[list[tuple[Progress, list[RuntimeEvent]]], int | None]:
        """One page of active occurrences (ids above `after_id`), each with the
        events after its cursor, in order; and the id to continue after (None at the end)."""
        page = await self._all(
            "SELECT id, state, command_id, run_id, event_cursor FROM occurrences"
            f" WHERE state IN {_ACTIVE_SQL} AND id > ? ORDER BY id LIMIT ?",
            (after_id, limit),
        )
        if not page:
            return [], None
        progress = {row[0]: (Progress(*row), []) for row in page}
        cols = "o.id, e.seq, e.at, e.command_id, e.run_id, e.type, e.payload"
        scope = (
            "WITH o AS (SELECT id, command_id, run_id, event_cursor FROM occurrences"
            f" WHERE state IN {_ACTIVE_SQL} AND id BETWEEN ? AND ?)"
        )
        rows = await self._all(
            f"{scope} SELECT {cols} FROM o JOIN events e"
            " ON e.command_id = o.command_id AND e.seq > o.event_cursor"
            f" UNION ALL SELECT {cols} FROM o JOIN events e ON e.run_id = o.run_id"
            " AND e.seq > o.event_cursor AND e.command_id IS NULL"
            " ORDER BY 1, 2",
            (page[0][0], page[-1][0]),
        )
        for row in rows:
            entry = progress.get(row[0])
            if entry is not None:
                entry[1].append(RuntimeEvent(*row[1:6], _payload(row[6])))
        found = [entry for entry in progress.values() if entry[1]]
        return found, page[-1][0] if len(page) == limit else None

    async def apply_changes(self, changes: Sequence[Change]) -> None:
        """Write reconcile's results; the state guard keeps terminal states immutable."""
        shapes: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for change in changes:
            keys = tuple(sorted(change.fields))
            values = tuple(change.fields[k] for k in keys)
            shapes.setdefault(keys, []).append((change.state, change.cursor, *values, change.id))
        if not shapes:
            return
        async with self._write():
            for keys, rows in shapes.items():
                sets = "".join(f", {key} = ?" for key in keys)
                await self._conn.executemany(
                    f"UPDATE occurrences SET state = coalesce(?, state), event_cursor = ?{sets}"
                    f" WHERE id = ? AND state IN {_ACTIVE_SQL}",
                    rows,
                )

    async def state_counts(self) -> dict[str, int]:
        rows = await self._all("SELECT state, count(*) FROM occurrences GROUP BY state")
        return {state: count for state, count in rows}

    async def last_event_seq(self) -> int:
        return (await self._one("SELECT coalesce(max(seq), 0) FROM events"))[0]

    # ---- lease ---------------------------------------------------------------------------

    async def lease(self) -> Lease | None:
        row = await self._one(
            "SELECT owner, token, expires_at, host, pid FROM lease WHERE name = 'engine'"
        )
        return Lease(*row) if row else None

    async def acquire_lease(
        self,
        owner: str,
        now: int,
        ttl: int,
        identity: tuple[str, int, int | None],
        holder_gone: Callable[[str | None, int | None, int | None], bool],
    ) -> LeaseResult:
        """Take, renew or fail to get the lease. A holder proven dead loses it at once."""
        host, pid, pid_start = identity
        async with self._write():
            row = await self._one(
                "SELECT owner, token, expires_at, host, pid, pid_start FROM lease"
                " WHERE name = 'engine'"
            )
            if row is None:
                token = 1
                await self._conn.execute(
                    "INSERT INTO lease (name, owner, token, expires_at, host, pid, pid_start)"
                    " VALUES ('engine', ?, ?, ?, ?, ?, ?)",
                    (owner, token, now + ttl, host, pid, pid_start),
                )
                return LeaseResult(True, Lease(owner, token, now + ttl, host, pid), new=True)
            held_by, token, expires_at = row[0], row[1], row[2]
            if held_by == owner and expires_at > now:
                await self._conn.execute(
                    "UPDATE lease SET expires_at = ? WHERE name = 'engine'", (now + ttl,)
                )
                return LeaseResult(True, Lease(owner, token, now + ttl, host, pid))
            if expires_at > now and not holder_gone(row[3], row[4], row[5]):
                return LeaseResult(False, Lease(held_by, token, expires_at, row[3], row[4]))
            token += 1
            await self._conn.execute(
                "UPDATE lease SET owner = ?, token = ?, expires_at = ?, host = ?, pid = ?,"
                " pid_start = ? WHERE name = 'engine'",
                (owner, token, now + ttl, host, pid, pid_start),
            )
            return LeaseResult(True, Lease(owner, token, now + ttl, host, pid), new=True)

    async def renew_lease(self, owner: str, token: int, now: int, ttl: int) -> int | None:
        """Extend the lease only while `token` still holds it unexpired at `now`.

        Returns the new expiry, or None when the lease lapsed or changed hands: unlike
        `acquire_lease`, this never takes a lapsed lease back under a new token."""
        async with self._write():
            cursor = await self._conn.execute(
                "UPDATE lease SET expires_at = ? WHERE name = 'engine' AND owner = ?"
                " AND token = ? AND expires_at > ?",
                (now + ttl, owner, token, now),
            )
        return now + ttl if cursor.rowcount == 1 else None

    async def release_unstarted(self, ids: Sequence[int], now: int, detail: str) -> list[int]:
        """Occurrences claimed here that may no longer be started (the lease was lost).

        Each still `claimed` one is recorded `skipped` with `detail` (it never ran), and
        its scheduled slot is handed back to its task (unless the definition changed or
        the task already points earlier), so the lease holder's misfire policy decides
        about it. Returns the ids recorded."""
        if not ids:
            return []
        released: list[int] = []
        async with self._write():
            for chunk in _chunks(list(ids), 500):
                marks = ",".join("?" * len(chunk))
                rows = await self._all(
                    "SELECT o.id, o.kind, o.scheduled_for, o.generation, t.id, t.name, t.spec"
                    " FROM occurrences o LEFT JOIN tasks t ON t.id = o.task_id"
                    f" WHERE o.id IN ({marks}) AND o.state = 'claimed'"
                    " ORDER BY o.scheduled_for",
                    chunk,
                )
                for occ_id, kind, slot, generation, task_id, name, spec in rows:
                    await self._conn.execute(
                        "UPDATE occurrences SET state = 'skipped', finished_at = ?, detail = ?"
                        " WHERE id = ? AND state = 'claimed'",
                        (now, detail, occ_id),
                    )
                    released.append(occ_id)
                    if kind != "scheduled" or task_id is None:
                        continue
                    jitter = json.loads(spec).get("jitter", 0)
                    await self._conn.execute(
                        "UPDATE tasks SET next_run_at = ?, due_at = ? WHERE id = ?"
                        " AND generation = ? AND enabled = 1"
                        " AND (next_run_at IS NULL OR next_run_at > ?)",
                        (slot, slot + jitter_offset(name, slot, jitter), task_id, generation, slot),
                    )
        return released

    async def release_lease(self, owner: str, token: int, now: int) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE lease SET expires_at = ? WHERE name = 'engine' AND owner = ? AND token = ?",
                (now, owner, token),
            )

    async def foreign_active(self, token: int) -> list[Occurrence]:
        """Active occurrences claimed under an older lease token: their engine is gone."""
        rows = await self._all(
            f"{_OCC_SELECT} WHERE state IN {_ACTIVE_SQL} AND coalesce(lease_token, 0) < ?",
            (token,),
        )
        return [occurrence_from_row(row) for row in rows]

    # ---- tick sequence numbers ------------------------------------------------------

    async def reserve_sequence(self, key: str, floor: int, block: int) -> int:
        """Raise the stored value to max(stored, floor) + block and return it."""
        async with self._write():
            row = await self._one(
                "INSERT INTO sequences (key, value) VALUES (?, ? + ?) ON CONFLICT (key)"
                " DO UPDATE SET value = max(value, ?) + ? RETURNING value",
                (key, floor, block, floor, block),
            )
        return row[0]

    async def release_sequence(self, key: str, expected: int, value: int) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE sequences SET value = ? WHERE key = ? AND value = ?",
                (value, key, expected),
            )

    # ---- run-now requests from other processes ---------------------------------------

    async def add_request(self, task: Task, kind: str, now: int) -> int:
        async with self._write():
            cursor = await self._conn.execute(
                "INSERT INTO requests (task_id, task, kind, created_at) VALUES (?,?,?,?)",
                (task.id, task.name, kind, now),
            )
        return cursor.lastrowid

    async def pending_requests(self) -> list[RunRequest]:
        rows = await self._all(
            "SELECT id, task_id, task, kind, created_at FROM requests WHERE handled_at IS NULL"
            " ORDER BY id"
        )
        return [RunRequest(*row) for row in rows]

    async def finish_request(
        self, req_id: int, now: int, outcome: str, occurrence_id: int | None, reason: str | None
    ) -> None:
        async with self._write():
            await self._conn.execute(
                "UPDATE requests SET handled_at = ?, outcome = ?, occurrence_id = ?, reason = ?"
                " WHERE id = ? AND handled_at IS NULL",
                (now, outcome, occurrence_id, reason, req_id),
            )

    async def request(self, req_id: int) -> tuple[str | None, int | None, str | None]:
        row = await self._one(
            "SELECT outcome, occurrence_id, reason FROM requests WHERE id = ?", (req_id,)
        )
        if row is None:
            raise NotFound(f"no request {req_id}")
        return row[0], row[1], row[2]

    # ---- history -------------------------------------------------------------------------

    async def history(self, task: str | None = None, limit: int = 50) -> list[Occurrence]:
        if task is None:
            rows = await self._all(f"{_OCC_SELECT} ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = await self._all(
                f"{_OCC_SELECT} WHERE task = ? ORDER BY id DESC LIMIT ?", (task, limit)
            )
        return [occurrence_from_row(row) for row in rows]

    async def prune(self, keep: int = DEFAULT_KEEP) -> list[str]:
        """Keep the newest `keep` occurrences per task; drop older ones, their events and logs.

        Returns the log paths of pruned occurrences, for the caller to delete.
        """
        over = await self._all(
            "SELECT task_id FROM occurrences GROUP BY task_id HAVING count(*) > ?", (keep,)
        )
        logs: list[str] = []
        for (task_id,) in over:
            newest = (
                "SELECT id FROM occurrences WHERE task_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?"
            )
            cutoff = (await self._one(newest, (task_id, keep - 1)))[0]
            where = f"task_id = ? AND id < ? AND state NOT IN {_ACTIVE_SQL}"
            async with self._write():
                rows = await self._all(
                    f"SELECT command_id, log_path FROM occurrences WHERE {where}", (task_id, cutoff)
                )
                commands = [(r[0],) for r in rows if r[0]]
                await self._conn.executemany("DELETE FROM events WHERE command_id = ?", commands)
                await self._conn.execute(
                    f"DELETE FROM occurrences WHERE {where}", (task_id, cutoff)
                )
            logs.extend(r[1] for r in rows if r[1])
        return logs


class _SlowPath(Exception):
    """The batch claim met a stale plan or a taken slot; redo it one plan at a time."""


_ADVANCE_TASK = (
    "UPDATE tasks SET next_run_at = ?, due_at = ? WHERE id = ? AND generation = ?"
    " AND next_run_at = ? AND enabled = 1"
)
_INSERT_OCC = (
    "INSERT INTO occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at, covers,"
    " missed, detail, finished_at, owner, lease_token, generation, command_id)"
    " VALUES (?, ?, ?, 'scheduled', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


@functools.lru_cache(maxsize=4096)
def _payload(text: str) -> dict[str, Any]:
    """Event payloads repeat (`{"exit_code": 0}`); parse each text once. Read-only."""
    return json.loads(text)


def _claimed(row: tuple[Any, ...]) -> Occurrence:
    """The Occurrence an _INSERT_OCC row makes, without reading it back."""
    return Occurrence(
        id=row[0],
        task_id=row[1],
        task=row[2],
        kind="scheduled",
        scheduled_for=row[3],
        state=row[4],
        claimed_at=row[5],
        covers=row[6],
        missed=row[7],
        detail=row[8],
        finished_at=row[9],
        owner=row[10],
        lease_token=row[11],
        generation=row[12],
        command_id=row[13],
    )


def _advance(plan: Plan) -> tuple[Any, ...]:
    task = plan.task
    due = due_time(task, plan.next_run_at) if plan.next_run_at is not None else None
    return (plan.next_run_at, due, task.id, task.generation, task.next_run_at)


def _occurrence_rows(
    plans: Sequence[Plan], first_id: int, owner: str, token: int, now: int
) -> list[tuple[Any, ...]]:
    rows = []
    next_id = first_id
    for plan in plans:
        task = plan.task
        for item in plan.occurrences:
            finished = now if item.state == "skipped" else None
            rows.append(
                (
                    next_id,
                    task.id,
                    task.name,
                    item.scheduled_for,
                    item.state,
                    now,
                    item.covers,
                    item.missed,
                    item.detail,
                    finished,
                    owner,
                    token,
                    task.generation,
                    f"cmd-{next_id}",
                )
            )
            next_id += 1
    return rows


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
