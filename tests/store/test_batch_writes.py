"""Batch writes of many rows (a claim's page, a settlement, acceptances, events) keep the
rows, counts and conflicts of one statement a row, on each store: PostgreSQL writes such a
batch as one statement (tickui.store.pgbulk), SQLite a row at a time."""

from __future__ import annotations

import asyncio

from helpers import LEASE_OWNER, T0, one_slot_plan, store_holding_lease
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED, Change
from tickui.store import NewEvent, Store, claims
from tickui.store.pgbulk import set_based

S = MICROS
OWNER = LEASE_OWNER


def test_a_batch_claim_takes_every_fresh_plan_and_leaves_out_stale_ones_and_taken_slots(
    store_target,
):
    async def main():
        store, token, (a, b, c, d) = await store_holding_lease(store_target, "abcd")
        slot = a.next_run_at
        claimed = await store.claim([one_slot_plan(t, slot) for t in (a, b)], OWNER, token, slot)
        assert [(o.task, o.state, o.command_id) for o in claimed] == [
            ("a", "claimed", f"cmd-{claimed[0].id}"),
            ("b", "claimed", f"cmd-{claimed[1].id}"),
        ]
        assert claimed[1].id == claimed[0].id + 1
        # a's plan again is stale (its task moved on): the rest of the batch is claimed
        again = await store.claim([one_slot_plan(t, slot) for t in (a, c, d)], OWNER, token, slot)
        assert [o.task for o in again] == ["c", "d"]
        stored = await store.occurrences_by_id([o.id for o in claimed + again])
        assert [(o.task, o.scheduled_for, o.lease_token) for o in stored] == [
            (name, slot, token) for name in "abcd"
        ]
        assert (await store.get_task("c")).next_run_at == slot + 60 * S
        await store.close()

    asyncio.run(main())


def test_a_batch_settlement_changes_only_the_active_runs_it_names(store_target):
    async def main():
        store, token, tasks = await store_holding_lease(store_target, "abc")
        slot = tasks[0].next_run_at
        claimed = await store.claim([one_slot_plan(t, slot) for t in tasks], OWNER, token, slot)
        ids = [o.id for o in claimed]
        await store.mark_accepted([(i, None, f"/log/{i}") for i in ids], slot)
        await store.fail_occurrences([(ids[2], "LOST", "gone")], slot)
        done = {"exit_code": 0, "finished_at": slot + S}
        await store.apply_changes([Change(i, 5, "succeeded", dict(done)) for i in ids])
        got = await store.occurrences_by_id(ids)
        assert [(o.state, o.exit_code, o.event_cursor, o.log_path) for o in got] == [
            ("succeeded", 0, 5, f"/log/{ids[0]}"),
            ("succeeded", 0, 5, f"/log/{ids[1]}"),
            ("failed", None, 0, f"/log/{ids[2]}"),  # terminal: left as it was
        ]
        assert all(o.command_id == f"cmd-{o.id}" for o in got)
        await store.close()

    asyncio.run(main())


def test_a_batch_of_events_stores_each_event_id_once(store_target):
    async def main():
        store = await Store.open(store_target)
        first = [NewEvent(T0, RUN_COMPLETED, "cmd-1", "run-1", {"exit_code": 0}, event_id="e1")]
        assert await store.append_events(first) == 1
        batch = [
            NewEvent(T0 + n, RUN_COMPLETED, f"cmd-{n}", f"run-{n}", {"exit_code": n}, event_id=e)
            for n, e in enumerate(["e1", "e2", "e2", None, "e3"], start=2)
        ]
        assert await store.append_events(batch) == 3
        pending = await store._all("SELECT seq, command_id, event_id FROM events ORDER BY seq")
        assert [(row[1], row[2]) for row in pending] == [
            ("cmd-1", "e1"), ("cmd-3", "e2"), ("cmd-5", None), ("cmd-6", "e3")
        ]  # fmt: skip
        await store.close()

    asyncio.run(main())


def test_the_hot_batch_statements_have_a_set_based_form():
    """Should one of them change shape beyond what pgbulk reads, PostgreSQL would fall back
    to a statement a row: correct, and several times slower."""
    statements = [
        claims._ADVANCE_TASK,
        claims._INSERT_OCC,
        "INSERT OR IGNORE INTO events (at, command_id, run_id, type, payload, causation_id,"
        " event_id) VALUES (?,?,?,?,?,?,?)",
        "UPDATE occurrences SET state = coalesce(?, state), event_cursor = ?, exit_code = ?"
        " WHERE id = ? AND state IN ('claimed', 'accepted', 'running')",
    ]
    forms = [set_based(sql) for sql in statements]
    assert all(form is not None for form in forms)
    assert forms[0].params([(1, 2, 3, 4, 5), (1, 2, 3, 4, 6)]) is None  # task 3 twice
    assert forms[0].params([(1, None, 3, 4, 5), (True, 2, 4, 4, 5)]) is None  # a bool
    assert set_based("DELETE FROM events WHERE command_id = ?") is None
    # a value in a subquery is not the row's own: a statement a row
    inner = (
        "UPDATE tasks SET note = ? WHERE id = ? AND EXISTS (SELECT 1"
        " FROM occurrences o WHERE o.task_id = tasks.id AND id = ?)"
    )
    assert set_based(inner) is None
