"""Why each next fire time is when it is: the cron day OR rule, DST gaps and folds, jitter,
and what the misfire policy makes of slots already passed. Every test fixes `now`; the
fire times themselves are checked against the `cronsim` package (Debian cron's
matching) where cron decides them."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from tickui.common.timeutil import MICROS, from_micros, iso, parse_instant, to_micros
from tickui.model.planning import DueTask, plan_task
from tickui.model.spec import build_spec
from tickui.model.upcoming import explain
from tickui.schedules.triggers import jitter_offset

S = MICROS
HOUR = 3600 * S
GRACE = 5 * S


def spec(name: str = "job", **fields):
    fields.setdefault("command", ["true"])
    return build_spec({"name": name, **fields}, parse_instant("2027-01-01T00:00:00Z"))


def fires(task, now: str, count: int = 5, next_run_at: int | None = None):
    moment = parse_instant(now)
    return explain(task, moment, next_run_at, moment, GRACE, count)


def walls(found, tz: str) -> list[str]:
    zone = ZoneInfo(tz)
    return [from_micros(f.at).astimezone(zone).strftime("%Y-%m-%d %H:%M %Z") for f in found]


def oracle(expr: str, start: str, count: int) -> list[str]:
    sim = CronSim(expr, datetime.fromisoformat(start.replace("Z", "+00:00")))
    return [iso(to_micros(next(sim))) for _ in range(count)]


def test_a_plain_fire_time_has_no_reason():
    found = fires(spec(cron="0 9 * * *"), "2027-03-01T00:00:00Z")
    assert [iso(f.at) for f in found] == oracle("0 9 * * *", "2027-03-01T00:00:00Z", 5)
    assert all(f.reasons == () and f.due == f.at and not f.pending for f in found)


def test_the_day_or_rule_says_which_day_field_matched():
    # 2027-03-05 is a Friday, 2027-03-13 a Saturday, 2027-08-13 a Friday.
    found = fires(spec(cron="0 9 13 * 5"), "2027-03-01T00:00:00Z", 3)
    assert [iso(f.at) for f in found] == oracle("0 9 13 * 5", "2027-03-01T00:00:00Z", 3)
    assert [f.reasons for f in found] == [
        ("day-of-week matched (Fri), day-of-month did not (5)",),
        ("day-of-week matched (Fri), day-of-month did not (12)",),
        ("day-of-month matched (13), day-of-week did not (Sat)",),
    ]
    both = fires(spec(cron="0 9 13 * 5"), "2027-08-12T12:00:00Z", 1)[0]
    assert iso(both.at) == "2027-08-13T09:00:00+00:00"
    assert both.reasons == ("day-of-month (13) and day-of-week (Fri) both matched",)


def test_one_restricted_day_field_is_no_or_rule():
    found = fires(spec(cron="0 9 * * 5"), "2027-03-01T00:00:00Z", 3)
    assert all(f.reasons == () for f in found)


@pytest.mark.parametrize(
    ("tz", "now", "moved_to", "jump"),
    [
        ("Europe/Berlin", "2027-03-26T12:00:00Z", "2027-03-28 03:00 CEST", "02:00 to 03:00 CEST"),
        ("America/New_York", "2027-03-12T12:00:00Z", "2027-03-14 03:00 EDT", "02:00 to 03:00 EDT"),
    ],
)
def test_a_fixed_time_in_the_spring_gap_is_moved_to_the_jump(tz, now, moved_to, jump):
    found = fires(spec(cron="30 2 * * *", tz=tz), now, 4)
    shown = walls(found, tz)
    assert moved_to in shown
    day = moved_to.split()[0]
    for fire, wall in zip(found, shown, strict=True):
        if wall == moved_to:
            assert fire.reasons == (
                f"DST gap: 02:30 does not exist on {day} (clocks jump from {jump});"
                f" the run is moved to 03:00 {moved_to.split()[-1]}",
            )
        else:
            assert wall.split()[1] == "02:30" and fire.reasons == ()


@pytest.mark.parametrize(
    ("tz", "now", "day", "first", "second"),
    [
        ("Europe/Berlin", "2027-10-30T12:00:00Z", "2027-10-31", "CEST, +02:00", "CET"),
        ("America/New_York", "2027-11-06T12:00:00Z", "2027-11-07", "EDT, -04:00", "EST"),
    ],
)
def test_a_fixed_time_in_the_autumn_fold_runs_once_in_the_first_pass(tz, now, day, first, second):
    expr = "30 1 * * *" if tz.startswith("America") else "30 2 * * *"
    found = fires(spec(cron=expr, tz=tz), now, 2)
    clock = expr.split()[1].zfill(2) + ":30"
    fold = found[0]
    assert walls([fold], tz)[0].startswith(f"{day} {clock}")
    # once: the next fire is the next day's, not the second pass an hour later
    assert found[1].at - fold.at > 20 * HOUR
    name = first.split(",")[0]
    assert fold.reasons == (
        f"DST fold: {clock} happens twice on {day} ({name}, then {second});"
        f" runs once, in the first ({first})",
    )
    assert found[1].reasons == ()


def test_a_job_by_real_time_skips_the_gap_and_runs_in_both_passes_of_the_fold():
    tz = "America/New_York"
    spring = fires(spec(cron="*/30 * * * *", tz=tz), "2027-03-14T06:15:00Z", 3)
    assert walls(spring, tz) == [
        "2027-03-14 01:30 EST",
        "2027-03-14 03:00 EDT",
        "2027-03-14 03:30 EDT",
    ]
    assert spring[0].reasons == () and spring[2].reasons == ()
    assert spring[1].reasons == (
        "DST gap: 02:00, 02:30 do not exist on 2027-03-14 (clocks jump from 02:00 to 03:00 EDT);"
        " are skipped (run by real time)",
    )
    autumn = fires(spec(cron="0 * * * *", tz=tz), "2027-11-07T04:30:00Z", 3)
    assert walls(autumn, tz) == [
        "2027-11-07 01:00 EDT",
        "2027-11-07 01:00 EST",
        "2027-11-07 02:00 EST",
    ]
    twice = (
        "DST fold: 01:00 happens twice on 2027-11-07 (EDT, then EST);"
        " runs in both (run by real time)"
    )
    assert autumn[0].reasons == (f"{twice}, this is the first (EDT, -04:00)",)
    assert autumn[1].reasons == (f"{twice}, this is the second (EST, -05:00)",)
    assert autumn[2].reasons == ()


def test_jitter_gives_the_planned_time_of_each_slot():
    task = spec(name="jittery", every="1h", jitter="10m", anchor="2027-01-01T00:00:00Z")
    found = fires(task, "2027-03-01T00:30:00Z", 3)
    for fire in found:
        offset = jitter_offset("jittery", fire.at, 600 * S)
        assert fire.due == fire.at + offset
        (reason,) = fire.reasons
        scheduled = from_micros(fire.at).strftime("%H:%M:%S UTC")
        planned = from_micros(fire.due).strftime("%H:%M:%S UTC")
        assert reason.startswith("jitter +") and "(of up to 10m)" in reason
        assert reason.endswith(f"scheduled {scheduled}, planned {planned}")
    assert len({f.due - f.at for f in found}) == 3  # a delay per slot, not one for all


def _behind(misfire: str, concurrency: str = "forbid"):
    task = spec(cron="0 * * * *", misfire=misfire, concurrency=concurrency)
    now = parse_instant("2027-03-01T12:20:00Z")
    late = parse_instant("2027-03-01T07:00:00Z")  # 07:00 .. 12:00: six slots have passed
    return task, now, late, explain(task, now, late, now, GRACE, 2)


def test_a_task_behind_with_run_once_coalesces_the_passed_slots_into_one_run():
    task, now, late, found = _behind("run_once")
    pending, *ahead = found
    assert pending.pending and iso(pending.at) == "2027-03-01T12:00:00+00:00"
    assert pending.reasons == (
        "misfire run_once: 6 slots since 2027-03-01 07:00:00 UTC coalesce into this one run",
    )
    # the count is the planner's own
    plan = plan_task(
        DueTask(0, "job", task.schedule(0), late, "run_once", "forbid"), now, GRACE, False
    )
    assert [o.covers for o in plan.occurrences] == [6]
    assert [iso(f.at) for f in ahead] == ["2027-03-01T13:00:00+00:00", "2027-03-01T14:00:00+00:00"]
    assert all(not f.pending and f.reasons == () for f in ahead)


def test_a_task_behind_with_skip_or_run_all_says_so():
    _, _, _, skipped = _behind("skip")
    assert skipped[0].pending and iso(skipped[0].at) == "2027-03-01T07:00:00+00:00"
    assert skipped[0].reasons == (
        "misfire skip: 6 slots since 2027-03-01 07:00:00 UTC missed, skipped (not run)",
    )
    _, _, _, in_turn = _behind("run_all")
    assert in_turn[0].pending and iso(in_turn[0].at) == "2027-03-01T07:00:00+00:00"
    assert in_turn[0].reasons == (
        "misfire run_all: 6 slots since 2027-03-01 07:00:00 UTC run late, one after another;"
        " this one first",
    )
    _, _, _, side_by_side = _behind("run_all", "allow")
    # six late runs side by side: the newest `count` (2) are given, each saying how many
    assert [f.pending for f in side_by_side] == [True] * 2 + [False] * 2
    assert [iso(f.at) for f in side_by_side[:2]] == [
        "2027-03-01T11:00:00+00:00",
        "2027-03-01T12:00:00+00:00",
    ]
    assert all("runs late (each of 6 slots" in f.reasons[0] for f in side_by_side[:2])


def test_a_task_on_time_or_disabled_has_no_passed_slots():
    task = spec(cron="0 * * * *")
    now = parse_instant("2027-03-01T12:20:00Z")
    assert not any(f.pending for f in explain(task, now, now + HOUR, now, GRACE))
    assert not any(f.pending for f in explain(task, now, None, now, GRACE))
