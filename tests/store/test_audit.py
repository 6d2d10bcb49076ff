"""The operator audit in the store, on both stores: each change a person makes is written
with its entry in one transaction (a refused change leaves neither), the newest entries are
kept, and a database of the previous schema migrates with its data."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from helpers import T0
from tickui.common.errors import BadInput, NotFound
from tickui.model.audit import Actor
from tickui.model.retries import pause_note
from tickui.model.spec import build_spec
from tickui.store import Store, pgschema, schema
from tickui.store import audit as audit_store

ALICE = Actor("alice", "laptop-1", "cli", 4242)
BOB = Actor("bob", "desk-2", "dashboard", 77)


def spec(name: str = "job", **fields):
    fields.setdefault("every", "10s")
    fields.setdefault("command", ["true"])
    return build_spec({"name": name, **fields}, T0)


def said(entries):
    return [(e.action, e.task, e.user, e.host, e.origin, e.detail) for e in reversed(entries)]


async def test_each_change_names_who_made_it(store_target):
    store = await Store.open(store_target)
    try:
        await store.add_task(spec(), T0, actor=ALICE)
        await store.add_task(spec("quiet"), T0)  # no actor (a config sync, the demo): none
        await store.set_enabled("job", False, T0 + 1, note="db migration", actor=BOB)
        await store.set_enabled("job", True, T0 + 2, actor=ALICE)
        task = await store.get_task("job")
        request = await store.add_request(task, "run_now", T0 + 3, actor=BOB)
        await store.finish_request(request, T0 + 4, "started", 99, None)
        await store.edit_task("job", spec("job", every="20s", timeout="5s"), T0 + 5, actor=ALICE)
        slots = [T0 - 40_000_000, T0 - 20_000_000]
        assert len((await store.queue_backfill("job", slots, T0 + 6, actor=ALICE))[0]) == 2
        assert await store.cancel_backfill("job", T0 + 7, actor=BOB) == 2
        queued = await store.queue_backfill("job", [T0 - 60_000_000], T0 + 8)
        assert await store.cancel_queued_occurrence(queued[0][0], T0 + 9, "x", actor=BOB)
        await store.record_audit(BOB, "cancel", "job", T0 + 10, "running run", 12)
        await store.remove_task("job", T0 + 11, actor=ALICE)
        entries = await store.audit_entries()
        only_job = await store.audit_entries("job", 3)
    finally:
        await store.close()
    assert said(entries) == [
        ("add", "job", "alice", "laptop-1", "cli", "every 10s"),
        ("disable", "job", "bob", "desk-2", "dashboard", "db migration"),
        ("enable", "job", "alice", "laptop-1", "cli", "was: db migration"),
        ("run-now", "job", "bob", "desk-2", "dashboard", f"request {request}: started run 99"),
        ("edit", "job", "alice", "laptop-1", "cli", "changed every, timeout"),
        ("backfill", "job", "alice", "laptop-1", "cli",
         "slots 2027-01-15T07:59:20+00:00 to 2027-01-15T07:59:40+00:00: 2 queued, 0 had a run"),
        ("backfill-cancel", "job", "bob", "desk-2", "dashboard",
         "2 queued backfill run(s) cancelled"),
        ("cancel", "job", "bob", "desk-2", "dashboard", "queued run"),
        ("cancel", "job", "bob", "desk-2", "dashboard", "running run"),
        ("delete", "job", "alice", "laptop-1", "cli", "every 20s"),
    ]  # fmt: skip
    assert [e.at for e in reversed(entries)] == [T0, T0 + 1, T0 + 2, T0 + 3, T0 + 5, T0 + 6,
                                                 T0 + 7, T0 + 9, T0 + 10, T0 + 11]  # fmt: skip
    assert entries[6].occurrence_id == 99 and entries[2].occurrence_id == queued[0][0]
    assert (
        entries[0].pid == 4242 and entries[0].to_json()["at"] == "2027-01-15T08:00:00.000011+00:00"
    )
    assert [e.action for e in only_job] == ["delete", "cancel", "cancel"]


async def test_an_enable_that_ends_a_pause_is_clear_pause(store_target):
    store = await Store.open(store_target)
    try:
        await store.add_task(spec(), T0)
        await store.set_enabled("job", False, T0, note=pause_note(3, "EXIT_NONZERO"))
        await store.set_enabled("job", True, T0 + 1, actor=ALICE)
        (entry,) = await store.audit_entries()
    finally:
        await store.close()
    assert entry.action == "clear-pause"
    assert entry.detail == "was: paused after 3 consecutive failures (last: EXIT_NONZERO)"


async def test_a_refused_change_is_not_recorded(store_target):
    store = await Store.open(store_target)
    try:
        await store.add_task(spec(), T0, actor=ALICE)
        with pytest.raises(BadInput):
            await store.add_task(spec(), T0, actor=ALICE)  # the name is taken
        task = await store.get_task("job")
        await store.edit_task("job", spec(every="30s"), T0 + 1)
        with pytest.raises(BadInput):  # changed meanwhile: a stale generation
            await store.edit_task("job", spec(every="40s"), T0 + 2,
                                  generation=task.generation, actor=ALICE)  # fmt: skip
        await store.set_enabled("job", False, T0 + 3)
        with pytest.raises(BadInput):  # a disabled task is not backfilled
            await store.queue_backfill("job", [T0 - 10_000_000], T0 + 4, actor=ALICE)
        with pytest.raises(NotFound):
            await store.remove_task("nope", T0, actor=ALICE)
        assert not await store.cancel_queued_occurrence(12345, T0, "x", actor=ALICE)
        entries = await store.audit_entries()
    finally:
        await store.close()
    assert [e.action for e in entries] == ["add"]


async def test_the_newest_entries_are_kept(store_target, monkeypatch):
    monkeypatch.setattr(audit_store, "AUDIT_KEPT", 5)
    store = await Store.open(store_target)
    try:
        await store.add_task(spec(), T0)
        for n in range(8):
            await store.set_enabled("job", n % 2 == 1, T0 + n, note=f"n{n}", actor=ALICE)
        entries = await store.audit_entries(limit=100)
    finally:
        await store.close()
    assert [e.at - T0 for e in entries] == [7, 6, 5, 4, 3]


async def test_a_schema_9_file_migrates_and_keeps_its_data(tmp_path):
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    for step in schema.MIGRATIONS[:9]:
        for statement in step:
            conn.execute(statement)
    old = spec("old")
    conn.execute(
        "INSERT INTO tasks (name, spec, definition_hash, created_at, updated_at, anchor,"
        " next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?)",
        ("old", old.to_json(), old.definition_hash(), T0, T0, T0, T0, T0),
    )
    conn.execute("PRAGMA user_version = 9")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.commit()
    conn.close()
    assert schema.VERSION == 10
    reader = await Store.open(db, readonly=True)  # read-only: not migrated, no audit yet
    try:
        assert await reader.audit_entries() == []
    finally:
        await reader.close()
    store = await Store.open(db)
    try:
        assert (await store._one("PRAGMA user_version"))[0] == 10
        assert (await store.get_task("old")).spec == old
        await store.set_enabled("old", False, T0 + 1, note="moved", actor=ALICE)
        (entry,) = await store.audit_entries()
    finally:
        await store.close()
    assert (entry.action, entry.task, entry.detail) == ("disable", "old", "moved")


async def test_a_postgresql_store_of_schema_1_migrates_and_keeps_its_data(pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in pgschema.MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO tickui_meta (key, value) VALUES ('application', 'tickui'), ('schema', '1')"
        )
        old = spec("old")
        conn.execute(
            "INSERT INTO tasks (name, spec, definition_hash, created_at, updated_at, anchor,"
            " next_run_at, due_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
            ("old", old.to_json(), old.definition_hash(), T0, T0, T0, T0, T0),
        )
    assert pgschema.VERSION == 2
    store = await Store.open(pg_url)
    try:
        assert (await store.get_task("old")).spec == old
        await store.set_enabled("old", False, T0 + 1, note="moved", actor=ALICE)
        await store.set_enabled("old", True, T0 + 2, actor=BOB)
        entries = await store.audit_entries()
    finally:
        await store.close()
    assert [(e.id, e.action) for e in entries] == [(2, "enable"), (1, "disable")]
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT value FROM tickui_meta WHERE key = 'schema'").fetchone()
    assert row == ("2",)
