"""The SQLite file itself: creation, checks before writing, migrations, config sync."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
import threading

import pytest

from helpers import T0, write_schema_1_file
from tickui.common.errors import StoreError
from tickui.model.spec import build_spec
from tickui.store import Store, schema


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_new_file_is_private_wal_and_versioned(tmp_path):
    db = tmp_path / "sub" / "t.db"
    store = await Store.open(db)
    try:
        assert stat.S_IMODE(db.stat().st_mode) == 0o600
        assert (await store._one("PRAGMA journal_mode"))[0] == "wal"
        assert (await store._one("PRAGMA busy_timeout"))[0] >= 1000
        assert (await store._one("PRAGMA user_version"))[0] == schema.VERSION
        assert (await store._one("PRAGMA application_id"))[0] == schema.APPLICATION_ID
    finally:
        await store.close()


async def test_stats_for_a_few_tasks_use_an_index_not_a_scan(tmp_path):
    """The dashboard asks for one task's stats per change; with 100k occurrences a scan
    costs what exists, not what changed."""
    store = await Store.open(tmp_path / "t.db")
    try:
        plan = await store._all(
            "EXPLAIN QUERY PLAN SELECT task_id, max(id) FROM occurrences"
            " WHERE task_id IN (?, ?) GROUP BY task_id",
            [1, 2],
        )
        details = " | ".join(row[-1] for row in plan)
        assert "occurrences_task_id" in details and "SCAN" not in details, details
    finally:
        await store.close()


async def test_times_are_stored_as_integers(tmp_path):
    store = await Store.open(tmp_path / "t.db")
    try:
        spec = build_spec({"name": "a", "every": "1s", "command": ["true"]}, T0)
        await store.add_task(spec, T0)
        kinds = await store._one("SELECT typeof(created_at), typeof(next_run_at) FROM tasks")
        assert kinds == ("integer", "integer")
    finally:
        await store.close()


async def test_an_older_file_is_migrated_and_keeps_its_data(tmp_path):
    db = tmp_path / "old.db"
    write_schema_1_file(db)
    store = await Store.open(db)
    try:
        assert (await store._one("PRAGMA user_version"))[0] == schema.VERSION
        assert [t.name for t in await store.list_tasks()] == ["old"]
        history = await store.history("old")
        assert len(history) == 1 and history[0].state == "succeeded"
        assert history[0].log_path is None
        assert await store.pending_requests() == []
        # schema 7 rebuilt occurrences: the old row is attempt 1 of its slot
        row = await store._one("SELECT id, kind, attempt, retry_of, retry_at FROM occurrences")
        assert row == (history[0].id, "scheduled", 1, None, None)
    finally:
        await store.close()


def _newer(path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE tasks (id INTEGER PRIMARY KEY)")
    conn.execute(f"PRAGMA user_version = {schema.VERSION + 5}")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.commit()
    conn.close()


def _foreign(path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, amount REAL)")
    conn.execute("INSERT INTO invoices VALUES (1, 9.5)")
    conn.commit()
    conn.close()


def _garbage(path) -> None:
    path.write_bytes(b"this is not a database\n" * 100)


def _damaged(path) -> None:
    write_schema_1_file(path)
    data = bytearray(path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_newer, "newer"),
        (_foreign, "another program"),
        (_garbage, "not a SQLite file"),
        (_damaged, ""),
    ],
)
async def test_bad_files_are_refused_and_left_untouched(tmp_path, make, words):
    db = tmp_path / "x.db"
    make(db)
    before = _digest(db)
    with pytest.raises(StoreError) as caught:
        await Store.open(db)
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
    assert _digest(db) == before
    assert not (tmp_path / "x.db-wal").exists()


async def test_sync_adds_updates_removes_and_keeps_runtime_enable(tmp_path):
    store = await Store.open(tmp_path / "t.db")
    try:
        a = build_spec({"name": "a", "every": "1m", "command": ["true"]}, T0)
        b = build_spec({"name": "b", "cron": "0 * * * *", "command": ["true"]}, T0)
        report = await store.sync_tasks([a, b], T0)
        assert sorted(report.added) == ["a", "b"]
        cli = build_spec({"name": "mine", "every": "1h", "command": ["true"]}, T0)
        await store.add_task(cli, T0)
        await store.set_enabled("a", False, T0, note="paused")
        report = await store.sync_tasks([a, b], T0 + 1)
        assert report.added == report.updated == report.removed == []
        assert (await store.get_task("a")).enabled is False  # survives a restart
        changed = build_spec({"name": "a", "every": "2m", "command": ["true"]}, T0)
        report = await store.sync_tasks([changed, b], T0 + 2)
        task = await store.get_task("a")
        assert report.updated == ["a"]
        assert task.enabled is True and task.generation == 2
        assert task.spec.schedule_text() == "every 2m"
        report = await store.sync_tasks([changed], T0 + 3)
        assert report.removed == ["b"]
        assert {t.name for t in await store.list_tasks()} == {"a", "mine"}
    finally:
        await store.close()


async def test_interval_anchor_survives_restarts(tmp_path):
    db = tmp_path / "t.db"
    store = await Store.open(db)
    spec = build_spec({"name": "a", "every": "7s", "command": ["true"]}, T0 + 300_000)
    await store.add_task(spec, T0 + 300_000)
    await store.close()
    store = await Store.open(db)
    try:
        task = await store.get_task("a")
        assert task.anchor == T0 + 1_000_000  # creation rounded up to a whole second
        later = task.schedule.next_after(T0 + 10**9)
        assert (later - task.anchor) % 7_000_000 == 0
    finally:
        await store.close()


async def test_opening_a_current_file_for_writing_writes_nothing(tmp_path):
    """A change refused after the open (a rename to a taken name) must leave the file's
    bytes as they were: the open itself commits nothing on a current file (setting its
    schema version again moved the header's change counter)."""
    db = tmp_path / "t.db"
    store = await Store.open(db)
    await store.add_task(build_spec({"name": "a", "every": "1m", "command": ["true"]}, T0), T0)
    await store.close()
    files = [db, db.with_name("t.db-wal")]
    before = [p.read_bytes() if p.exists() else None for p in files]
    store = await Store.open(db)
    await store.close()
    after = [p.read_bytes() if p.exists() else None for p in files]
    assert after == before


async def test_a_locked_database_is_waited_for_5_seconds_by_writers_and_readers(tmp_path):
    """README: a database is locked (exit 1) only when another writer held it over 5 s:
    both the writing and the read-only connection wait 5000 ms, and a writer held for a
    second and a half is waited out rather than failed."""
    db = tmp_path / "t.db"
    store = await Store.open(db)
    try:
        await store.add_task(build_spec({"name": "a", "every": "1m", "command": ["true"]}, T0), T0)
        assert (await store._one("PRAGMA busy_timeout"))[0] == 5000
        reader = await Store.open(db, readonly=True)
        try:
            assert (await reader._one("PRAGMA busy_timeout"))[0] == 5000
        finally:
            await reader.close()
        holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        released = threading.Timer(1.5, holder.execute, ("ROLLBACK",))
        released.start()
        try:
            await store.set_enabled("a", False, T0)  # waits the 1.5 s out, then writes
        finally:
            released.join()
            holder.close()
        assert not (await store.get_task("a")).enabled
    finally:
        await store.close()
