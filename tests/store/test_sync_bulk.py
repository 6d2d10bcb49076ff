"""A config sync of thousands of tasks, written in one transaction, gives exactly the rows
a sync that writes them one task at a time gives."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

from helpers import T0
from tickui.common.timeutil import MICROS
from tickui.model.spec import TaskSpec, build_spec
from tickui.store import Store, default_anchor
from tickui.store.abc import SyncReport
from tickui.store.tasks import QUEUED_CANCEL
from tickui.store.tasksync import next_slot

N = 2000
CRONS = ("*/5 * * * *", "0 * * * *", "0 9 * * 1-5", "@daily", "0 4 L * *", "*/10 * * * * *")
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo")
MINUTE = 60 * MICROS


def _declared(count: int, seed: int = 7, changed: frozenset[int] = frozenset()) -> list[dict]:
    """`count` [[task]] tables: cron (shared and distinct texts, some in a zone, some with
    jitter), intervals (some anchored, some with jitter), one-time runs; those in
    `changed` get another command."""
    rnd = random.Random(seed)
    tables = []
    for i in range(count):
        table: dict = {"name": f"job-{i:05d}", "command": ["echo", str(i)]}
        pick = rnd.random()
        if pick < 0.45:
            shared = rnd.random() < 0.5
            table["cron"] = rnd.choice(CRONS) if shared else f"{i % 60} {i % 24} * * *"
            if rnd.random() < 0.3:
                table["tz"] = rnd.choice(ZONES)
            if rnd.random() < 0.1 and table["cron"] != "*/10 * * * * *":
                table["jitter"] = "2s"
        elif pick < 0.9:
            table["every"] = rnd.choice(("30s", "1m", "5m", "1h"))
            if rnd.random() < 0.2:
                table["jitter"] = "3s"
            if rnd.random() < 0.1:
                table["anchor"] = "2027-01-15T10:00:00Z"
        else:
            table["at"] = rnd.choice(("2020-01-01T00:00:00Z", "2030-06-01T12:00:00Z"))
        if rnd.random() < 0.05:
            table["disabled"] = True
        if i in changed:
            table["command"] = ["echo", f"{i} changed"]
        tables.append(table)
    return tables


def _specs(tables: list[dict]) -> list[TaskSpec]:
    return [build_spec(table, T0, allow_past=True) for table in tables]


def sync_one_by_one(db: Path, specs: list[TaskSpec], now: int) -> SyncReport:
    """The oracle: each task read, compared and written on its own, in one transaction."""
    report = SyncReport()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        rows = conn.execute("SELECT id, name, definition_hash, source, anchor FROM tasks")
        existing = {row[1]: row for row in rows}
        wanted = {spec.name for spec in specs}
        conn.execute("BEGIN IMMEDIATE")
        for spec in specs:
            row = existing.get(spec.name)
            if row is None:
                anchor = default_anchor(spec, now)
                nxt, due = next_slot(spec, anchor, now - 1)
                conn.execute(
                    "INSERT INTO tasks (name, spec, definition_hash, source, enabled,"
                    " created_at, updated_at, anchor, next_run_at, due_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (
                        spec.name,
                        spec.to_json(),
                        spec.definition_hash(),
                        "config",
                        int(spec.enabled),
                        now,
                        now,
                        anchor,
                        nxt,
                        due,
                    ),
                )
                report.added.append(spec.name)
            elif row[2] != spec.definition_hash() or row[3] != "config":
                anchor = spec.anchor if spec.anchor is not None else row[4]
                nxt, due = next_slot(spec, anchor, now)
                conn.execute(
                    "UPDATE tasks SET spec = ?, definition_hash = ?, source = 'config',"
                    " enabled = ?, note = NULL, generation = generation + 1,"
                    " updated_at = ?, anchor = ?, next_run_at = ?, due_at = ?,"
                    " overridden = 0 WHERE id = ?",
                    (
                        spec.to_json(),
                        spec.definition_hash(),
                        int(spec.enabled),
                        now,
                        anchor,
                        nxt,
                        due,
                        row[0],
                    ),
                )
                conn.execute(QUEUED_CANCEL, (now, "task changed", row[0]))
                report.updated.append(spec.name)
        for name, row in existing.items():
            if row[3] == "config" and name not in wanted:
                conn.execute("DELETE FROM tasks WHERE id = ?", (row[0],))
                conn.execute(QUEUED_CANCEL, (now, "task removed", row[0]))
                report.removed.append(name)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return report


def _table(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _tasks(db: Path) -> list[tuple]:
    return _table(db, "SELECT * FROM tasks ORDER BY id")


def _occurrences(db: Path) -> list[tuple]:
    return _table(db, "SELECT * FROM occurrences ORDER BY id")


async def _prepare(db: Path, first: list[TaskSpec] | None, bulk: bool) -> None:
    """The same history on every file: two tasks made by hand, one of which the file will
    declare too, then (with `first`) the file's first sync (`bulk`: through the store,
    else one by one), a hand edit of two config
    tasks and backfill queued for a few tasks."""
    store = await Store.open(db)
    try:
        for name in ("mine", "job-00003"):
            await store.add_task(
                build_spec({"name": name, "every": "1h", "command": ["true"]}, T0), T0
            )
        if first is None:
            return
        if bulk:
            await store.sync_tasks(first, T0)
        else:
            await store.close()
            sync_one_by_one(db, first, T0)
            store = await Store.open(db)
        for name in ("job-00010", "job-00011"):
            task = await store.get_task(name)
            edited = build_spec({"name": name, "every": "7m", "command": ["edited"]}, T0)
            assert task.spec != edited
            await store.edit_task(name, edited, T0 + 1)
        for name in ("mine", "job-00003", "job-00010", "job-00020", "job-00031", "job-01999"):
            ids, _ = await store.queue_backfill(name, [T0 - 2 * MINUTE, T0 - MINUTE], T0 + 2)
            assert len(ids) == 2
    finally:
        await store.close()


async def test_a_new_database_gets_the_rows_a_task_by_task_sync_gives(tmp_path: Path) -> None:
    specs = _specs(_declared(N))
    bulk, oracle = tmp_path / "bulk.db", tmp_path / "oracle.db"
    await _prepare(bulk, None, bulk=True)
    await _prepare(oracle, None, bulk=False)
    store = await Store.open(bulk)
    try:
        report = await store.sync_tasks(specs, T0)
    finally:
        await store.close()
    expected = sync_one_by_one(oracle, specs, T0)
    assert report == expected
    assert len(report.added) == N - 1 and report.updated == ["job-00003"]
    assert report.removed == []
    rows = _tasks(bulk)
    assert rows == _tasks(oracle)
    assert len(rows) == N + 1  # the file's tasks and the one made by hand
    done = _table(bulk, "SELECT count(*) FROM tasks WHERE next_run_at IS NULL")
    assert done[0][0] > 0  # a one-time run already past
    slots = _table(bulk, "SELECT count(DISTINCT due_at) FROM tasks")
    assert slots[0][0] > 100  # the first slots differ from task to task


async def test_a_changed_file_updates_removes_and_cancels_as_one_by_one(tmp_path: Path) -> None:
    changed = frozenset(range(0, N, 10))  # 10 %: job-00010 and job-00020 among them
    first = _specs(_declared(N))
    second = _specs(_declared(N, changed=changed))
    gone = {f"job-{i:05d}" for i in range(5, N, 20)}  # 5 %, job-01999 not among them
    declared = [spec for spec in second if spec.name not in gone and spec.name != "job-01999"]
    bulk, oracle = tmp_path / "bulk.db", tmp_path / "oracle.db"
    await _prepare(bulk, first, bulk=True)
    await _prepare(oracle, first, bulk=False)
    assert _tasks(bulk) == _tasks(oracle)
    assert _occurrences(bulk) == _occurrences(oracle)

    store = await Store.open(bulk)
    try:
        unchanged = await store.sync_tasks(first, T0 + 5)
        report = await store.sync_tasks(declared, T0 + MINUTE)
        tasks = {task.name: task for task in await store.list_tasks(with_stats=False)}
    finally:
        await store.close()
    assert unchanged == SyncReport()  # hand edits stay while the file does not change
    sync_one_by_one(oracle, first, T0 + 5)
    expected = sync_one_by_one(oracle, declared, T0 + MINUTE)
    assert report == expected
    assert _tasks(bulk) == _tasks(oracle)
    assert _occurrences(bulk) == _occurrences(oracle)

    # job-00010's file definition changed: replaced, its hand edit gone; job-00011's did
    # not: still the hand edit, still marked
    assert len(report.updated) == len(changed - gone) and "job-00010" in report.updated
    assert sorted(report.removed) == sorted(gone | {"job-01999"})
    assert tasks["job-00010"].spec.command == ["echo", "10 changed"]
    assert not tasks["job-00010"].overridden
    assert tasks["job-00011"].overridden and tasks["job-00011"].spec.command == ["edited"]
    assert "mine" in tasks and tasks["mine"].source == "cli"  # made by hand, kept
    assert tasks["job-00003"].source == "config"
    assert not gone & tasks.keys()
    cancelled = {
        (task, detail)
        for task, state, detail in _table(
            bulk, "SELECT task, state, detail FROM occurrences WHERE kind = 'backfill'"
        )
        if state == "cancelled"
    }
    assert cancelled == {
        ("job-00010", "task changed"),
        ("job-00020", "task changed"),
        ("job-01999", "task removed"),
    }
    queued = _table(bulk, "SELECT DISTINCT task FROM occurrences WHERE state = 'queued'")
    assert sorted(queued) == [("job-00003",), ("job-00031",), ("mine",)]
