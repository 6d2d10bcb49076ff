"""A task's next fire times, each with why it is when it is: the cron day rule and DST
(tickui.schedules.reasons), the jitter the task's slot gets, and, when the task is behind,
what its misfire policy makes of the slots it missed (tickui.model.planning decides; this
only words it). Pure: the task's definition, anchor and next slot, and `now`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from tickui.common.timeutil import format_duration, from_micros, iso
from tickui.model.planning import DueTask, Planned, plan_task
from tickui.model.spec import TaskSpec
from tickui.schedules.reasons import cron_reasons
from tickui.schedules.triggers import CronSchedule, Schedule, jitter_offset, preview

SHOWN = 5


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire time: the slot the schedule gives (`at`), when it is planned to start
    (`due`: the slot plus its jitter), and the reasons (none for a plain one). `pending`:
    a slot already passed, which the next scan runs (or skips) as the reasons say."""

    at: int
    due: int
    reasons: tuple[str, ...] = ()
    pending: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "due": iso(self.due),
            "pending": self.pending,
            "reasons": list(self.reasons),
        }


def _zone(spec: TaskSpec) -> tzinfo:
    return ZoneInfo(spec.tz) if spec.kind == "cron" else ZoneInfo("UTC")


def _stamp(moment: int, zone: tzinfo, day: bool = False) -> str:
    local = from_micros(moment).astimezone(zone)
    return local.strftime(("%Y-%m-%d " if day else "") + "%H:%M:%S %Z")


def _delay(micros: int) -> str:
    """`4m07.352s`, `0.250s`: a jitter delay to the millisecond."""
    minutes, rest = divmod(micros // 1000, 60_000)
    seconds = f"{rest / 1000:06.3f}s" if minutes else f"{rest / 1000:.3f}s"
    return f"{minutes}m{seconds}" if minutes else seconds


def _jitter(spec: TaskSpec, slot: int, due: int) -> str:
    zone = _zone(spec)
    return (
        f"jitter +{_delay(due - slot)}"
        f" (of up to {format_duration(spec.jitter)}): scheduled {_stamp(slot, zone)},"
        f" planned {_stamp(due, zone)}"
    )


def _slots(count: int, first: int, spec: TaskSpec) -> str:
    return f"{count} slot{'s' if count != 1 else ''} since {_stamp(first, _zone(spec), True)}"


def _misfire(spec: TaskSpec, item: Planned, first: int, due: int) -> str | None:
    """The words for one occurrence a scan would plan for a task that is behind, `due`
    slots of it having passed."""
    policy = f"misfire {spec.misfire}"
    detail = item.detail or ""
    if detail.startswith("misfire_coalesced") and item.covers == 1:
        return f"{policy}: missed, runs late, once"
    if detail.startswith("misfire_coalesced"):
        missed = f"; {item.missed} of them missed" if item.missed != item.covers else ""
        return f"{policy}: {_slots(item.covers, first, spec)} coalesce into this one run{missed}"
    if detail.startswith("misfire_skipped"):
        return f"{policy}: {_slots(item.missed, first, spec)} missed, skipped (not run)"
    if "misfire_run_all_cap" in detail:
        return f"{policy}: the {item.missed} oldest missed slots are skipped (catch-up is capped)"
    if "misfire_late" in detail:
        if spec.concurrency == "forbid":
            return (
                f"{policy}: {_slots(due, first, spec)} run late, one after another; this one first"
            )
        return f"{policy}: missed, runs late (each of {_slots(due, first, spec)} runs)"
    return None


def behind(spec: TaskSpec, anchor: int, next_run_at: int, now: int, grace: int) -> list[Fire]:
    """The slots already due, as the next scan would plan them with nothing of the task
    running (tickui.model.planning.plan_task): none when the task is not behind."""
    schedule = spec.schedule(anchor)
    due = DueTask(0, spec.name, schedule, next_run_at, spec.misfire, spec.concurrency, spec.jitter)
    plan = plan_task(due, now, grace, active=False)
    # run_all's words count the passed slots (the planner's window holds only the newest)
    counted = plan.occurrences and spec.misfire == "run_all"
    passed = schedule.slots(next_run_at, now, 0).count if counted else 0
    fires = []
    for item in plan.occurrences:
        slot = item.scheduled_for
        planned = slot + jitter_offset(spec.name, slot, spec.jitter)
        words = _misfire(spec, item, next_run_at, passed)
        reasons = [words] if words else []
        if item.state == "skipped" and not words:
            reasons.append(f"skipped: {item.detail}")
        if spec.jitter and item.state != "skipped":
            reasons.append(_jitter(spec, slot, planned))
        fires.append(Fire(slot, planned, tuple(reasons), pending=True))
    return fires


def explain(
    spec: TaskSpec,
    anchor: int,
    next_run_at: int | None,
    now: int,
    grace: int,
    count: int = SHOWN,
) -> list[Fire]:
    """The slots the task is behind on (when `next_run_at` has passed), then its next
    `count` fire times after `now`, each with its reasons. `next_run_at` None: the task
    is disabled or done, and only the schedule's times are given."""
    fires = [] if next_run_at is None else behind(spec, anchor, next_run_at, now, grace)
    fires = fires[-count:]  # run_all's late runs: the newest few (each says how many)
    schedule: Schedule = spec.schedule(anchor)
    before = now
    for slot in preview(schedule, now, count):
        reasons = cron_reasons(schedule, before, slot) if isinstance(schedule, CronSchedule) else []
        planned = slot + jitter_offset(spec.name, slot, spec.jitter)
        if spec.jitter:
            reasons.append(_jitter(spec, slot, planned))
        fires.append(Fire(slot, planned, tuple(reasons)))
        before = slot
    return fires
