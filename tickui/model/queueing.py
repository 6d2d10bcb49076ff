"""Which queued occurrences a scan starts, skips or cancels. Pure: rows, tasks and `now`.

A queued row (a retry, buffer_one's waiting slot, a backfill's slot) is due at its
retry_at, else at its scheduled_for. Oldest slot first (scheduled_for, attempt, id).
The task's overlap policy decides: `allow` starts every due row; `forbid`, `buffer_one`
and `replace` start one, and only while nothing of the task is active (a queued row
never replaces a run). A row whose due time is further back than the misfire grace is
recorded skipped, unless it is a backfill's (those are past slots by design) or this
engine saw it due and held it back for the overlap policy (it was waiting its turn,
not missed). Rows of a task that is gone, disabled or changed since they were queued
are cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tickui.common.timeutil import MICROS
from tickui.model.records import Occurrence, Task


@dataclass(slots=True)
class QueueDecision:
    start: list[int] = field(default_factory=list)
    skip: list[tuple[int, str]] = field(default_factory=list)
    cancel: list[tuple[int, str]] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)  # due, held back by the overlap policy


def due_at(occ: Occurrence) -> int:
    return occ.retry_at if occ.retry_at is not None else occ.scheduled_for


def plan_queued(
    rows: Iterable[Occurrence],
    tasks: Mapping[int, Task],
    active: Mapping[int, int],
    now: int,
    grace: int,
    waited: set[int] | frozenset[int] = frozenset(),
) -> QueueDecision:
    """`active`: the number of active occurrences per task id."""
    decision = QueueDecision()
    running = dict(active)
    for occ in rows:
        task = tasks.get(occ.task_id)
        if task is None:
            decision.cancel.append((occ.id, "task removed"))
            continue
        if not task.enabled:
            decision.cancel.append((occ.id, "task disabled"))
            continue
        if task.generation != occ.generation:
            decision.cancel.append((occ.id, "task changed"))
            continue
        due = due_at(occ)
        if due > now:
            continue
        if now - due > grace and occ.kind != "backfill" and occ.id not in waited:
            what = "retry" if occ.attempt > 1 else "queued run"
            late = (now - due) // MICROS
            decision.skip.append((occ.id, f"misfire_skipped: {what} due {late}s ago"))
            continue
        if task.spec.concurrency != "allow" and running.get(occ.task_id, 0):
            decision.waiting.append(occ.id)
            continue
        decision.start.append(occ.id)
        running[occ.task_id] = running.get(occ.task_id, 0) + 1
    return decision
