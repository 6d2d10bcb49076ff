"""How long a worker's fetches wait (tickui/worker/pace.py), when the engine tells workers the
next run is due (tickui/dispatch/kafka_due.py), the messages that carry it and the store's
next due instant. Pure, but for the store (a real file, and PostgreSQL)."""

from __future__ import annotations

import pytest

from helpers import T0
from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import messages as m
from tickui.dispatch.kafka_due import HORIZON_US, REPEAT_US, DueNotices
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
    finally:
        await store.close()
