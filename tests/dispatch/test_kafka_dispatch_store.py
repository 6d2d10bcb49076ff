"""Schema 8 and the store's part of Kafka dispatch: the worker of an occurrence, workers
from heartbeats, events deduplicated by id, what a worker said of a run's output."""

from __future__ import annotations

import sqlite3

from helpers import T0
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED, RUN_TRANSITION
from tickui.model.spec import build_spec
from tickui.store import Beat, NewEvent, Store, schema


def _write_v7(path) -> None:
    conn = sqlite3.connect(path)
    for step in schema.MIGRATIONS[:7]:
        for statement in step:
            conn.execute(statement)
    spec = build_spec({"name": "old", "every": "1m", "command": ["true"]}, T0)
    conn.execute(
        "INSERT INTO tasks (name, spec, definition_hash, created_at, updated_at, anchor,"
        " next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?)",
        ("old", spec.to_json(), spec.definition_hash(), T0, T0, T0, T0, T0),
    )
    conn.execute(
        "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
        " command_id, attempt) VALUES (1, 'old', 'scheduled', ?, 'failed', ?, 'cmd-1', 2)",
        (T0, T0),
    )
    conn.execute(
        "INSERT INTO events (at, command_id, type, payload) VALUES (?, 'cmd-1', 'run.failed',"
        " '{\"exit_code\": 3}')",
        (T0,),
    )
    conn.execute("PRAGMA user_version = 7")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.commit()
    conn.close()


async def test_schema_7_file_migrates_to_8_and_keeps_its_data(tmp_path):
    db = tmp_path / "old.db"
    _write_v7(db)
    store = await Store.open(db)
    try:
        assert (await store._one("PRAGMA user_version"))[0] == schema.VERSION
        (occ,) = await store.history("old")
        assert (occ.state, occ.attempt, occ.worker, occ.deadline) == ("failed", 2, None, None)
        assert occ.to_json()["worker"] is None
        assert await store._one("SELECT type, payload, event_id FROM events") == (
            "run.failed",
            '{"exit_code": 3}',
            None,
        )
        assert await store.list_workers() == []
        assert await store.remote_output(occ.id) is None
    finally:
        await store.close()


async def test_events_with_the_same_id_are_stored_once(store_target, tmp_path):
    store = await Store.open(store_target)
    try:
        event = NewEvent(T0, RUN_COMPLETED, "cmd-9", "r1", {"exit_code": 0}, event_id="e1")
        assert await store.append_events([event, event]) == 1
        assert await store.append_events([event]) == 0
        # events with no id (a local run's) are never deduplicated
        plain = NewEvent(T0, RUN_COMPLETED, "cmd-9", "r1", {"exit_code": 0})
        assert await store.append_events([plain, plain]) == 2
        assert (await store._one("SELECT count(*) FROM events"))[0] == 3
    finally:
        await store.close()


async def test_workers_from_heartbeats_lost_and_back(store_target, tmp_path):
    store = await Store.open(store_target)
    try:
        beat = Beat("w1", "hostA", 4, ["cmd-1"], "0.9", "alive", T0, "/logs", "g")
        back = await store.record_heartbeats([beat, Beat("w2", "hostB", 2, [], "0.9", "alive", T0)])
        assert back == []
        (w1, _w2) = await store.list_workers()
        assert (w1.id, w1.host, w1.slots, w1.running, w1.last_seen, w1.state) == (
            "w1",
            "hostA",
            4,
            ["cmd-1"],
            T0,
            "alive",
        )
        assert (w1.version, w1.log_dir, w1.group) == ("0.9", "/logs", "g")
        assert w1.to_json()["last_seen"].startswith("2027-01-15T08:00:00")
        silent = await store.silent_workers(T0 + 10 * MICROS)
        assert [w.id for w in silent] == ["w1", "w2"]
        await store.mark_workers_lost(["w1"], T0 + 11 * MICROS)
        assert [(w.id, w.state) for w in await store.list_workers()] == [
            ("w2", "alive"),
            ("w1", "lost"),
        ]
        again = Beat("w1", "hostA", 4, [], "0.9", "alive", T0 + 12 * MICROS)
        assert await store.record_heartbeats([again]) == ["w1"]
        assert {w.id: w.state for w in await store.list_workers()} == {
            "w1": "alive",
            "w2": "alive",
        }
    finally:
        await store.close()


async def test_remote_output_reads_the_workers_events(store_target, tmp_path):
    store = await Store.open(store_target)
    try:
        await store.add_task(build_spec({"name": "a", "every": "1m", "command": ["x"]}, T0), T0)
        task = await store.get_task("a")
        got = await store.acquire_lease("me", T0, 60 * MICROS, ("h", 1, None), lambda *a: False)
        occ = await store.claim_manual(task, "me", got.lease.token, T0)
        assert await store.remote_output(occ.id) is None
        running = {"state": "running", "worker": "w1", "log_path": "/w/1.log", "pid": 5}
        await store.append_events(
            [NewEvent(T0, RUN_TRANSITION, occ.command_id, "r1", running, event_id="t1")]
        )
        out = await store.remote_output(occ.id)
        assert (out.tail, out.worker, out.log_path) == ("", "w1", "/w/1.log")
        done = {"exit_code": 0, "tail": "hello\n", "worker": "w1"}
        await store.append_events(
            [NewEvent(T0, RUN_COMPLETED, occ.command_id, "r1", done, event_id="t2")]
        )
        out = await store.remote_output(occ.id)
        assert (out.tail, out.worker, out.log_path) == ("hello\n", "w1", "/w/1.log")
    finally:
        await store.close()
