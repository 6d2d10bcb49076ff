"""Retries (issue 12.1) and the queued-occurrence core they share with buffer_one and
backfill: the schedule's pure logic, and the engine on real SQLite with real processes
steered by a manual clock."""

from __future__ import annotations

import pytest

from helpers import T0, rig
from tickui import retries
from tickui.errors import BadInput
from tickui.queueing import plan_queued
from tickui.spec import build_spec
from tickui.store import LeaseLost
from tickui.store.queue import Queued
from tickui.timeutil import MICROS, iso

S = MICROS


# ---- the schedule: pure -----------------------------------------------------------------


def test_delays_double_up_to_the_cap_with_a_stable_jitter_of_at_most_ten_percent():
    base, cap = 10 * S, 100 * S
    for first in (1, 7, 12345):
        got = [retries.delay(n, base, cap, first) for n in range(1, 8)]
        raw = [10, 20, 40, 80, 100, 100, 100]
        for delay, whole in zip(got, raw, strict=True):
            assert 0.9 * whole * S <= delay <= whole * S
        assert got == [retries.delay(n, base, cap, first) for n in range(1, 8)]  # stable
    spread = {retries.delay(1, base, cap, first) for first in range(200)}
    assert len(spread) > 150, "the jitter does not depend on the occurrence"
    assert min(spread) < 9.2 * S and max(spread) > 9.8 * S  # it uses the whole 10%


def test_a_huge_attempt_number_stays_at_the_cap():
    assert 0.9 * 3600 * S <= retries.delay(100, 10 * S, 3600 * S, 1) <= 3600 * S


def test_only_failures_for_a_named_reason_are_retried():
    on = retries.DEFAULT_ON
    assert retries.retryable("failed", "EXIT_NONZERO", on)
    assert retries.retryable("failed", "KILLED", on)
    assert retries.retryable("failed", "TIMEOUT", on)
    assert retries.retryable("failed", "INTERRUPTED", on)
    assert not retries.retryable("failed", "DISPATCH_FAILED", on)
    assert retries.retryable("failed", "DISPATCH_FAILED", ("dispatch",))
    assert not retries.retryable("failed", "TIMEOUT", ("exit",))
    for state in ("cancelled", "skipped", "succeeded"):
        assert not retries.retryable(state, "EXIT_NONZERO", retries.REASONS)


def test_next_retry_until_the_attempts_run_out():
    policy = retries.Policy(retries=2, delay=10 * S)
    first = retries.next_retry(policy, "failed", "EXIT_NONZERO", 1, 5, T0)
    second = retries.next_retry(policy, "failed", "EXIT_NONZERO", 2, 5, T0)
    assert first is not None and 9 * S <= first - T0 <= 10 * S
    assert second is not None and 18 * S <= second - T0 <= 20 * S
    assert retries.next_retry(policy, "failed", "EXIT_NONZERO", 3, 5, T0) is None
    assert retries.next_retry(policy, "cancelled", None, 1, 5, T0) is None


def test_texts():
    assert retries.attempt_text(2, 3) == "attempt 2/4"
    assert retries.attempt_text(1, 0) == ""
    assert retries.wait_text(T0 + 40 * S, T0) == "next in 40s"
    assert retries.wait_text(T0 + 39_500_000, T0) == "next in 40s"
    assert retries.wait_text(T0, T0) == "due"


# ---- the spec -------------------------------------------------------------------------


def _spec(**fields):
    return build_spec({"name": "t", "every": "1m", "command": ["true"], **fields}, T0)


def test_spec_defaults_and_values():
    spec = _spec()
    assert (spec.retries, spec.retry_delay, spec.retry_max_delay) == (0, 10 * S, 3600 * S)
    assert spec.retry_on == ("exit", "timeout", "interrupted") and spec.pause_after is None
    spec = _spec(retries="3", retry_delay="2s", retry_max_delay="1m", retry_on="dispatch,exit")
    assert (spec.retries, spec.retry_delay, spec.retry_max_delay) == (3, 2 * S, 60 * S)
    assert spec.retry_on == ("exit", "dispatch")
    assert _spec(retry_on=["timeout"], pause_after=3).pause_after == 3
    assert _spec(retry_delay="2h").retry_max_delay == 7200 * S  # the max follows a long delay


def test_a_definition_without_the_new_fields_keeps_its_hash():
    """Tasks stored before retries existed hash the same, so a sync does not see them all
    as changed (which would bump every generation)."""
    import hashlib
    import json
    from dataclasses import asdict

    spec = _spec()
    data = asdict(spec)
    for key in ("enabled", *retries_keys()):
        data.pop(key)
    old = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert spec.definition_hash() == old
    assert _spec(retries=1).definition_hash() != old


def retries_keys():
    return ("retries", "retry_delay", "retry_max_delay", "retry_on", "pause_after")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("retries", "-1"),
        ("retries", "101"),
        ("retries", "3.5"),
        ("retries", "nan"),
        ("retries", True),
        ("retry_delay", "0s"),
        ("retry_delay", "50ms"),
        ("retry_delay", "8d"),
        ("retry_delay", "soon"),
        ("retry_max_delay", "8d"),
        ("retry_on", "exit,bogus"),
        ("retry_on", ""),
        ("retry_on", []),
        ("retry_on", 3),
        ("pause_after", "0"),
        ("pause_after", "1001"),
        ("pause_after", "x"),
    ],
)
def test_bad_values_name_their_field(field, value):
    with pytest.raises(BadInput) as caught:
        _spec(**{field: value})
    assert caught.value.field == field


def test_a_max_delay_under_the_delay_is_refused():
    with pytest.raises(BadInput) as caught:
        _spec(retry_delay="1m", retry_max_delay="10s")
    assert caught.value.field == "retry_max_delay"


# ---- the queued-occurrence core --------------------------------------------------------


async def _queue(r, name: str, *slots: int, kind: str = "scheduled", **fields) -> list[int]:
    task = await r.store.get_task(name)
    items = [Queued(task.id, name, kind, slot, task.generation, **fields) for slot in slots]
    return await r.store.queue_occurrences(items, r.clock.now())


async def test_queued_rows_start_oldest_first_one_at_a_time_under_forbid(tmp_path):
    out = tmp_path / "out.txt"
    cmd = ["sh", "-c", f"echo $TICKUI_SCHEDULED_FOR >> {out}"]
    async with rig(tmp_path / "t.db") as r:
        await r.add("q", every="1h", command=cmd, anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        ids = await _queue(r, "q", T0 - 2 * S, T0 - 3 * S, T0 - S, kind="backfill")
        assert len(ids) == 3
        assert await _queue(r, "q", T0 - S, kind="backfill") == []  # a slot is queued once
        for _ in range(3):
            await r.tick(0.1)
            assert len(await r.store.active_occurrences()) == 1  # one at a time
            await r.settle()
        runs = await r.history("q")
        assert [(o.scheduled_for, o.state) for o in runs] == [
            (T0 - 2 * S, "succeeded"),
            (T0 - 3 * S, "succeeded"),
            (T0 - S, "succeeded"),
        ]
        starts = sorted(runs, key=lambda o: o.started_at)
        assert [o.scheduled_for for o in starts] == [T0 - 3 * S, T0 - 2 * S, T0 - S]
        assert out.read_text().split() == [iso(T0 - k * S) for k in (3, 2, 1)]


async def test_queued_rows_start_together_under_allow(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("q", every="1h", command=["sleep", "0.3"], concurrency="allow")
        await r.engine.start()
        await r.settle()
        await _queue(r, "q", T0 - 2 * S, T0 - S, kind="backfill")
        await r.tick(0.1)
        states = [o.state for o in await r.history("q") if o.kind == "backfill"]
        assert states and all(s in ("claimed", "accepted", "running") for s in states), states
        await r.settle()


async def test_a_queued_row_waits_for_its_time_and_is_skipped_past_the_grace(tmp_path):
    async with rig(tmp_path / "t.db", misfire_grace=5 * S) as r:
        await r.add("q", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        soon, late = await _queue(r, "q", T0 - 60 * S, T0 - 50 * S, retry_at=T0 + 10 * S)
        await r.tick(5)
        assert {o.id: o.state for o in await r.history("q")} == {soon: "queued", late: "queued"}
        r.clock.advance(20)  # both are 15 s past their retry_at: missed
        await r.tick()
        rows = {o.id: o for o in await r.history("q")}
        assert rows[soon].state == rows[late].state == "skipped"
        assert rows[soon].detail.startswith("misfire_skipped: queued run due 15s ago")


async def test_queued_rows_are_cancelled_when_their_task_is_disabled_or_removed(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("a", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.add("b", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        (a,) = await _queue(r, "a", T0, retry_at=T0 + 3600 * S)
        (b,) = await _queue(r, "b", T0, retry_at=T0 + 3600 * S)
        await r.store.set_enabled("a", False, r.clock.now())
        await r.store.remove_task("b")
        await r.tick(1)
        rows = {o.id: o for o in await r.history()}
        assert (rows[a].state, rows[a].detail) == ("cancelled", "task disabled")
        assert (rows[b].state, rows[b].detail) == ("cancelled", "task removed")


async def test_a_queued_row_is_taken_once_and_only_under_the_lease(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("q", every="1h", anchor="2027-01-15T09:00:00Z")
        await r.engine.start()
        (occ_id,) = await _queue(r, "q", T0, retry_at=T0 + 3600 * S)
        token = r.engine._lease.token
        with pytest.raises(LeaseLost):
            await r.store.take_queued([occ_id], [], [], "someone-else", token, r.clock.now())
        first = await r.store.take_queued([occ_id], [], [], r.engine.owner, token, r.clock.now())
        again = await r.store.take_queued([occ_id], [], [], r.engine.owner, token, r.clock.now())
        assert [o.id for o in first] == [occ_id] and first[0].state == "claimed"
        assert first[0].command_id == f"cmd-{occ_id}"
        assert again == []
        await r.store.requeue([occ_id])
        assert (await r.store.get_occurrence(occ_id)).state == "queued"


def test_plan_queued_is_pure_overlap_logic():
    from tickui.models import Occurrence, Task

    spec = _spec()
    task = Task(1, "t", spec, "cli", True, None, 1, T0, T0, T0, None, None)
    rows = [
        Occurrence(10, 1, "t", "scheduled", T0 - 2 * S, "queued", T0, generation=1),
        Occurrence(11, 1, "t", "scheduled", T0 - S, "queued", T0, generation=1),
        Occurrence(12, 1, "t", "scheduled", T0, "queued", T0, generation=0),
    ]
    plan = plan_queued(rows, {1: task}, {}, T0, 5 * S)
    assert plan.start == [10] and plan.waiting == [11] and plan.cancel == [(12, "task changed")]
    assert plan_queued(rows, {1: task}, {1: 1}, T0, 5 * S).start == []
    late = plan_queued(rows[:1], {1: task}, {}, T0 + 10 * S, 5 * S)
    assert late.start == [] and late.skip[0][0] == 10
    waited = plan_queued(rows[:1], {1: task}, {}, T0 + 10 * S, 5 * S, {10})
    assert waited.start == [10]
