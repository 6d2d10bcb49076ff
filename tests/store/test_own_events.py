"""Reconcile folds the events the SQLite store appended itself without reading them back
(tickui.store.appended), and reads when anything else may have written: another
connection's events are never missed, and what it finds is what the read finds."""

from __future__ import annotations

import asyncio

from helpers import LEASE_OWNER, T0, one_slot_plan, store_holding_lease
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED, RUN_TRANSITION, fold_events
from tickui.store import NewEvent, Store
from tickui.store.appended import OwnEvents

S = MICROS
OWNER = LEASE_OWNER


async def _claimed(path, names):
    """A store holding the lease, with `names` as tasks, each with one run claimed."""
    store, token, tasks = await store_holding_lease(path, names)
    slot = tasks[0].next_run_at
    runs = await store.claim([one_slot_plan(t, slot) for t in tasks], OWNER, token, slot)
    return store, runs


def _served(store) -> list[bool]:
    """Per page read from now on: whether the events came from what the store appended."""
    seen: list[bool] = []
    own = store._own
    events_for = own.events_for

    def spy(*args):
        found = events_for(*args)
        seen.append(found is not None)
        return found

    own.events_for = spy
    return seen


async def _pending(store) -> list[tuple]:
    found, _ = await store.unreconciled(0, 100)
    return [
        (p.id, p.state, p.cursor, [(e.seq, e.type, e.command_id, e.run_id, e.payload) for e in ev])
        for p, ev in found
    ]


async def _as_read(path) -> list[tuple]:
    """What a store that appended nothing finds: the events table read."""
    fresh = await Store.open(path)
    try:
        return await _pending(fresh)
    finally:
        await fresh.close()


def test_a_stores_own_events_are_found_as_the_read_finds_them_without_reading(tmp_path):
    async def main():
        path = tmp_path / "t.db"
        store, (a, b, c, d) = await _claimed(path, "abcd")
        served = _served(store)
        await store.append_events(
            [
                NewEvent(T0, RUN_TRANSITION, a.command_id, "run-a", {"state": "running"}),
                NewEvent(T0, RUN_COMPLETED, None, "run-a", {"exit_code": 0}),  # bound by a's
                NewEvent(T0, RUN_COMPLETED, None, "run-x", {"exit_code": 0}),  # no one's
                NewEvent(T0, RUN_COMPLETED, None, None, {"exit_code": 2}, b.command_id),
                NewEvent(T0, RUN_COMPLETED, "cmd-elsewhere", "run-y", {"exit_code": 0}),
            ]
        )
        await store.append_events([NewEvent(T0, RUN_COMPLETED, d.command_id, "run-d")])
        mine = await _pending(store)
        assert served == [True]
        assert mine == await _as_read(path)
        assert [(i, [e[0] for e in ev]) for i, _, _, ev in mine] == [
            (a.id, [1, 2]),
            (b.id, [4]),
            (d.id, [6]),
        ]
        assert c.id not in [row[0] for row in mine]
        await store.close()

    asyncio.run(main())


def test_events_another_connection_appended_meanwhile_are_read(tmp_path):
    async def main():
        path = tmp_path / "t.db"
        store, (a, b) = await _claimed(path, "ab")
        served = _served(store)
        await store.append_events([NewEvent(T0, RUN_COMPLETED, a.command_id, "run-a")])
        other = await Store.open(path)  # a worker's feed in another process, say
        await other.append_events(
            [NewEvent(T0, RUN_COMPLETED, b.command_id, "run-b", {"exit_code": 3})]
        )
        await other.close()
        mine = await _pending(store)
        assert served == [False]  # read: the events of b are not among the store's own
        assert [(i, [e[1:4] for e in ev]) for i, _, _, ev in mine] == [
            (a.id, [(RUN_COMPLETED, a.command_id, "run-a")]),
            (b.id, [(RUN_COMPLETED, b.command_id, "run-b")]),
        ]
        assert mine == await _as_read(path)
        # and from then on, until a claim starts over: read, never taken from memory
        await store.append_events([NewEvent(T0, RUN_TRANSITION, a.command_id, "run-a2")])
        assert await _pending(store) == await _as_read(path)
        assert served == [False]
        await store.close()

    asyncio.run(main())


def test_an_event_naming_a_command_before_its_run_was_claimed_is_read(tmp_path):
    async def main():
        path = tmp_path / "t.db"
        store = await Store.open(path)
        # appended by another connection before the run that gets this command is claimed
        early = await Store.open(path)
        await early.append_events([NewEvent(T0, RUN_COMPLETED, "cmd-2", None, {"exit_code": 4})])
        await early.close()
        await store.close()
        store, (a, b) = await _claimed(path, "ab")
        assert b.command_id == "cmd-2"
        served = _served(store)
        await store.append_events([NewEvent(T0, RUN_COMPLETED, a.command_id, "run-a")])
        mine = await _pending(store)
        assert served == []  # its claim found the event naming b's command: nothing held
        assert [(i, [e[0] for e in ev]) for i, _, _, ev in mine] == [(a.id, [2]), (b.id, [1])]
        assert mine == await _as_read(path)
        await store.close()

    asyncio.run(main())


def test_settled_runs_let_the_held_events_go(tmp_path):
    async def main():
        path = tmp_path / "t.db"
        store, (a,) = await _claimed(path, "a")
        await store.mark_accepted([(a.id, None, None)], T0)
        await store.append_events([NewEvent(T0, RUN_COMPLETED, a.command_id, "run-a")])
        assert store._own.start is not None
        [(progress, events)], _ = await store.unreconciled(0, 10)
        await store.apply_changes([fold_events(progress, events)])
        assert store._own.start is None  # nothing held once no claimed run is left
        assert (await store.get_occurrence(a.id)).state == "succeeded"
        await store.close()

    asyncio.run(main())


def test_a_read_made_before_the_stores_last_append_is_answered_as_of_that_read():
    own = OwnEvents()
    own.claimed([(1, "cmd-1"), (2, "cmd-2")], 10, 7)
    row = (T0, "cmd-1", "run-1", RUN_COMPLETED, "{}", None, None)
    own.appended(11, [row], [{}])
    own.appended(12, [(T0, "cmd-2", "run-2", RUN_COMPLETED, "{}", None, None)], [{}])
    page = [(1, "accepted", "cmd-1", None, 0), (2, "accepted", "cmd-2", None, 0)]
    # the read saw seq 11 only (one event after 10): run 2's event is not in it yet
    found = own.events_for(page, 1, 11, 7)
    assert [[e.seq for e in events] for events in found] == [[11], []]
    assert own.events_for(page, 2, 12, 7) is not None
    assert own.events_for(page, 2, 12, 8) is None  # another connection committed
    assert own.start is None  # and nothing is held from then on
