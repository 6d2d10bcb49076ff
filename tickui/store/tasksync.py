"""What a sync of the config's tasks writes, worked out before anything is written.

`plan_sync` is pure: from the declared specs and the task rows it gives every row to
insert, every row to update and the tasks whose queued occurrences are cancelled, so the
store writes them in one transaction with a few `executemany` calls instead of a few
statements per task. The rows are the ones a task-by-task sync would write, in the same
order (new tasks get the same ids)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tickui.common.timeutil import MICROS
from tickui.model.spec import TaskSpec
from tickui.schedules.triggers import jitter_offset
from tickui.store.abc import SyncReport

INSERT_TASK = (
    "INSERT INTO tasks (name, spec, definition_hash, source, enabled, created_at,"
    " updated_at, anchor, next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?,?,?)"
)
UPDATE_SYNCED = (
    "UPDATE tasks SET spec = ?, definition_hash = ?, source = 'config',"
    " enabled = ?, note = NULL, generation = generation + 1, updated_at = ?,"
    " anchor = ?, next_run_at = ?, due_at = ?, overridden = 0 WHERE id = ?"
)
DELETE_TASK = "DELETE FROM tasks WHERE id = ?"


@dataclass(slots=True)
class SyncPlan:
    report: SyncReport = field(default_factory=SyncReport)
    inserts: list[tuple[Any, ...]] = field(default_factory=list)  # INSERT_TASK's parameters
    updates: list[tuple[Any, ...]] = field(default_factory=list)  # UPDATE_SYNCED's
    changed: list[int] = field(default_factory=list)  # ids of the updated tasks
    removed: list[int] = field(default_factory=list)  # ids of the tasks to delete

    @property
    def writes(self) -> bool:
        return bool(self.inserts or self.updates or self.removed)


def next_slot(spec: TaskSpec, anchor: int, after: int) -> tuple[int | None, int | None]:
    """A task's next slot strictly after `after`, and when it is due (with its jitter)."""
    slot = spec.schedule(anchor).next_after(after)
    if slot is None:
        return None, None
    return slot, slot + jitter_offset(spec.name, slot, spec.jitter)


def insert_row(spec: TaskSpec, now: int, source: str, digest: str | None = None) -> tuple:
    """INSERT_TASK's parameters for a new task: its first slot from its anchor."""
    anchor = default_anchor(spec, now)
    nxt, due = next_slot(spec, anchor, now - 1)
    digest = spec.definition_hash() if digest is None else digest
    return (
        spec.name,
        spec.to_json(),
        digest,
        source,
        int(spec.enabled),
        now,
        now,
        anchor,
        nxt,
        due,
    )


def default_anchor(spec: TaskSpec, now: int) -> int:
    """An interval task's grid starts at its creation, rounded up to a whole second so
    that slots fall on the ticker's second boundaries."""
    if spec.anchor is not None:
        return spec.anchor
    return -(-now // MICROS) * MICROS


def plan_sync(specs: Sequence[TaskSpec], rows: Sequence[Any], now: int) -> SyncPlan:
    """`rows`: (id, name, definition_hash, source, anchor) of every task. A declared task
    with no row is inserted; one whose file definition changed, or that was made by
    hand, is replaced (its generation bumped, its queued occurrences cancelled); a
    config task no longer declared is removed; a CLI-made task not declared is kept."""
    plan = SyncPlan()
    existing = {row[1]: row for row in rows}
    wanted = set()
    for spec in specs:
        name = spec.name
        wanted.add(name)
        row = existing.get(name)
        digest = spec.definition_hash()
        if row is None:
            plan.inserts.append(insert_row(spec, now, "config", digest))
            plan.report.added.append(name)
        elif row[2] != digest or row[3] != "config":
            anchor = spec.anchor if spec.anchor is not None else row[4]
            nxt, due = next_slot(spec, anchor, now)
            plan.updates.append(
                (spec.to_json(), digest, int(spec.enabled), now, anchor, nxt, due, row[0])
            )
            plan.changed.append(row[0])
            plan.report.updated.append(name)
    for name, row in existing.items():
        if row[3] == "config" and name not in wanted:
            plan.removed.append(row[0])
            plan.report.removed.append(name)
    return plan
