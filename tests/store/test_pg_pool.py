"""A PostgreSQL store's reads outside its write transaction are made on read connections
of their own: they are answered while a write waits or is under way, see only what was
committed, and a dropped one is replaced; the reads inside the write transaction are the
transaction's. Connections are opened as reads need them, read-only ones refuse writes,
and close() leaves no backend. A real server."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from tickui.common.errors import BadInput, Unavailable
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.store.postgres import WRITE_LOCK, pool_size

POLL_S = 10.0  # how long a backend may take to be listed or gone after its client's word


def _spec(name: str):
    return build_spec({"name": name, "every": "1m", "command": ["true"]}, 0)


def _backends(url: str) -> dict[str, int]:
    """The store's backends on the database, by application_name."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name LIKE 'tickui%'"
            " GROUP BY application_name"
        ).fetchall()
    return dict(rows)


async def _until(check, what: str):
    """Polls `check` (a quick query) while the loop goes on with the store's tasks."""
    deadline = time.monotonic() + POLL_S
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {POLL_S:g} s: {what}"
        await asyncio.sleep(0.05)


def _lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()[0]


async def _set_up(url: str) -> None:
    """A database with its schema and task "a", and no backend of the store's left."""
    writer = await Store.open(url)
    await writer.add_task(_spec("a"), 0)
    await writer.close()
    await _until(lambda: not _backends(url), "the writer's backends to end")


async def _reader_pid(store) -> int:
    async with store._readers.one() as conn:
        return (await conn.execute_fetchall("SELECT pg_backend_pid()"))[0][0]


async def test_a_read_is_answered_while_the_write_waits_for_the_lock(pg_url):
    """Another process holds the write lock: this store's write waits for it, and its reads
    do not (on one connection they waited behind the write's lock statement)."""
    store = await Store.open(pg_url)
    other = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        await store.add_task(_spec("a"), 0)
        await other.execute("BEGIN")
        await other.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        write = asyncio.create_task(store.add_task(_spec("b"), 0))
        await _until(lambda: _lock_waiters(pg_url) == 1, "the write to wait for the lock")
        async with asyncio.timeout(20):  # on the writer's connection: never, the lock is held
            names = [t.name for t in await store.list_tasks()]
        assert names == ["a"]
        assert not write.done(), "the write did not wait for the lock"
        await other.execute("COMMIT")
        async with asyncio.timeout(20):
            await write
        assert [t.name for t in await store.list_tasks()] == ["a", "b"]
    finally:
        await other.close()
        await store.close()


async def test_reads_see_what_was_committed_not_a_write_under_way(pg_url):
    """Another task of the same store is inside a write transaction (held open on an event):
    a read is answered meanwhile and does not see its uncommitted change; the writer's own
    read, inside the transaction, does."""
    store = await Store.open(pg_url)
    try:
        await store.add_task(_spec("a"), 0)
        changed, finish = asyncio.Event(), asyncio.Event()
        seen_inside: list[str] = []

        async def writer() -> None:
            async with store._write():
                await store._conn.execute("UPDATE tasks SET name = 'renamed'")
                seen_inside.extend(r[0] for r in await store._all("SELECT name FROM tasks"))
                changed.set()
                await finish.wait()

        task = asyncio.create_task(writer())
        async with asyncio.timeout(20):
            await changed.wait()
            assert [t.name for t in await store.list_tasks()] == ["a"]
        assert seen_inside == ["renamed"]
        finish.set()
        await task
        assert [t.name for t in await store.list_tasks()] == ["renamed"]
    finally:
        await store.close()


async def test_a_read_connection_ended_by_the_server_is_replaced(pg_url):
    store = await Store.open(pg_url)
    try:
        await store.add_task(_spec("a"), 0)
        first = await _reader_pid(store)
        await store._conn.execute("SELECT pg_terminate_backend(?)", (first,))
        await _until(lambda: _backends(pg_url).get("tickui-read", 0) == 0, "the backend to end")
        assert [t.name for t in await store.list_tasks()] == ["a"]  # made again, on a new one
        assert await _reader_pid(store) != first
    finally:
        await store.close()


async def test_a_read_while_the_server_is_down_fails_in_one_line_then_works(private_pg):
    store = await Store.open(private_pg.url)
    try:
        await store.add_task(_spec("a"), 0)
        assert [t.name for t in await store.list_tasks()] == ["a"]
        private_pg.stop()
        with pytest.raises(Unavailable) as caught:
            await store.list_tasks()
        said = str(caught.value)
        assert said.startswith("PostgreSQL store") and "\n" not in said, said
        private_pg.start_with_retries(same_port=True)
        assert [t.name for t in await store.list_tasks()] == ["a"]
    finally:
        await store.close()


async def test_a_read_only_stores_connections_refuse_writes(pg_url):
    writer = await Store.open(pg_url)
    await writer.add_task(_spec("a"), 0)
    await writer.close()
    store = await Store.open(pg_url, readonly=True)
    try:
        for _ in range(2):  # and again on the connection that replaces one the server ended
            async with store._readers.one() as conn:
                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    await conn.execute("DELETE FROM tasks")
                pid = (await conn.execute_fetchall("SELECT pg_backend_pid()"))[0][0]
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            await _until(lambda: _backends(pg_url).get("tickui-read", 0) == 0, "the backend to end")
            assert [t.name for t in await store.list_tasks()] == ["a"]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            await store._conn.execute("DELETE FROM tasks")
        assert [t.name for t in await store.list_tasks()] == ["a"]
    finally:
        await store.close()


async def test_connections_are_opened_as_needed_and_close_leaves_none(pg_url):
    await _set_up(pg_url)
    store = await Store.open(pg_url)
    try:
        await store.list_tasks()
        assert _backends(pg_url) == {"tickui-read": 1}  # one read at a time: one connection
        # The write takes the free read connection; the reads after it, made while no write
        # is under way and no read connection is open, are made on the writer's.
        await store.add_task(_spec("b"), 0)
        assert [t.name for t in await store.list_tasks()] == ["a", "b"]
        assert _backends(pg_url) == {"tickui": 1}
        # Reads at once, more than the pool: no more read connections than its size.
        hold = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
        try:
            await hold.execute("BEGIN")
            await hold.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")  # reads wait...
            reads = [asyncio.create_task(store.list_tasks()) for _ in range(2 * pool_size())]
            await _until(
                lambda: _backends(pg_url).get("tickui-read") == pool_size(),
                "every read connection to be opened",
            )
        finally:
            await hold.close()  # ...until here
        async with asyncio.timeout(20):
            listed = await asyncio.gather(*reads)
        assert all([t.name for t in done] == ["a", "b"] for done in listed)
        assert _backends(pg_url) == {"tickui-read": pool_size(), "tickui": 1}
        await store.data_version()  # the change channel's listener
        assert _backends(pg_url) == {"tickui-read": pool_size(), "tickui": 1, "tickui-listen": 1}
    finally:
        await store.close()
    await _until(lambda: not _backends(pg_url), "every backend of the store to end")


async def test_a_read_only_store_opens_no_writer(pg_url):
    await _set_up(pg_url)
    store = await Store.open(pg_url, readonly=True)
    try:
        assert [t.name for t in await store.list_tasks()] == ["a"]
        assert _backends(pg_url) == {"tickui-read": 1}
    finally:
        await store.close()


def test_the_pool_size_is_checked():
    assert pool_size({}) == 2
    assert pool_size({"TICKUI_PG_POOL": "4"}) == 4
    for bad in ("0", "17", "two", ""):
        with pytest.raises(BadInput, match="TICKUI_PG_POOL"):
            pool_size({"TICKUI_PG_POOL": bad})


async def test_a_bad_pool_size_is_refused_before_any_connection(pg_url, monkeypatch):
    monkeypatch.setenv("TICKUI_PG_POOL", "0")
    with pytest.raises(BadInput, match="TICKUI_PG_POOL"):
        await Store.open(pg_url)
    assert _backends(pg_url) == {}
