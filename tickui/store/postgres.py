"""The PostgreSQL store: the same query groups as the SQLite store, on a PostgreSQL database.

Writers are made to behave as SQLite's do: each write transaction first takes one
transaction-scoped advisory lock (SQLite's `BEGIN IMMEDIATE`), so the claims, the lease
and the ids a batch numbers itself see no other writer between their reads and writes,
whatever host the writer is on. Every write transaction ends with a NOTIFY, delivered at
commit; a second connection LISTENs, and `data_version` counts what it heard, so a viewer
learns of another process's change without polling the database.

The writes have one connection; the reads made outside this store's write transaction
have a few others (`Readers`), so that a dashboard's or an engine's read does not wait
behind a write. A read inside the write transaction, in the task that holds it, is made
on the transaction's connection: it sees the transaction's own writes, and a claim's
check of the lease is fenced by the lock it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tickui.common import checks, faults
from tickui.common.errors import NotSetUp, StoreError, Unavailable
from tickui.common.options import by_env
from tickui.model.planning import Plan
from tickui.model.records import Occurrence, occurrence_from_row
from tickui.store import pgschema
from tickui.store.base import _OCC_SELECT, StoreBase
from tickui.store.groups import QUERY_GROUPS
from tickui.store.pgbulk import BulkWrites
from tickui.store.pgconn import (
    CommitUnknown,
    Connection,
    Readers,
    ServerLost,
    fault_kind,
    first_line,
    lost,
    open_connection,
    read,
)

faults.recognize(fault_kind)  # the server's outages, for fault_text

WRITE_LOCK = 0x7469636B  # the advisory lock every write transaction takes ("tick")
CHANNEL = "tickui_changes"
REQUEST_NOTE = "request"  # the payload of a request's announcement (store names are hex)
# The write transactions the running task is inside (one mark each, made by `_write`): a
# task started inside one inherits its marks, as it inherits the rest of its context.
_WRITING: ContextVar[tuple[object, ...]] = ContextVar("tickui_pg_writing", default=())
POOL_ENV = "TICKUI_PG_POOL"


def pool_size(env: Mapping[str, str] = os.environ) -> int:
    """How many read connections a store keeps at most (TICKUI_PG_POOL, checked)."""
    pool = by_env(POOL_ENV)
    text = env.get(POOL_ENV)
    if text is None:
        return int(pool.default)
    return int(checks.number(text, POOL_ENV, pool.low, pool.high, integer=True))


def shown(url: str) -> str:
    """The URL as it may be shown: never its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def default_log_dir(url: str) -> Path:
    """Where this host keeps the runs' output of a store at `url`: beside the user's data."""
    import platformdirs

    parts = urlsplit(shown(url))
    key = hashlib.sha256(shown(url).encode()).hexdigest()[:12]
    name = f"{parts.hostname or 'local'}-{parts.port or 5432}-{parts.path.strip('/') or 'db'}"
    return Path(platformdirs.user_data_dir("tickui")) / "postgres" / f"{name}-{key}.logs"


class PgStoreBase(StoreBase):
    """The connection plumbing of StoreBase, on PostgreSQL."""

    _Conflict = psycopg.errors.IntegrityError
    _json_batches = False  # batches are prepared once and sent as one (see pgconn)
    _own_events = False  # sequences are not given in order to concurrent writers

    def __init__(self, url: str, conn: Connection, readers: Readers | None = None) -> None:
        super().__init__(Path(shown(url)), conn)  # type: ignore[arg-type]
        self.readonly = conn.readonly
        self._readers = readers or Readers(url, pool_size(), conn.readonly)
        self._tx: object | None = None  # the mark of the write transaction under way
        self.url = url
        self.where = shown(url)
        self.log_dir = default_log_dir(url)
        self._changes = 0
        self._name = uuid.uuid4().hex[:12]  # said in this store's NOTIFYs, to know its own
        self._commit_listeners: list[Callable[[], None]] = []
        self._request_listener: Callable[[], None] | None = None
        self._outage: str | None = None  # the listener's lost connection, while it is lost
        self._listen: psycopg.AsyncConnection[Any] | None = None
        self._listening: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str], readonly: bool = False) -> Self:
        url = str(path)
        readers = Readers(url, pool_size(), readonly)
        store = cls(url, Connection(None, url, readonly=readonly), readers)
        try:
            async with readers.one() as first:  # the one a command's reads will use
                await first.connect(shown(url))
            version = await store._version()
            if readonly:
                if version is None:
                    raise NotSetUp(
                        f"PostgreSQL store {store.where} has no tickui schema"
                        " (tickui task add or tickui run sets it up)"
                    )
            else:
                await store._migrate()
        except psycopg.Error as exc:
            await store.close()
            raise lost(exc, shown(url)) from None
        except BaseException:
            await store.close()
            raise
        return store

    async def _version(self) -> int | None:
        """The schema's version; None for a database tickui never set up. A newer one is
        refused, and so is a database whose tables are another program's."""
        row = await self._one("SELECT to_regclass('tickui_meta') IS NOT NULL")
        if not row[0]:
            found = await self._all(
                "SELECT table_name FROM information_schema.tables"
                " WHERE table_schema = current_schema() AND table_name = ANY(?)",
                (list(pgschema.TABLES),),
            )
            if found:
                names = ", ".join(sorted(r[0] for r in found)[:4])
                raise StoreError(
                    f"PostgreSQL store {self.where} has tables of another program"
                    f" ({names}); left untouched"
                )
            return None
        rows = dict(await self._all("SELECT key, value FROM tickui_meta"))
        if rows.get("application") != pgschema.APPLICATION:
            raise StoreError(f"PostgreSQL store {self.where} is not tickui's; left untouched")
        version = int(rows.get("schema", "0"))
        if version > pgschema.VERSION:
            raise StoreError(
                f"PostgreSQL store {self.where} has schema {version}, newer than this"
                f" tickui's {pgschema.VERSION}; upgrade tickui (the database was left untouched)"
            )
        return version

    async def _migrate(self) -> None:
        version = await self._version()
        if version == pgschema.VERSION:
            return
        async with self._write():
            version = await self._version() or 0
            for step in pgschema.MIGRATIONS[version:]:
                for statement in step:
                    await self._conn.run(statement)
            await self._conn.execute(
                "INSERT INTO tickui_meta (key, value) VALUES ('application', ?), ('schema', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (pgschema.APPLICATION, str(pgschema.VERSION)),
            )

    async def _listening_now(self) -> None:
        """The change channel's own connection, opened for the first who asks what changed
        (a viewer): a one-shot command never opens it."""
        if self._listening is not None:
            return
        self._listening = asyncio.create_task(self._hear())
        while self._listen is None and self._outage is None and not self._listening.done():
            await asyncio.sleep(0.01)

    async def _hear(self) -> None:
        """Count the commits heard; a dropped connection is opened again, with backoff,
        and counts as a change (what was missed meanwhile is unknown)."""
        try:
            raw = await open_connection(self.url, "tickui-listen")
            await raw.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            self._outage = first_line(exc)
            raw = await self._listen_again()
        self._listen = raw
        while True:
            try:
                self._outage = None
                async for note in raw.notifies():
                    if note.payload == REQUEST_NOTE:
                        if self._request_listener is not None:
                            self._request_listener()
                    elif note.payload != self._name:  # another connection's commit
                        self._changes += 1
                        for listener in list(self._commit_listeners):
                            listener()
            except psycopg.Error as exc:
                self._outage = first_line(exc)
            else:
                self._outage = "the server closed the connection"
            with contextlib.suppress(Exception):
                await raw.close()
            raw = await self._listen_again()
            self._listen = raw
            self._changes += 1

    async def _listen_again(self) -> psycopg.AsyncConnection[Any]:
        """A new listening connection, tried with a growing pause (up to 5 s) until one opens."""
        delay = 0.2
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            try:
                raw = await open_connection(self.url, "tickui-listen")
                await raw.execute(f"LISTEN {CHANNEL}")
                return raw
            except psycopg.Error as exc:
                self._outage = first_line(exc)

    async def _columns(self, table: str) -> list[str]:
        rows = await self._all(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?"
            " ORDER BY ordinal_position",
            (table,),
        )
        return [row[0] for row in rows]

    async def _after_copy(self) -> None:
        """Events were copied with their numbers: the next one follows the highest."""
        await self._conn.execute(
            "SELECT setval(pg_get_serial_sequence('events', 'seq'),"
            " coalesce((SELECT max(seq) FROM events), 0) + 1, false)"
        )

    async def checkpoint(self) -> None:
        return None  # the server folds its WAL itself

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(BaseException):
                await self._listening
        await self._readers.close()
        for conn in (self._listen, self._conn.raw):  # the newest of each
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    @contextlib.asynccontextmanager
    async def _write(self):
        """One write transaction at a time, as SQLite's: the advisory lock first. The
        reads of the task inside it are made on its connection (`_all`)."""
        if self.readonly:
            raise StoreError(f"PostgreSQL store {self.where} is open for reading only")
        async with self._lock:
            conn = self._conn
            mark = self._tx = object()
            inside = _WRITING.set((*_WRITING.get(), mark))
            try:
                if conn.raw is None:  # the reads' free connection, rather than a new one
                    spare = self._readers.give_up_one()
                    if spare is not None:
                        await conn.adopt(spare)
                await conn.run("BEGIN")
                conn.in_transaction = True
                try:
                    await conn.run("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                    yield
                    await conn.run(f"NOTIFY {CHANNEL}, '{self._name}'")
                except BaseException:
                    conn.in_transaction = False
                    with contextlib.suppress(psycopg.Error, Unavailable):
                        await conn.run("ROLLBACK")
                    raise
                conn.in_transaction = False
                try:
                    await conn.run("COMMIT")
                except ServerLost as exc:
                    raise CommitUnknown(str(exc)) from None
            finally:
                self._tx = None
                _WRITING.reset(inside)

    async def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    async def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """On the write transaction's connection inside it (in the task holding it);
        else on a read connection, or on the writer's while no write is under way and no
        read connection is open and free (a command that reads after its write opens no
        second connection): the write lock is held meanwhile, so no write begins on it."""
        if self._tx is not None and self._tx in _WRITING.get():
            return list(await self._conn.execute_fetchall(sql, params))
        if self._conn.up and not self._lock.locked() and not self._readers.has_open():
            async with self._lock:
                return await read(self._conn, sql, params)
        return await self._readers.fetchall(sql, params)

    async def data_version(self) -> int:
        """Counts the other connections' commits heard on the change channel."""
        await self._listening_now()
        return self._changes

    def on_commit(self, listener: Callable[[], None]) -> None:
        self._commit_listeners.append(listener)
        if self._listening is None:
            self._listening = asyncio.create_task(self._hear())

    async def announce_request(self) -> None:
        """A NOTIFY of its own on the change channel, heard by every listening engine (the
        lease holder acts on it), on whatever host."""
        if self.readonly:
            return
        with contextlib.suppress(psycopg.Error, Unavailable):
            async with self._lock:
                await self._conn.run(f"NOTIFY {CHANNEL}, '{REQUEST_NOTE}'")

    def hear_requests(self, listener: Callable[[], None] | None) -> None:
        self._request_listener = listener
        if listener is not None and self._listening is None:
            self._listening = asyncio.create_task(self._hear())

    def outage(self) -> str | None:
        return self._outage


class PostgresStore(BulkWrites, *QUERY_GROUPS, PgStoreBase):
    """One PostgreSQL database, with every query group."""

    async def claim(
        self, plans: Sequence[Plan], owner: str, token: int, now: int
    ) -> list[Occurrence]:
        """As every store's, and when the connection went away during the COMMIT, the
        claim is looked up on a new one: its rows (this owner, token and claim time) are
        there, all of them, or none is. Found, they are returned as claimed: a slot
        committed and then forgotten would stay claimed, never started."""
        try:
            return await super().claim(plans, owner, token, now)
        except CommitUnknown:
            rows = await self._all(
                f"{_OCC_SELECT} WHERE owner = ? AND lease_token = ? AND claimed_at = ?"
                " AND state IN ('claimed', 'skipped') ORDER BY id",
                (owner, token, now),
            )
            if not rows:
                raise
            return [occurrence_from_row(row) for row in rows]
