"""A PostgreSQL server that answers nothing (frozen: its sockets stay open, no error ever
comes) is taken for down after a deadline, and the store works again once it answers; a
tickui process frozen inside a write transaction holds the write lock no longer than the
server's idle-in-transaction timeout. A real server of the test's own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest

from tickui.common.errors import Unavailable
from tickui.common.timeutil import MICROS
from tickui.model.spec import build_spec
from tickui.store import Store, pgconn
from tickui.store.postgres import WRITE_LOCK


def _server_pids(postmaster: int) -> list[int]:
    """The postmaster and every process it started (one backend per connection)."""
    pids = [postmaster]
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                stat = open(f"/proc/{name}/stat").read()  # noqa: SIM115
                if int(stat[stat.rfind(")") + 2 :].split()[1]) == postmaster:
                    pids.append(int(name))
    return pids


@contextlib.contextmanager
def frozen(postmaster: int) -> Iterator[None]:
    pids = _server_pids(postmaster)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _spec(name: str):
    return build_spec({"name": name, "every": "1m", "command": ["true"]}, 0)


async def test_a_frozen_server_is_down_after_the_deadline_then_works_again(private_pg, monkeypatch):
    monkeypatch.setattr(pgconn, "ANSWER_DEADLINE_S", 1.0)
    monkeypatch.setattr(pgconn, "CONNECT_TIMEOUT_S", 2)
    store = await Store.open(private_pg.url)
    try:
        await store.add_task(_spec("before"), 0)
        with frozen(private_pg.pid):
            started = time.monotonic()
            with pytest.raises(Unavailable) as caught:
                await store.list_tasks()
            assert time.monotonic() - started < 5, "waited for a frozen server"
            assert "did not answer within 1 s" in str(caught.value)
            with pytest.raises(Unavailable):  # a new connection: no answer either
                await store.add_task(_spec("during"), MICROS)
        await store.add_task(_spec("after"), 2 * MICROS)
        assert [t.name for t in await store.list_tasks()] == ["after", "before"]
    finally:
        await store.close()


async def test_a_session_frozen_holding_the_write_lock_is_ended_by_the_server(private_pg):
    """A tickui connection left inside a write transaction with the lock (its process
    frozen) is ended by the server after IDLE_IN_TRANSACTION_MS: another store's write
    goes through then, not never."""
    stuck = await pgconn.open_connection(private_pg.url)
    store = await Store.open(private_pg.url)
    try:
        await stuck.execute("BEGIN")
        await stuck.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
        started = time.monotonic()
        async with asyncio.timeout(30):  # without the server's timeout: never
            await store.add_task(_spec("waited"), 0)
        waited = time.monotonic() - started
        assert waited >= 1, "the write did not wait for the lock"
        assert waited < pgconn.IDLE_IN_TRANSACTION_MS / 1000 + 5, waited
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            await stuck.execute("SELECT 1")  # the server ended it
    finally:
        await store.close()
        with contextlib.suppress(Exception):
            await stuck.close()
