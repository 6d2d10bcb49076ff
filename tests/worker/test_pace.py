"""How long a worker's fetches wait (tickui/worker/pace.py), when the engine tells workers the
next run is due (tickui/dispatch/kafka_due.py), the messages that carry it and the store's
next due instant. Pure, but for the store (a real file, and PostgreSQL)."""

from __future__ import annotations

import pytest

from helpers import T0
from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import messages as m
from tickui.dispatch.kafka_due import HORIZON_US, REPEAT_US, DueNotices, due_partitions
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.worker.pace import AFTER_US, WINDOW_US, Pace

MS = 1000


def test_at_rest_slow_fast_from_the_lead_before_an_announced_due_until_its_window_ends():
    pace = Pace(250)
    assert pace.lead >= 2 * 250 * MS  # the slow fetch in flight ends before the due instant
    assert not pace.fast(T0, running=False)
    due = T0 + 30 * MICROS
    assert pace.announced(due, T0)
    assert pace.waiting_for(T0) == due
    assert not pace.fast(due - pace.lead - 1, running=False)
    assert pace.next_change(T0) == due - pace.lead  # the worker wakes then by itself
    assert pace.fast(due - pace.lead, running=False)
    assert pace.fast(due + WINDOW_US - 1, running=False)  # its command has not come yet
    assert not pace.fast(due + WINDOW_US, running=False)  # missed: back at rest
    assert pace.waiting_for(due + WINDOW_US) == 0


def test_the_command_ends_the_wait_and_runs_keep_it_fast_until_a_little_after():
    pace = Pace(250)
    due = T0 + 10 * MICROS
    later = T0 + 40 * MICROS
    pace.announced(due, T0)
    pace.announced(later, T0)
    came = due + 50 * MS
    pace.command_came(came)
    assert pace.waiting_for(came) == later  # the one met is gone, the next is kept
    assert pace.fast(came + 10 * MICROS, running=True)
    ended = came + 10 * MICROS
    pace.run_ended(ended)
    assert pace.fast(ended + AFTER_US - 1, running=False)
    assert not pace.fast(ended + AFTER_US, running=False)
    assert pace.fast(later - pace.lead, running=False)


def test_past_and_far_instants_are_not_kept_and_a_slow_setting_never_goes_below_fast():
    pace = Pace(250)
    assert not pace.announced(T0 - WINDOW_US, T0)
    assert not pace.announced(T0 + 3600 * MICROS, T0)
    assert pace.waiting_for(T0) == 0
    assert not pace.fast(T0, running=False)
    for k in range(100):  # a flood keeps only the nearest few
        pace.announced(T0 + (k + 1) * MICROS, T0)
    assert len(pace._due) <= 16 and pace.waiting_for(T0) == T0 + MICROS
    assert Pace(1).idle_ms == 10 and Pace(1).control_ms >= 100


def test_the_engine_tells_the_next_due_when_it_changes_and_again_now_and_then():
    notices = DueNotices()
    assert notices.time_to_look(T0)
    due = T0 + 20 * MICROS
    assert notices.to_say(T0, due) == due
    assert not notices.time_to_look(T0 + MICROS - 1)
    assert notices.time_to_look(T0 + MICROS)
    assert notices.to_say(T0 + MICROS, due) is None  # said already
    assert notices.to_say(T0 + REPEAT_US, due) == due  # again, for workers started since
    sooner = T0 + REPEAT_US + 2 * MICROS
    assert notices.to_say(T0 + REPEAT_US + MICROS, sooner) == sooner  # changed: at once
    now = T0 + 100 * MICROS
    assert notices.to_say(now, None) is None  # nothing due
    assert notices.to_say(now, now) is None  # due now: the scan sends the command itself
    assert notices.to_say(now, now + HORIZON_US + 1) is None  # too far: said later


def test_due_controls_and_heartbeats_carry_the_instant_and_old_ones_still_decode():
    control = m.Control.next_due(T0 + 5 * MICROS, T0)
    again = m.Control.decode(control.encode())
    assert (again.type, again.due, again.worker, again.command_id) == ("due", T0 + 5 * MICROS,
                                                                       None, "")  # fmt: skip
    with pytest.raises(m.BadMessage):
        m.Control.decode(b'{"type": "due", "at": null}')  # a due control without its instant
    cancel = m.Control("cancel", "cmd-1", None, "x", T0)
    assert m.Control.decode(cancel.encode()) == cancel
    assert "due" not in cancel.to_json()
    beat = m.Heartbeat("w", "h", 4, (), "1", T0, due=T0 + MICROS)
    assert m.Heartbeat.decode(beat.encode()).due == T0 + MICROS
    old = beat.to_json()
    del old["due"]
    assert m.Heartbeat.decode(m.encode(old)).due == 0


async def test_the_store_says_the_next_due_instant_of_tasks_and_queued_runs(store_target):
    store = await Store.open(store_target)
    try:
        assert await store.next_due() is None
        at = T0 + 3600 * MICROS
        spec = build_spec({"name": "later", "at": iso(at), "command": ["true"]}, T0)
        task = await store.add_task(spec, T0)
        assert await store.next_due() == task.next_run_at == at
        every = build_spec({"name": "often", "every": "1m", "command": ["true"]}, T0)
        await store.add_task(every, T0)
        found = await store.next_due()
        assert found is not None and found <= T0 + 60 * MICROS < at
        await store.set_enabled("often", False, T0)
        assert await store.next_due() == task.next_run_at
        # which tasks are due then: the notice names the partitions their commands go to
        assert await store.tasks_due_at(at, 10) == ["later"]
        also = build_spec({"name": "also", "at": iso(at), "command": ["true"]}, T0)
        await store.add_task(also, T0)
        assert sorted(await store.tasks_due_at(at, 10)) == ["also", "later"]
        assert len(await store.tasks_due_at(at, 1)) == 1
        assert await store.tasks_due_at(at + 1, 10) == []
        slot = T0 - 3600 * MICROS  # a queued run (a backfill's) is due at its slot
        await store.queue_backfill("later", [slot], T0)
        assert await store.next_due() == slot
        assert await store.tasks_due_at(slot, 10) == ["later"]
    finally:
        await store.close()


def test_a_notice_naming_partitions_quickens_only_a_worker_holding_one():
    pace = Pace(250)
    due = T0 + 30 * MICROS
    pace.owned = frozenset({0, 1, 2})
    assert pace.announced(due, T0, (5,))
    assert not pace.fast(due - pace.lead, running=False)  # not its partition: at rest
    assert pace.waiting_for(T0) == 0 and pace.next_change(T0) is None
    pace.owned = frozenset({5, 6})  # a rebalance gave it the partition
    assert pace.fast(due - pace.lead, running=False)
    assert pace.waiting_for(T0) == due and pace.next_change(T0) == due - pace.lead
    pace.owned = frozenset({0})
    assert pace.announced(due, T0)  # told again, for every partition: the newest word counts
    assert pace.fast(due - pace.lead, running=False)
    later = due + 10 * MICROS
    pace.announced(later, T0, (3, 0))
    assert pace.waiting_for(due + WINDOW_US) == later  # one of its partitions is among them


def test_the_engine_names_the_partitions_of_the_tasks_due_or_none_when_unsure():
    assert due_partitions([3, 1, 3], True) == (1, 3)
    assert due_partitions([3, None], True) == ()  # a partition not known yet: every worker
    assert due_partitions([3, 1], False) == ()  # more tasks due than were named
    assert due_partitions([], True) == ()
    notices = DueNotices()
    due = T0 + 20 * MICROS
    assert notices.to_say(T0, due, (2,)) == due
    assert notices.to_say(T0 + MICROS, due, (2,)) is None  # said already
    assert notices.to_say(T0 + 2 * MICROS, due, (2, 7)) == due  # a task added: said again
    assert DueNotices.near(T0, due) and not DueNotices.near(due, due)


def test_due_controls_carry_their_partitions_and_refuse_bad_ones():
    control = m.Control.next_due(T0 + 5 * MICROS, T0, (4, 9))
    assert m.Control.decode(control.encode()).partitions == (4, 9)
    assert "partitions" not in m.Control.next_due(T0 + 5 * MICROS, T0).to_json()
    said = control.to_json()
    for bad in ("4", [True], [-1], ["4"], list(range(2000))):
        said["partitions"] = bad
        with pytest.raises(m.BadMessage):
            m.Control.decode(m.encode(said))
