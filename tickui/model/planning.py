"""Misfire, overlap and run-now decisions. Pure functions of a task, its slot and `now`."""

from __future__ import annotations

from dataclasses import dataclass, field

from tickui.schedules.triggers import Schedule, jitter_offset

RUN_ALL_CAP = 100
# How many of the newest due slots one scan looks at; older ones are only counted.
WINDOW = 250


@dataclass(slots=True)
class DueTask:
    """What a scan needs to know of a task that is due."""

    id: int
    name: str
    schedule: Schedule
    next_run_at: int
    misfire: str
    concurrency: str
    jitter: int = 0
    generation: int = 0


@dataclass(slots=True)
class Planned:
    """An occurrence a scan will create: to run (`claimed`) or recorded `skipped`."""

    scheduled_for: int
    state: str
    covers: int = 1
    missed: int = 0
    detail: str | None = None


@dataclass(slots=True)
class Plan:
    task: DueTask
    next_run_at: int | None
    occurrences: list[Planned] = field(default_factory=list)
    cancel_active: bool = False


def due_time(task: DueTask, slot: int) -> int:
    return slot + jitter_offset(task.name, slot, task.jitter)


def plan_task(task: DueTask, now: int, grace: int, active: bool, waiting: bool = False) -> Plan:
    """Decide what the due slots of one task become (late runs and overlap).
    `waiting`: a slot of the task already waits its turn (buffer_one's buffered slot)."""
    slot = task.next_run_at
    first_due = due_time(task, slot)
    if first_due > now:
        return Plan(task, slot)
    following = task.schedule.next_after(slot)
    capped = False
    if following is None or following > now:
        if now - first_due <= grace:  # the usual case: one slot, on time
            if not active and not waiting:  # ... and nothing of the task active or waiting
                return Plan(task, following, [Planned(slot, "claimed")])
            planned, cancel = _overlap(
                task.concurrency, [Planned(slot, "claimed")], active, waiting
            )
            return Plan(task, following, planned, cancel)
        due, older, next_slot = [slot], 0, following
    else:
        due, older, next_slot, capped = _due_window(task, now)
    late = [slot for slot in due if now - due_time(task, slot) > grace]
    on_time = [slot for slot in due if now - due_time(task, slot) <= grace]
    missed = older + len(late)
    if not due:
        return Plan(task, task.next_run_at if older else next_slot)
    if missed and task.misfire == "run_all" and task.concurrency == "forbid":
        return _catch_up_in_turn(task, late, on_time, missed, next_slot, active)
    planned = (
        _misfire(task, due, late, on_time, missed, capped)
        if missed
        else [Planned(slot, "claimed") for slot in on_time]
    )
    planned, cancel = _overlap(task.concurrency, planned, active, waiting)
    return Plan(task, next_slot, planned, cancel)


def _due_window(task: DueTask, now: int) -> tuple[list[int], int, int | None, bool]:
    """Several slots have passed: the newest due ones, how many older, and the next slot."""
    window = task.schedule.slots(task.next_run_at, now, WINDOW)
    due: list[int] = []
    next_slot: int | None = None
    for slot in window.newest:
        if due_time(task, slot) > now:
            next_slot = slot
            break
        due.append(slot)
    if next_slot is None:
        next_slot = task.schedule.next_after(now)
    return due, window.count - len(window.newest), next_slot, window.capped


def _misfire(
    task: DueTask, due: list[int], late: list[int], on_time: list[int], missed: int, capped: bool
) -> list[Planned]:
    count = f"{missed}+" if capped else str(missed)
    first = task.next_run_at
    if task.misfire == "skip":
        skipped = Planned(
            first,
            "skipped",
            covers=missed,
            missed=missed,
            detail=f"misfire_skipped: {count} missed",
        )
        return [skipped, *(Planned(slot, "claimed") for slot in on_time)]
    if task.misfire == "run_all":
        runs = late[-RUN_ALL_CAP:]
        planned = [Planned(slot, "claimed", missed=1, detail="misfire_late") for slot in runs]
        rest = missed - len(runs)
        if rest:
            planned.insert(
                0,
                Planned(
                    first,
                    "skipped",
                    covers=rest,
                    missed=rest,
                    detail=f"misfire_run_all_cap: {rest} oldest skipped",
                ),
            )
        return planned + [Planned(slot, "claimed") for slot in on_time]
    covers = missed + len(on_time)
    return [
        Planned(
            due[-1],
            "claimed",
            covers=covers,
            missed=missed,
            detail=f"misfire_coalesced: {count} missed",
        )
    ]


def _catch_up_in_turn(
    task: DueTask,
    late: list[int],
    on_time: list[int],
    missed: int,
    after: int | None,
    active: bool,
) -> Plan:
    """run_all under forbid: missed slots run one after another, never side by side.

    One runs now; the task's next slot stays on the following missed one, so each
    later scan (once the run has ended) takes the next.
    """
    queue = late[-RUN_ALL_CAP:] + on_time
    planned = []
    rest = missed - len(late[-RUN_ALL_CAP:])
    if rest:
        planned.append(
            Planned(
                task.next_run_at,
                "skipped",
                covers=rest,
                missed=rest,
                detail=f"misfire_run_all_cap: {rest} oldest skipped",
            )
        )
    if active or not queue:
        return Plan(task, queue[0] if queue else after, planned)
    head = queue[0]
    late_head = head in late
    planned.append(
        Planned(
            head, "claimed", missed=int(late_head), detail="misfire_late" if late_head else None
        )
    )
    return Plan(task, queue[1] if len(queue) > 1 else after, planned)


def _overlap(
    policy: str, planned: list[Planned], active: bool, waiting: bool = False
) -> tuple[list[Planned], bool]:
    """`waiting`: a slot of the task already waits (buffer_one's buffered slot)."""
    runs = [index for index, item in enumerate(planned) if item.state == "claimed"]
    if not runs or policy == "allow":
        return planned, False
    result = list(planned)
    if policy == "buffer_one":
        return _buffer_one(result, runs, active, waiting), False
    if policy == "forbid":
        keep = None if active else runs[0]
        for index in runs:
            if index != keep:
                result[index] = _skip(result[index], "concurrency_forbid")
        return result, False
    for index in runs[:-1]:  # replace: only the newest runs; it replaces what is active
        result[index] = _skip(result[index], "concurrency_replace")
    return result, active


def _buffer_one(
    result: list[Planned], runs: list[int], active: bool, waiting: bool
) -> list[Planned]:
    """buffer_one (E): with nothing active and nothing waiting, the oldest due slot runs;
    the next slot waits (state `queued`; the engine starts it as soon as nothing of the
    task is active), at most one at a time; any further slot is skipped
    `concurrency_buffer_full`. A slot already waiting fills the buffer: it is older, so
    every new slot is skipped until it has started."""
    room = 0 if waiting else 1
    start = not active and not waiting
    for index in runs:
        item = result[index]
        if start:
            start = False  # this one runs now: the task is active from here on
        elif room:
            room -= 1
            result[index] = Planned(
                item.scheduled_for, "queued", item.covers, item.missed, item.detail
            )
        else:
            result[index] = _skip(item, "concurrency_buffer_full")
    return result


def _skip(item: Planned, reason: str) -> Planned:
    detail = reason if not item.detail else f"{reason} ({item.detail})"
    return Planned(item.scheduled_for, "skipped", item.covers, item.missed, detail)


def run_now_refusal(enabled: bool, concurrency: str, active: bool) -> tuple[str, str] | None:
    """Why a manual run is refused, as (code, reason), or None when it may go."""
    if not enabled:
        return "TASK_DISABLED", "the task is disabled"
    if concurrency == "forbid" and active:
        return "CONCURRENCY_FORBID", "an occurrence is still active and the policy is forbid"
    if concurrency == "buffer_one" and active:  # E: a manual run is not a slot to buffer
        return "CONCURRENCY_BUFFER_ONE", "an occurrence is still active (policy buffer_one)"
    return None
