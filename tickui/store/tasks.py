"""Task rows: add, find, list with their stats, enable or disable, edit, remove, and the
sync of the tasks a config file declares.

A config task edited by hand (edit_task) is marked `overridden`: its row keeps the
file's definition hash (not the hand-edited spec's), so a sync with an unchanged file
leaves the hand edit in place, and the first sync whose file definition differs from the
one last synced replaces it and clears the mark."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any

from tickui.common.errors import NotFound
from tickui.common.timeutil import iso
from tickui.model.audit import Actor, changed_fields
from tickui.model.records import Task, TaskStats
from tickui.model.retries import PAUSE_NOTE
from tickui.model.spec import TaskSpec
from tickui.store import reads
from tickui.store.abc import SyncReport
from tickui.store.audit import write_audit
from tickui.store.base import StoreBase
from tickui.store.tasksync import (
    DELETE_TASK,
    INSERT_TASK,
    UPDATE_SYNCED,
    insert_row,
    next_slot,
    plan_sync,
)

QUEUED_CANCEL = (
    "UPDATE occurrences SET state = 'cancelled', finished_at = ?, detail = ?"
    " WHERE task_id = ? AND state = 'queued'"
)


class TaskQueries(StoreBase):
    """Task rows and what the history says of each."""

    # ---- tasks -----------------------------------------------------------------------

    def _task(self, row: Any, stats: TaskStats | None = None) -> Task:
        return reads.task_from_row(row, stats, self._specs)

    async def _insert_task(self, spec: TaskSpec, now: int, source: str) -> None:
        """Insert a new task row, its first slot computed from its anchor (in a write)."""
        await self._conn.execute(INSERT_TASK, insert_row(spec, now, source))

    async def add_task(
        self, spec: TaskSpec, now: int, source: str = "cli", *, actor: Actor | None = None
    ) -> Task:
        try:
            async with self._write():
                await self._insert_task(spec, now, source)
                if actor is not None:
                    said = spec.schedule_text() + ("" if spec.enabled else " (disabled)")
                    await write_audit(self._conn, actor, "add", spec.name, now, said)
        except self._Conflict:
            from tickui.common.errors import BadInput

            raise BadInput("name", f"a task named {spec.name!r} exists already") from None
        return await self.get_task(spec.name)

    async def find_task(self, name: str) -> Task | None:
        row = await self._one(reads.FIND_TASK, (name,))
        if row is None:
            return None
        stats = (await self.task_stats([row[0]])).get(row[0])
        return self._task(row, stats)

    async def get_task(self, name: str) -> Task:
        task = await self.find_task(name)
        if task is None:
            raise NotFound(f"no task named {name!r}")
        return task

    async def tasks_by_id(self, ids: Sequence[int]) -> list[Task]:
        marks = ",".join("?" * len(ids))
        rows = await self._all(f"{reads.TASK_SELECT} WHERE id IN ({marks})", ids)
        found = {task.id: task for task in map(self._task, rows)}
        return [found[task_id] for task_id in ids if task_id in found]

    async def list_tasks(self, with_stats: bool = True) -> list[Task]:
        rows = await self._all(reads.LIST_TASKS)
        stats = await self.task_stats() if with_stats else {}
        return [self._task(row, stats.get(row[0])) for row in rows]

    async def task_stats(self, ids: Iterable[int] | None = None) -> dict[int, TaskStats]:
        """What the history says of each task (reads.stats_from), of `ids` or of all."""
        query = reads.stats_query(ids)
        if query is None:
            return {}
        return reads.stats_from(await self._all(*query))

    async def set_enabled(
        self,
        name: str,
        enabled: bool,
        now: int,
        note: str | None = None,
        *,
        actor: Actor | None = None,
    ) -> Task:
        """Disable keeps history; enable schedules the next slot after now (no misfires).
        An enable of a task pause-after disabled is audited as clear-pause."""
        task = await self.get_task(name)
        if enabled:
            nxt, due = next_slot(task.spec, task.anchor, now)
            sql = (
                "UPDATE tasks SET enabled = 1, note = NULL, failures = 0, next_run_at = ?,"
                " due_at = ?, updated_at = ? WHERE id = ?"
            )
            params: tuple[Any, ...] = (nxt, due, now, task.id)
        else:
            sql = "UPDATE tasks SET enabled = 0, note = ?, updated_at = ? WHERE id = ?"
            params = (note, now, task.id)
        async with self._write():
            await self._conn.execute(sql, params)
            if not enabled:
                await self._conn.execute(QUEUED_CANCEL, (now, "task disabled", task.id))
            if actor is not None:
                action, said = "disable", note
                if enabled:
                    was = None if task.enabled else task.note
                    paused = was is not None and was.startswith(PAUSE_NOTE)
                    action = "clear-pause" if paused else "enable"
                    said = f"was: {was}" if was else None
                await write_audit(self._conn, actor, action, name, now, said)
        return await self.get_task(name)

    async def remove_task(
        self, name: str, now: int | None = None, *, actor: Actor | None = None
    ) -> None:
        """Remove the task; its history stays (occurrences keep the task's name); its
        queued occurrences (retries, a buffered slot, backfill) are cancelled."""
        task = await self.get_task(name)
        async with self._write():
            await self._conn.execute("DELETE FROM tasks WHERE id = ?", (task.id,))
            at = time.time_ns() // 1000 if now is None else now
            await self._conn.execute(QUEUED_CANCEL, (at, "task removed", task.id))
            if actor is not None:
                await write_audit(self._conn, actor, "delete", name, at, task.spec.schedule_text())

    async def sync_tasks(self, specs: Sequence[TaskSpec], now: int) -> SyncReport:
        """Make the config-declared tasks match `specs`; CLI-made tasks are kept. Every
        row is worked out first (tickui.store.tasksync), on a worker thread: 10,000
        definitions take a few hundred ms to hash, encode and schedule, which the
        dashboard's loop must not wait on. Then one transaction writes them, a few
        trips to the connection's thread whatever their number."""
        rows = await self._all("SELECT id, name, definition_hash, source, anchor FROM tasks")
        plan = await asyncio.to_thread(plan_sync, specs, rows, now)
        if not plan.writes:
            return plan.report
        changed = [(now, "task changed", task_id) for task_id in plan.changed]
        removed = [(now, "task removed", task_id) for task_id in plan.removed]
        async with self._write():
            if plan.inserts:
                await self._conn.executemany(INSERT_TASK, plan.inserts)
            if plan.updates:
                await self._conn.executemany(UPDATE_SYNCED, plan.updates)
                await self._conn.executemany(QUEUED_CANCEL, changed)
            if plan.removed:
                await self._conn.executemany(DELETE_TASK, [(i,) for i in plan.removed])
                await self._conn.executemany(QUEUED_CANCEL, removed)
        return plan.report

    async def edit_task(
        self,
        name: str,
        spec: TaskSpec,
        now: int,
        enabled: bool | None = None,
        generation: int | None = None,
        *,
        actor: Actor | None = None,
    ) -> Task:
        """Replace task `name`'s definition with `spec` (which may rename it), in one write:
        the generation is bumped, the next slot computed from `now`, the task's queued
        occurrences cancelled; runs in flight go on. The spec is checked again as
        build_spec would; a bad value or a name that is taken raises BadInput and nothing
        changes. Run-time state stays (the note; enabled unless `enabled` is given;
        source). A config task edited here is marked overridden and keeps the file's
        definition hash, so the hand edit lasts until the file's definition changes (see
        the module's docstring); editing it back to the file's definition clears the mark.
        A config task cannot be renamed here (the next sync would delete it and add the
        file's again). An interval keeps its grid (the row's anchor) unless the spec
        gives one, as sync_tasks does. `generation`: the one the edit was made from; a
        task changed since is not overwritten (BadInput)."""
        from tickui.common.errors import BadInput
        from tickui.model.spec import build_spec

        try:
            checked = build_spec(self._spec_fields(spec), now, allow_past=True)
        except (TypeError, ValueError) as exc:  # BadInput is a ValueError
            if isinstance(exc, BadInput):
                raise
            raise BadInput("spec", str(exc)) from None
        if checked != spec:
            raise BadInput("spec", "is not a definition build_spec gives (check its fields)")
        async with self._write():
            row = await self._one(
                "SELECT id, anchor, source, definition_hash, generation, spec FROM tasks"
                " WHERE name = ?",
                (name,),
            )
            if row is None:
                raise NotFound(f"no task named {name!r}")
            task_id, row_anchor, source, file_hash, now_generation, old_spec = row
            if generation is not None and generation != now_generation:
                raise BadInput("edit", f"{name!r} was changed meanwhile; run the edit again")
            if spec.name != name:
                if source == "config":
                    raise BadInput(
                        "name", f"{name!r} comes from tickui.toml: rename it in the file"
                    )
                taken = await self._one("SELECT 1 FROM tasks WHERE name = ?", (spec.name,))
                if taken is not None:
                    raise BadInput("name", f"a task named {spec.name!r} exists already")
            new_hash = spec.definition_hash()
            overridden = 0
            if source == "config":
                overridden = int(new_hash != file_hash)
                new_hash = file_hash
            anchor = spec.anchor if spec.anchor is not None else row_anchor
            nxt, due = next_slot(spec, anchor, now)
            await self._conn.execute(
                "UPDATE tasks SET name = ?, spec = ?, definition_hash = ?,"
                " generation = generation + 1, updated_at = ?, anchor = ?, next_run_at = ?,"
                " due_at = ?, overridden = ?, enabled = COALESCE(?, enabled) WHERE id = ?",
                (
                    spec.name,
                    spec.to_json(),
                    new_hash,
                    now,
                    anchor,
                    nxt,
                    due,
                    overridden,
                    None if enabled is None else int(enabled),
                    task_id,
                ),
            )
            await self._conn.execute(QUEUED_CANCEL, (now, "task edited", task_id))
            if actor is not None:
                said = self._edit_detail(old_spec, spec, name, enabled)
                await write_audit(self._conn, actor, "edit", spec.name, now, said)
        return await self.get_task(spec.name)

    def _edit_detail(
        self, old_spec: str, spec: TaskSpec, name: str, enabled: bool | None
    ) -> str | None:
        """What an edit changed, for its audit entry: the fields, a rename."""
        old = self._spec_fields(TaskSpec.from_json(old_spec))
        fields = [f for f in changed_fields(old, self._spec_fields(spec)) if f != "name"]
        parts = [f"renamed from {name}"] if spec.name != name else []
        if fields:
            parts.append("changed " + ", ".join(fields))
        if enabled is False:
            parts.append("disabled")
        return "; ".join(parts) or "no change"

    async def queue_backfill(
        self, name: str, slots: Sequence[int], now: int, *, actor: Actor | None = None
    ) -> tuple[list[int], list[int]]:
        """Queue one occurrence of kind `backfill` per slot (state queued, due at once),
        in one transaction. A slot that has a run already (an occurrence of kind
        scheduled or backfill that was not skipped; a backfill cancelled before it
        started is queued again) is left out. Returns (the queued ids,
        the slots left out). A disabled task is refused: its queued rows are cancelled."""
        from tickui.common.errors import BadInput
        from tickui.store.queue import Queued, insert_queued

        async with self._write():
            row = await self._one(
                "SELECT id, enabled, generation FROM tasks WHERE name = ?", (name,)
            )
            if row is None:
                raise NotFound(f"no task named {name!r}")
            task_id, enabled, generation = row
            if not enabled:
                raise BadInput("name", f"{name!r} is disabled: enable it to backfill")
            had = await self._all(
                "SELECT scheduled_for, id, kind = 'backfill' AND state = 'cancelled'"
                " AND started_at IS NULL FROM occurrences WHERE task_id = ?"
                " AND kind IN ('scheduled', 'backfill') AND state <> 'skipped'"
                " AND scheduled_for BETWEEN ? AND ? AND attempt = 1",
                (task_id, min(slots), max(slots)),
            )
            taken = {r[0] for r in had if not r[2]}
            # A backfill cancelled before it started never ran: queued again, same row.
            again = {r[0]: r[1] for r in had if r[2]}
            ids: list[int] = []
            left = [slot for slot in slots if slot in taken]
            for slot in slots:
                if slot in taken:
                    continue
                if slot in again:
                    await self._conn.execute(
                        "UPDATE occurrences SET state = 'queued', finished_at = NULL,"
                        " detail = NULL, claimed_at = ?, generation = ? WHERE id = ?",
                        (now, generation, again[slot]),
                    )
                    ids.append(again[slot])
                    continue
                item = Queued(task_id, name, "backfill", slot, generation)
                new = await insert_queued(self._conn, item, now)
                if new is None:
                    left.append(slot)
                else:
                    ids.append(new)
            if actor is not None:
                said = (
                    f"slots {iso(min(slots))} to {iso(max(slots))}: {len(ids)} queued,"
                    f" {len(left)} had a run"
                )
                await write_audit(self._conn, actor, "backfill", name, now, said)
        return ids, sorted(left)

    async def cancel_backfill(self, name: str, now: int, *, actor: Actor | None = None) -> int:
        """Cancel the task's queued backfill occurrences (those running go on)."""
        task = await self.get_task(name)
        async with self._write():
            cursor = await self._conn.execute(
                "UPDATE occurrences SET state = 'cancelled', finished_at = ?,"
                " detail = 'backfill cancelled' WHERE task_id = ? AND kind = 'backfill'"
                " AND state = 'queued'",
                (now, task.id),
            )
            count = cursor.rowcount
            if actor is not None:
                said = f"{count} queued backfill run(s) cancelled"
                await write_audit(self._conn, actor, "backfill-cancel", name, now, said)
        return count

    @staticmethod
    def _spec_fields(spec: TaskSpec) -> dict[str, Any]:
        from tickui.model.export import spec_fields

        return spec_fields(spec)
