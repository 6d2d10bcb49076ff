"""Misfire, overlap and run-now decisions (late runs, overlap, run now)."""

from __future__ import annotations

import re

import pytest

from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, parse_instant
from tickui.model.planning import RUN_ALL_CAP, DueTask, Plan, Planned, plan_task, run_now_refusal
from tickui.model.spec import build_spec
from tickui.schedules.triggers import cron, interval, jitter_offset, once

S = MICROS
MS = 1_000
T0 = parse_instant("2026-05-05T10:00:00Z")
GRACE = 5 * S


def task(
    schedule=None,
    next_run_at: int | None = None,
    misfire: str = "run_once",
    concurrency: str = "allow",
    jitter: int = 0,
    name: str = "job",
) -> DueTask:
    schedule = schedule or interval(10 * S, T0)
    if next_run_at is None:
        next_run_at = schedule.next_after(T0)
    return DueTask(
        id=7,
        name=name,
        schedule=schedule,
        next_run_at=next_run_at,
        misfire=misfire,
        concurrency=concurrency,
        jitter=jitter,
    )


def plan(t: DueTask, now: int, active: bool = False, grace: int = GRACE) -> Plan:
    return plan_task(t, now, grace, active)


def slots_of(p: Plan, state: str | None = None) -> list[int]:
    return [o.scheduled_for for o in p.occurrences if state is None or o.state == state]


def states(p: Plan) -> list[str]:
    return [o.state for o in p.occurrences]


# --------------------------------------------------------------------------- on time


class TestOnTime:
    def test_nothing_due_yet(self):
        t = task()
        p = plan(t, T0 + 9 * S)
        assert p.occurrences == []
        assert p.next_run_at == T0 + 10 * S
        assert p.cancel_active is False

    def test_single_slot_on_time(self):
        t = task()
        p = plan(t, T0 + 11 * S)
        assert p.task is t
        assert p.occurrences == [Planned(T0 + 10 * S, "claimed")]
        assert p.occurrences[0].covers == 1 and p.occurrences[0].missed == 0
        assert p.occurrences[0].detail is None
        assert p.next_run_at == T0 + 20 * S

    def test_exactly_on_the_slot(self):
        p = plan(task(), T0 + 10 * S)
        assert slots_of(p, "claimed") == [T0 + 10 * S]
        assert p.next_run_at == T0 + 20 * S

    def test_grace_boundary(self):
        t = task(misfire="skip")
        on_time = plan(t, T0 + 10 * S + GRACE)
        assert on_time.occurrences == [Planned(T0 + 10 * S, "claimed")]
        late = plan(t, T0 + 10 * S + GRACE + 1)
        assert states(late) == ["skipped"]
        assert late.occurrences[0].missed == 1

    def test_several_on_time_slots_in_one_scan(self):
        # every 100 ms, scanned once a second: ten on-time slots, all run.
        t = task(interval(100 * MS, T0), concurrency="allow")
        p = plan(t, T0 + 1 * S)
        assert slots_of(p, "claimed") == [T0 + k * 100 * MS for k in range(1, 11)]
        assert len(p.occurrences) == 10
        assert all(o.missed == 0 and o.covers == 1 for o in p.occurrences)
        assert p.next_run_at == T0 + 1100 * MS

    def test_next_run_at_is_first_slot_after_now(self):
        s = interval(10 * S, T0)
        for now in (T0 + 10 * S, T0 + 15 * S, T0 + 19_999_999, T0 + 555 * S):
            p = plan(task(s, misfire="run_all"), now)
            assert p.next_run_at == s.next_after(now)
            assert now < p.next_run_at <= now + 10 * S

    def test_cron_task(self):
        s = cron("*/5 * * * *")
        t = task(s, next_run_at=parse_instant("2026-05-05T10:05:00Z"))
        p = plan(t, parse_instant("2026-05-05T10:05:01Z"))
        assert slots_of(p, "claimed") == [parse_instant("2026-05-05T10:05:00Z")]
        assert p.next_run_at == parse_instant("2026-05-05T10:10:00Z")

    def test_once_has_no_next_run_after_firing(self):
        when = T0 + 60 * S
        t = task(once(when, T0), next_run_at=when)
        p = plan(t, when + 1 * S)
        assert p.occurrences == [Planned(when, "claimed")]
        assert p.next_run_at is None

    def test_once_not_yet_due(self):
        when = T0 + 60 * S
        p = plan(task(once(when, T0), next_run_at=when), when - 1)
        assert p.occurrences == []
        assert p.next_run_at == when


# --------------------------------------------------------------------------- misfire
# every 10 s from T0; the task was due at T0+10s and the engine was away.
# now = T0+106s: slots T0+10s .. T0+100s (10 of them) all missed (the last 6 s late).
# now = T0+102s: the same slots, but the newest (2 s late) is on time: 9 missed.

FIRST = T0 + 10 * S
TEN_SLOTS = [T0 + k * 10 * S for k in range(1, 11)]


class TestRunOnce:
    def test_all_missed_coalesce_to_one(self):
        p = plan(task(misfire="run_once"), T0 + 106 * S)
        assert p.occurrences == [
            Planned(
                T0 + 100 * S, "claimed", covers=10, missed=10, detail="misfire_coalesced: 10 missed"
            )
        ]
        assert p.next_run_at == T0 + 110 * S

    def test_newest_on_time_is_covered_too(self):
        p = plan(task(misfire="run_once"), T0 + 102 * S)
        assert len(p.occurrences) == 1
        only = p.occurrences[0]
        assert (only.scheduled_for, only.state) == (T0 + 100 * S, "claimed")
        assert (only.covers, only.missed) == (10, 9)
        assert only.detail == "misfire_coalesced: 9 missed"
        assert p.next_run_at == T0 + 110 * S

    def test_is_the_default(self):
        p = plan(task(), T0 + 106 * S)
        assert [(o.state, o.covers) for o in p.occurrences] == [("claimed", 10)]

    def test_outage_longer_than_the_scan_window(self):
        # 1000 missed slots: only the newest few are walked, the rest are counted.
        p = plan(task(misfire="run_once"), T0 + 10_006 * S)
        assert len(p.occurrences) == 1
        only = p.occurrences[0]
        assert only.scheduled_for == T0 + 10_000 * S
        assert (only.covers, only.missed) == (1000, 1000)
        assert p.next_run_at == T0 + 10_010 * S

    def test_once_missed(self):
        when = T0 + 60 * S
        p = plan(task(once(when, T0), next_run_at=when), when + 3600 * S)
        assert p.occurrences == [
            Planned(when, "claimed", covers=1, missed=1, detail="misfire_coalesced: 1 missed")
        ]
        assert p.next_run_at is None

    def test_capped_count_is_a_floor(self):
        s = cron("* * * * * *")  # every second, three hours missed: more than the count cap
        start = parse_instant("2026-05-05T00:00:00Z")
        p = plan(task(s, next_run_at=start, misfire="run_once"), start + 3 * 3600 * S)
        assert len(p.occurrences) == 1
        only = p.occurrences[0]
        assert only.scheduled_for == start + 3 * 3600 * S
        match = re.fullmatch(r"misfire_coalesced: (\d+)\+ missed", only.detail)
        assert match, only.detail
        truly_missed = 3 * 3600 - 5  # the newest six slots are within the grace
        assert 0 < int(match.group(1)) <= truly_missed


class TestSkip:
    def test_all_missed(self):
        p = plan(task(misfire="skip"), T0 + 106 * S)
        assert p.occurrences == [
            Planned(FIRST, "skipped", covers=10, missed=10, detail="misfire_skipped: 10 missed")
        ]
        assert p.next_run_at == T0 + 110 * S

    def test_on_time_slots_still_run(self):
        p = plan(task(misfire="skip"), T0 + 102 * S)
        assert p.occurrences == [
            Planned(FIRST, "skipped", covers=9, missed=9, detail="misfire_skipped: 9 missed"),
            Planned(T0 + 100 * S, "claimed"),
        ]
        assert p.next_run_at == T0 + 110 * S

    def test_several_on_time_after_missed(self):
        # every 1 s, due since T0+1s, now T0+20s, grace 5 s: 1..14 missed, 15..20 on time.
        t = task(interval(1 * S, T0), misfire="skip")
        p = plan(t, T0 + 20 * S)
        assert p.occurrences[0] == Planned(
            T0 + 1 * S, "skipped", covers=14, missed=14, detail="misfire_skipped: 14 missed"
        )
        assert slots_of(p, "claimed") == [T0 + k * S for k in range(15, 21)]

    def test_long_outage(self):
        p = plan(task(misfire="skip"), T0 + 10_006 * S)
        assert p.occurrences == [
            Planned(
                FIRST, "skipped", covers=1000, missed=1000, detail="misfire_skipped: 1000 missed"
            )
        ]


class TestRunAll:
    def test_one_per_missed_slot(self):
        p = plan(task(misfire="run_all"), T0 + 106 * S)
        assert p.occurrences == [
            Planned(slot, "claimed", covers=1, missed=1, detail="misfire_late")
            for slot in TEN_SLOTS
        ]
        assert p.next_run_at == T0 + 110 * S

    def test_newest_on_time_is_a_plain_run(self):
        p = plan(task(misfire="run_all"), T0 + 102 * S)
        assert slots_of(p, "claimed") == TEN_SLOTS
        assert [o.detail for o in p.occurrences] == ["misfire_late"] * 9 + [None]
        assert [o.missed for o in p.occurrences] == [1] * 9 + [0]

    def test_capped_at_100_rest_skipped(self):
        # 250 missed slots: the newest 100 run, the oldest 150 are one skipped record.
        p = plan(task(misfire="run_all"), T0 + 2506 * S)
        assert RUN_ALL_CAP == 100
        assert len(p.occurrences) == 101
        skipped = p.occurrences[0]
        assert skipped == Planned(
            FIRST,
            "skipped",
            covers=150,
            missed=150,
            detail="misfire_run_all_cap: 150 oldest skipped",
        )
        runs = p.occurrences[1:]
        assert [o.scheduled_for for o in runs] == [T0 + k * 10 * S for k in range(151, 251)]
        assert all(o.state == "claimed" and o.detail == "misfire_late" for o in runs)
        assert p.next_run_at == T0 + 2510 * S

    def test_capped_beyond_the_scan_window(self):
        p = plan(task(misfire="run_all"), T0 + 10_006 * S)
        assert len(p.occurrences) == 101
        assert p.occurrences[0].scheduled_for == FIRST
        assert p.occurrences[0].missed == 900
        assert slots_of(p, "claimed") == [T0 + k * 10 * S for k in range(901, 1001)]
        assert sum(o.missed for o in p.occurrences) == 1000

    def test_exactly_100_nothing_skipped(self):
        p = plan(task(misfire="run_all"), T0 + 1006 * S)
        assert len(p.occurrences) == 100
        assert states(p) == ["claimed"] * 100

    def test_across_a_dst_gap(self):
        s = cron("*/15 * * * *", "Europe/Berlin")
        start = parse_instant("2026-03-29T00:30:00Z")
        p = plan(
            task(s, next_run_at=start, misfire="run_all"), parse_instant("2026-03-29T01:20:00Z")
        )
        # 02:00..02:45 CET do not exist: they are the single 01:00 UTC slot.
        assert slots_of(p, "claimed") == [
            parse_instant("2026-03-29T00:30:00Z"),
            parse_instant("2026-03-29T00:45:00Z"),
            parse_instant("2026-03-29T01:00:00Z"),
            parse_instant("2026-03-29T01:15:00Z"),
        ]
        assert p.next_run_at == parse_instant("2026-03-29T01:30:00Z")


# --------------------------------------------------------------------------- overlap

THREE_ON_TIME = dict(schedule=interval(1 * S, T0), next_run_at=T0 + 1 * S)
THREE_NOW = T0 + 3 * S  # slots T0+1s, +2s, +3s, all on time


class TestOverlap:
    def test_forbid_with_active_skips_everything(self):
        p = plan(task(**THREE_ON_TIME, concurrency="forbid"), THREE_NOW, active=True)
        assert states(p) == ["skipped"] * 3
        assert all(o.detail.startswith("concurrency_forbid") for o in p.occurrences)
        assert slots_of(p) == [T0 + 1 * S, T0 + 2 * S, T0 + 3 * S]
        assert p.cancel_active is False
        assert p.next_run_at == T0 + 4 * S

    def test_forbid_without_active_runs_the_first(self):
        p = plan(task(**THREE_ON_TIME, concurrency="forbid"), THREE_NOW, active=False)
        assert states(p) == ["claimed", "skipped", "skipped"]
        assert p.occurrences[0].scheduled_for == T0 + 1 * S
        assert p.occurrences[0].detail is None
        assert [o.detail for o in p.occurrences[1:]] == ["concurrency_forbid"] * 2

    def test_forbid_is_the_default_policy_of_several_on_time(self):
        t = task(interval(100 * MS, T0), concurrency="forbid")
        p = plan(t, T0 + 1 * S)
        assert states(p) == ["claimed"] + ["skipped"] * 9

    def test_forbid_active_keeps_misfire_detail(self):
        p = plan(task(concurrency="forbid"), T0 + 106 * S, active=True)
        assert len(p.occurrences) == 1
        only = p.occurrences[0]
        assert only.state == "skipped"
        assert only.detail.startswith("concurrency_forbid")
        assert "misfire_coalesced: 10 missed" in only.detail
        assert (only.covers, only.missed) == (10, 10)

    def test_forbid_active_with_skip_policy(self):
        p = plan(task(misfire="skip", concurrency="forbid"), T0 + 102 * S, active=True)
        assert states(p) == ["skipped", "skipped"]
        assert p.occurrences[0].detail == "misfire_skipped: 9 missed"
        assert p.occurrences[1].detail.startswith("concurrency_forbid")

    @pytest.mark.parametrize("active", [False, True])
    def test_allow_runs_everything(self, active):
        p = plan(task(**THREE_ON_TIME, concurrency="allow"), THREE_NOW, active=active)
        assert states(p) == ["claimed"] * 3
        assert p.cancel_active is False

    def test_replace_with_active_cancels_and_runs_the_newest(self):
        p = plan(task(**THREE_ON_TIME, concurrency="replace"), THREE_NOW, active=True)
        assert p.cancel_active is True
        assert slots_of(p, "claimed") == [T0 + 3 * S]
        assert states(p) == ["skipped", "skipped", "claimed"]
        assert all(o.detail.startswith("concurrency_replace") for o in p.occurrences[:2])

    def test_replace_without_active_cancels_nothing(self):
        p = plan(task(**THREE_ON_TIME, concurrency="replace"), THREE_NOW, active=False)
        assert p.cancel_active is False
        assert slots_of(p, "claimed") == [T0 + 3 * S]

    def test_replace_with_nothing_due_cancels_nothing(self):
        p = plan(task(concurrency="replace"), T0 + 5 * S, active=True)
        assert p.occurrences == []
        assert p.cancel_active is False

    def test_replace_single_slot(self):
        p = plan(task(concurrency="replace"), T0 + 11 * S, active=True)
        assert p.occurrences == [Planned(T0 + 10 * S, "claimed")]
        assert p.cancel_active is True


# --------------------------------------------------------------------------- jitter


def slot_with_offset(name: str, schedule, jitter: int, low: int) -> tuple[int, int]:
    """The first slot of `schedule` after T0 whose jitter offset is above `low`."""
    slot = T0
    for _ in range(1000):
        slot = schedule.next_after(slot)
        offset = jitter_offset(name, slot, jitter)
        if offset > low:
            return slot, offset
    raise AssertionError("no slot with a large enough jitter offset")


class TestJitter:
    def test_jitter_delays_due(self):
        s = interval(10 * S, T0)
        slot, offset = slot_with_offset("jittery", s, 5 * S, 0)
        t = task(s, next_run_at=slot, jitter=5 * S, name="jittery")
        early = plan(t, slot + offset - 1)
        assert early.occurrences == []
        assert early.next_run_at == slot
        due = plan(t, slot + offset)
        assert due.occurrences == [Planned(slot, "claimed")]
        assert due.next_run_at == slot + 10 * S

    def test_grace_counts_from_the_due_time(self):
        s = interval(10 * S, T0)
        slot, offset = slot_with_offset("jittery", s, 4 * S, 1 * S)
        t = task(s, next_run_at=slot, misfire="skip", jitter=4 * S, name="jittery")
        # now - slot > grace, but now - (slot + offset) == grace: still on time.
        p = plan(t, slot + offset + 1 * S, grace=1 * S)
        assert p.occurrences == [Planned(slot, "claimed")]
        late = plan(t, slot + offset + 1 * S + 1, grace=1 * S)
        assert states(late) == ["skipped"]

    def test_jitter_smaller_than_interval_with_run_all(self):
        s = interval(10 * S, T0)
        t = task(s, misfire="run_all", jitter=1 * S, name="jittery")
        p = plan(t, T0 + 10 * 10 * S + 7 * S)  # every slot at least 6 s past its due time
        assert slots_of(p, "claimed") == TEN_SLOTS
        assert all(o.detail == "misfire_late" for o in p.occurrences)

    def test_jitter_larger_than_interval_plans_each_due_slot_once(self):
        # every 1 s, jitter up to 10 s, due since 10 s, now 23 s, grace 5 s.
        t = DueTask(
            1,
            "a",
            interval(1 * S, 0),
            next_run_at=10 * S,
            misfire="run_all",
            concurrency="allow",
            jitter=10 * S,
        )
        p = plan_task(t, 23 * S, GRACE, False)
        planned = slots_of(p)
        assert len(planned) == len(set(planned)), "a slot is planned twice"
        # Every slot from next_run_at up to the new next_run_at is planned exactly once.
        assert sorted(planned) == list(range(10 * S, p.next_run_at, S))

    def test_no_due_slot_in_the_window_plans_nothing_and_keeps_the_slot(self):
        # A task spec refuses jitter >= interval; the planner must still not crash on it.
        t = DueTask(
            1,
            "j",
            interval(1 * S, 0),
            next_run_at=1 * S,
            misfire="run_once",
            concurrency="allow",
            jitter=3600 * S,
        )
        p = plan_task(t, 300 * S, GRACE, False)
        assert p.occurrences == []
        assert p.next_run_at == 1 * S

    def test_spec_refuses_jitter_not_shorter_than_the_interval(self):
        with pytest.raises(BadInput) as caught:
            build_spec({"name": "j", "every": "10s", "jitter": "10s", "command": ["true"]}, 0)
        assert caught.value.field == "jitter"
        with pytest.raises(BadInput):
            build_spec({"name": "j", "cron": "*/5 * * * *", "jitter": "6m", "command": ["true"]}, 0)
        ok = build_spec(
            {"name": "j", "cron": "*/5 * * * *", "jitter": "4m", "command": ["true"]}, 0
        )
        assert ok.jitter == 240 * S


# --------------------------------------------------------------------------- run now


class TestRunNow:
    def test_disabled_is_refused(self):
        refusal = run_now_refusal(enabled=False, concurrency="allow", active=False)
        assert refusal is not None
        assert refusal[0] == "TASK_DISABLED"
        assert refusal[1]

    def test_disabled_wins_over_forbid(self):
        assert run_now_refusal(False, "forbid", True)[0] == "TASK_DISABLED"

    def test_forbid_with_active_is_refused(self):
        refusal = run_now_refusal(enabled=True, concurrency="forbid", active=True)
        assert refusal is not None
        assert refusal[0] == "CONCURRENCY_FORBID"
        assert "\n" not in refusal[1]

    @pytest.mark.parametrize(
        ("concurrency", "active"),
        [("forbid", False), ("allow", False), ("allow", True), ("replace", True)],
    )
    def test_allowed(self, concurrency, active):
        assert run_now_refusal(True, concurrency, active) is None
