"""A PostgreSQL connection that speaks to the query groups as their SQLite connection does.

The query groups are written once, in the SQL both databases share, against the few calls
aiosqlite's connection offers (`execute`, `executemany`, `execute_fetchall`, a cursor's
`rowcount`, `lastrowid` and rows, `total_changes`). This module is that surface over
psycopg 3: it turns the SQLite spellings the queries use into PostgreSQL's (placeholders,
`INSERT OR IGNORE`, `instr`) once per text, binds a statement's values on the client (as
SQLite takes them: a text into an integer column is the server's to cast) and a batch's on
the server (prepared once, planned once), and stores booleans as the 0 and 1 the schema
keeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import socket
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format

from tickui.common import faults
from tickui.common.errors import Unavailable

# Tables whose rows get their id from the store (SQLite's rowid): an INSERT into one of them
# answers the new id, as SQLite's cursor.lastrowid does.
ID_TABLES = frozenset({"tasks", "occurrences", "requests", "hook_deliveries", "audit"})
_INSERT = re.compile(r"^\s*INSERT\s+(OR\s+IGNORE\s+)?INTO\s+(\w+)", re.IGNORECASE)
_RETURNING = re.compile(r"\bRETURNING\b", re.IGNORECASE)
_INSTR = re.compile(r"\binstr\(", re.IGNORECASE)
# SQLite's `CROSS JOIN t ON ...` (an inner join it may not reorder) is a plain join here.
_CROSS_ON = re.compile(r"\bCROSS JOIN (\w+) (\w+) ON\b")
# SQLite's JSON functions where the queries use them, in PostgreSQL's words.
_REWRITES = (
    ("json_extract(t.spec, '$.retries') > 0", "(t.spec::json ->> 'retries')::numeric > 0"),
    (
        "json_extract(t.spec, '$.pause_after') IS NOT NULL",
        "(t.spec::json ->> 'pause_after') IS NOT NULL",
    ),
    (  # ids as an array: probed in an index, whatever the planner guesses of the rows
        "o.id IN (SELECT value FROM json_each(?))",
        "o.id = ANY (ARRAY(SELECT json_array_elements_text(?::json))::bigint[])",
    ),
    (
        "SELECT value FROM json_each(?)",
        "SELECT value::bigint FROM json_array_elements_text(?::json)",
    ),
)


def _placeholders(sql: str) -> str:
    """`?` to `%s` and `%` to `%%`, outside quoted literals."""
    out: list[str] = []
    quote = ""
    for ch in sql:
        if quote:
            out.append("%%" if ch == "%" else ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def translate(sql: str, many: bool = False) -> tuple[str, bool]:
    """PostgreSQL's text for one of the query groups' statements, and whether it answers
    the new row's id (a single INSERT into an ID_TABLES table without its own RETURNING)."""
    text = _CROSS_ON.sub(r"JOIN \1 \2 ON", _INSTR.sub("strpos(", sql))
    for sqlite_text, pg_text in _REWRITES:
        text = text.replace(sqlite_text, pg_text)
    returns_id = False
    found = _INSERT.match(text)
    if found:
        ignore = bool(found.group(1))
        if ignore:
            text = text[: found.start(1)] + text[found.end(1) :]
        has_returning = _RETURNING.search(text)
        tail = ""
        if ignore:
            tail += " ON CONFLICT DO NOTHING"
        if not has_returning and not many and found.group(2).lower() in ID_TABLES:
            tail += " RETURNING id"
            returns_id = True
        if tail:
            if has_returning:
                at = has_returning.start()
                text = text[:at].rstrip() + tail + " " + text[at:]
            else:
                text = text.rstrip().rstrip(";") + tail
    return _placeholders(text), returns_id


class _BoolAsInt(Dumper):
    """Booleans are stored as 0 and 1, as in the SQLite schema (INTEGER columns)."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


class _Whole(Loader):
    """numeric (what sum() of bigint gives) as int when whole, as SQLite answers."""

    format = Format.TEXT

    def load(self, data: Any) -> int | float:
        text = bytes(data).decode()
        try:
            return int(text)
        except ValueError:
            return float(text)


def configure(conn: psycopg.AsyncConnection[Any]) -> None:
    conn.adapters.register_dumper(bool, _BoolAsInt)
    conn.adapters.register_loader("numeric", _Whole)


class ServerLost(Unavailable):
    """The server cannot be reached or dropped the connection: an outage to wait out."""


class CommitUnknown(ServerLost):
    """The connection went away while COMMIT was on its way: the server may have
    committed the transaction or not."""


def first_line(exc: BaseException) -> str:
    """libpq's first line of a failure (its messages never hold the password)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def lost(exc: BaseException, where: str = "") -> ServerLost:
    """The server went away or refused: one line, naming the store when `where` does."""
    return ServerLost(f"PostgreSQL store{' ' + where if where else ''}: {first_line(exc)}")


def fault_kind(exc: BaseException) -> str | None:
    """The server's faults for `faults`: its disk full, or an outage (down, dropped)."""
    if isinstance(exc, psycopg.errors.DiskFull) or "No space left" in str(exc):
        return faults.DISK_FULL
    if isinstance(exc, ServerLost | psycopg.OperationalError):
        return faults.OUTAGE
    return None


class Cursor:
    """What a statement left: its rows, how many rows it changed and a new row's id."""

    __slots__ = ("_rows", "lastrowid", "rowcount")

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int, lastrowid: int | None):
        self._rows = rows
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    async def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    async def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    async def close(self) -> None:
        return None

    def __await__(self):  # `await conn.execute(...)` and `async with` both work on it
        async def _self() -> Cursor:
            return self

        return _self().__await__()


class Connection:
    """One psycopg connection, autocommit: transactions are the store's own BEGIN/COMMIT.

    Opened at its first statement (or by `connect`). A connection the server dropped (a
    restart, a network cut) is replaced at the next statement that begins outside a
    transaction; one lost inside a transaction fails that transaction (the server rolled
    it back) and the store's caller hears Unavailable. A read-only one (`readonly`) is
    opened, and opened again, with the server refusing its writes."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any] | None,
        url: str = "",
        name: str = "tickui",
        readonly: bool = False,
    ) -> None:
        self.raw = conn
        self.url = url
        self.name = name
        self.readonly = readonly
        self.total_changes = 0
        self.in_transaction = False
        self._unanswered = False  # a statement got no answer in time: the connection is dropped

    @property
    def up(self) -> bool:
        """Open, and not known to be dropped or unanswering."""
        raw = self.raw
        return raw is not None and not (raw.closed or raw.broken or self._unanswered)

    @property
    def dropped(self) -> bool:
        """The server ended the connection (it answered that, or closed it): not a server
        that stopped answering, which a new connection would wait for again."""
        raw = self.raw
        return raw is not None and (raw.closed or raw.broken) and not self._unanswered

    async def connect(self, where: str = "") -> None:
        """Open it now, when it is not open, failing as `lost` (naming the store)."""
        if self.raw is None:
            try:
                self.raw = await open_connection(self.url, self.name, self.readonly)
            except psycopg.Error as exc:
                raise lost(exc, where) from None

    async def adopt(self, raw: psycopg.AsyncConnection[Any]) -> None:
        """Take `raw`, opened as this one would be but under another name, as its own."""
        self.raw = raw
        await self.run("SET application_name = %s", (self.name,))

    async def _usable(self) -> psycopg.AsyncConnection[Any]:
        if self.raw is None:
            await self.connect()
        assert self.raw is not None
        if self.up or self.in_transaction or not self.url:
            return self.raw
        try:
            fresh = await open_connection(self.url, self.name, self.readonly)
        except psycopg.Error as exc:
            raise lost(exc) from None
        old, self.raw, self._unanswered = self.raw, fresh, False
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1):
                await old.close()
        return fresh

    @contextlib.asynccontextmanager
    async def _answered(self):
        """A statement the server answers within ANSWER_DEADLINE_S, or the server is taken
        for gone (a frozen server keeps its sockets open and answers nothing: no error
        would ever come). The socket is then shut down, which ends the wait at once (a
        cancelled wait would first ask the silent server to cancel the query, for up to
        10 s), and the connection is replaced at the next statement."""
        if self._unanswered and self.in_transaction:
            raise ServerLost("PostgreSQL store: the server did not answer")
        watchdog = asyncio.get_running_loop().call_later(ANSWER_DEADLINE_S, self._give_up)
        try:
            yield
        except (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout) as exc:
            if self._unanswered:
                raise ServerLost(
                    f"PostgreSQL store: the server did not answer within {ANSWER_DEADLINE_S:g} s"
                ) from None
            raise lost(exc) from None
        finally:
            watchdog.cancel()

    def _give_up(self) -> None:
        self._unanswered = True
        if self.raw is None:  # still connecting: its own timeout ends that
            return
        with (
            contextlib.suppress(OSError, psycopg.Error),
            socket.socket(fileno=os.dup(self.raw.pgconn.socket)) as sock,
        ):
            sock.shutdown(socket.SHUT_RDWR)

    async def run(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """A statement of the store's own (BEGIN, COMMIT, a lock), as PostgreSQL spells it."""
        async with self._answered():
            await (await self._usable()).execute(sql, params)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        text, returns_id = translate(sql)
        async with self._answered(), (await self._usable()).cursor() as cur:
            await cur.execute(text, tuple(params) if params else None)
            rows = await cur.fetchall() if cur.description is not None else []
            count = cur.rowcount if cur.rowcount >= 0 else 0
        lastrowid = None
        if returns_id:
            lastrowid = rows[0][0] if rows else None
            rows = []
        if _INSERT.match(sql) or sql.lstrip()[:6].upper() in ("UPDATE", "DELETE"):
            self.total_changes += count
        return Cursor(rows, count, lastrowid)

    async def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> Cursor:
        """One statement over many rows, pipelined. Values are bound on the server here, so
        that after a few rows psycopg prepares the statement and the server plans it once,
        not once a row (a third of the time a row, for a batch claim's or settlement's
        thousand rows). A str is sent untyped and an int as an integer, as the client-side
        text spells them, so the server casts alike."""
        text, _ = translate(sql, many=True)
        rows = [tuple(p) for p in seq]
        if not rows:
            return Cursor([], 0, None)
        async with self._answered(), psycopg.AsyncCursor(await self._usable()) as cur:
            await cur.executemany(text, rows)
            count = cur.rowcount if cur.rowcount >= 0 else 0
        self.total_changes += count
        return Cursor([], count, None)

    async def commit(self) -> None:
        """Outside the store's transactions every statement commits by itself."""

    async def execute_fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await (await self.execute(sql, params)).fetchall()

    async def close(self) -> None:
        if self.raw is not None:
            await self.raw.close()


CONNECT_TIMEOUT_S = 10
# A statement with no answer this long means a server that is frozen or cut off.
ANSWER_DEADLINE_S = 15.0
# The server ends a session left idle inside a transaction this long (a frozen or cut-off
# tickui process): its write lock is freed, so the others' writes, a standby's takeover
# among them, wait for it no longer than this.
IDLE_IN_TRANSACTION_MS = 5000


async def open_connection(
    url: str, name: str = "tickui", readonly: bool = False
) -> psycopg.AsyncConnection[Any]:
    """A new connection as the store uses it: autocommit, values bound on the client;
    `readonly`, every transaction of it read-only (the server refuses its writes)."""
    options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    if readonly:
        options += " -c default_transaction_read_only=on"
    conn = await psycopg.AsyncConnection.connect(
        url,
        autocommit=True,
        cursor_factory=psycopg.AsyncClientCursor,
        connect_timeout=CONNECT_TIMEOUT_S,
        application_name=name,
        options=options,
    )
    configure(conn)
    return conn


async def read(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """A read outside a transaction, made once more on a new connection when the server
    had dropped `conn` (ended or restarted): a server that does not answer, or cannot be
    reached, is not waited for twice."""
    was_up = conn.up
    try:
        return await conn.execute_fetchall(sql, params)
    except ServerLost:
        if not (was_up and conn.dropped):
            raise
    return await conn.execute_fetchall(sql, params)


class Readers:
    """A few connections for the reads made outside the store's write transaction, so
    that a read never waits behind a write (nor behind another read, up to `size` at
    once). Each is a Connection as above (its deadline, its errors, replaced when the
    server dropped it), opened when a read finds no open one free: a command making one
    read at a time opens one."""

    def __init__(self, url: str, size: int, readonly: bool = False) -> None:
        self.url = url
        self.readonly = readonly
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Connection] = []
        self._every: list[Connection] = []

    def has_open(self) -> bool:
        """Whether a read would find an open connection free (no wait, none opened)."""
        return not self._slots.locked() and any(conn.up for conn in self._idle)

    @contextlib.asynccontextmanager
    async def one(self) -> AsyncIterator[Connection]:
        """A connection of the reader's own until the block ends: the newest free open
        one, else one to open."""
        async with self._slots:
            opened = [n for n, conn in enumerate(self._idle) if conn.up]
            if opened:
                conn = self._idle.pop(opened[-1])
            elif self._idle:
                conn = self._idle.pop()
            else:
                conn = Connection(None, self.url, "tickui-read", self.readonly)
                self._every.append(conn)
            try:
                yield conn
            finally:
                self._idle.append(conn)

    def give_up_one(self) -> psycopg.AsyncConnection[Any] | None:
        """A free open connection, no longer one of these (they open another when reads
        need it): the writer's first, so that a command that reads then writes opens one."""
        for conn in reversed(self._idle):
            if conn.up:
                raw, conn.raw = conn.raw, None
                return raw
        return None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        async with self.one() as conn:
            return await read(conn, sql, params)

    async def close(self) -> None:
        for conn in self._every:
            with contextlib.suppress(Exception):
                await conn.close()
