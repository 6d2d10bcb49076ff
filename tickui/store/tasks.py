"""Task rows: add, find, list with their stats, enable or disable, remove, and the
sync of the tasks a config file declares."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from tickui.errors import NotFound
from tickui.models import STATS_WINDOW, Task, TaskStats
from tickui.occurrence import ACTIVE
from tickui.schedules import jitter_offset
from tickui.spec import TaskSpec
from tickui.store.base import NO_STATS, SPEC_CACHE_MAX, StoreBase
from tickui.timeutil import MICROS


@dataclass(slots=True)
class SyncReport:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def default_anchor(spec: TaskSpec, now: int) -> int:
    """An interval task's grid starts at its creation, rounded up to a whole second so
    that slots fall on the ticker's second boundaries."""
    if spec.anchor is not None:
        return spec.anchor
    return -(-now // MICROS) * MICROS


class TaskQueries(StoreBase):
    """Task rows and what the history says of each."""

    # ---- tasks -----------------------------------------------------------------------

    _TASK_COLS = (
        "id, name, spec, source, enabled, note, generation, created_at, updated_at, anchor, "
        "next_run_at, due_at"
    )

    def _task(self, row: Any, stats: TaskStats | None = None) -> Task:
        spec = self._specs.get(row[2])
        if spec is None:
            if len(self._specs) > SPEC_CACHE_MAX:
                self._specs.clear()
            spec = self._specs[row[2]] = TaskSpec.from_json(row[2])
        return Task(
            id=row[0],
            name=row[1],
            spec=spec,
            source=row[3],
            enabled=bool(row[4]),
            note=row[5],
            generation=row[6],
            created_at=row[7],
            updated_at=row[8],
            anchor=row[9],
            next_run_at=row[10],
            due_at=row[11],
            stats=stats or NO_STATS,
        )

    @staticmethod
    def _next(spec: TaskSpec, name: str, anchor: int, after: int) -> tuple[int | None, int | None]:
        """The next slot strictly after `after`, and when it is due (with jitter)."""
        slot = spec.schedule(anchor).next_after(after)
        if slot is None:
            return None, None
        return slot, slot + jitter_offset(name, slot, spec.jitter)

    async def _insert_task(self, spec: TaskSpec, now: int, source: str) -> None:
        """Insert a new task row, its first slot computed from its anchor (in a write)."""
        anchor = default_anchor(spec, now)
        nxt, due = self._next(spec, spec.name, anchor, now - 1)
        await self._conn.execute(
            "INSERT INTO tasks (name, spec, definition_hash, source, enabled, created_at,"
            " updated_at, anchor, next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (
                spec.name,
                spec.to_json(),
                spec.definition_hash(),
                source,
                int(spec.enabled),
                now,
                now,
                anchor,
                nxt,
                due,
            ),
        )

    async def add_task(self, spec: TaskSpec, now: int, source: str = "cli") -> Task:
        try:
            async with self._write():
                await self._insert_task(spec, now, source)
        except sqlite3.IntegrityError:
            from tickui.errors import BadInput

            raise BadInput("name", f"a task named {spec.name!r} exists already") from None
        return await self.get_task(spec.name)

    async def find_task(self, name: str) -> Task | None:
        row = await self._one(f"SELECT {self._TASK_COLS} FROM tasks WHERE name = ?", (name,))
        if row is None:
            return None
        stats = (await self.task_stats([row[0]])).get(row[0])
        return self._task(row, stats)

    async def get_task(self, name: str) -> Task:
        task = await self.find_task(name)
        if task is None:
            raise NotFound(f"no task named {name!r}")
        return task

    async def list_tasks(self, with_stats: bool = True) -> list[Task]:
        rows = await self._all(f"SELECT {self._TASK_COLS} FROM tasks ORDER BY name")
        stats = await self.task_stats() if with_stats else {}
        return [self._task(row, stats.get(row[0])) for row in rows]

    async def task_stats(self, ids: Iterable[int] | None = None) -> dict[int, TaskStats]:
        """One ordered pass over the tasks' occurrences (newest first per task, from
        occurrences_task_id): counts, the last row, and the last STATS_WINDOW finished runs'
        success rate and median duration. SQL window functions took twice as long here."""
        where, params = "", []
        if ids is not None:
            params = list(ids)
            if not params:
                return {}
            where = f"WHERE task_id IN ({','.join('?' * len(params))})"
        rows = await self._all(
            "SELECT task_id, state, missed, scheduled_for, started_at, finished_at"
            f" FROM occurrences {where} ORDER BY task_id DESC, id DESC",
            params,
        )
        return _stats_from(rows)

    async def set_enabled(
        self, name: str, enabled: bool, now: int, note: str | None = None
    ) -> Task:
        """Disable keeps history; enable schedules the next slot after now (no misfires)."""
        task = await self.get_task(name)
        if enabled:
            nxt, due = self._next(task.spec, name, task.anchor, now)
            sql = (
                "UPDATE tasks SET enabled = 1, note = NULL, next_run_at = ?, due_at = ?,"
                " updated_at = ? WHERE id = ?"
            )
            params: tuple[Any, ...] = (nxt, due, now, task.id)
        else:
            sql = "UPDATE tasks SET enabled = 0, note = ?, updated_at = ? WHERE id = ?"
            params = (note, now, task.id)
        async with self._write():
            await self._conn.execute(sql, params)
        return await self.get_task(name)

    async def remove_task(self, name: str) -> None:
        """Remove the task; its history stays (occurrences keep the task's name)."""
        task = await self.get_task(name)
        async with self._write():
            await self._conn.execute("DELETE FROM tasks WHERE id = ?", (task.id,))

    async def sync_tasks(self, specs: Sequence[TaskSpec], now: int) -> SyncReport:
        """Make the config-declared tasks match `specs` (DESIGN 6); CLI-made tasks are kept."""
        report = SyncReport()
        rows = await self._all("SELECT id, name, definition_hash, source, anchor FROM tasks")
        existing = {row[1]: row for row in rows}
        wanted = {spec.name for spec in specs}
        async with self._write():
            for spec in specs:
                row = existing.get(spec.name)
                if row is None:
                    await self._insert_task(spec, now, "config")
                    report.added.append(spec.name)
                elif row[2] != spec.definition_hash() or row[3] != "config":
                    keep_anchor = spec.anchor if spec.anchor is not None else row[4]
                    nxt, due = self._next(spec, spec.name, keep_anchor, now)
                    await self._conn.execute(
                        "UPDATE tasks SET spec = ?, definition_hash = ?, source = 'config',"
                        " enabled = ?, note = NULL, generation = generation + 1, updated_at = ?,"
                        " anchor = ?, next_run_at = ?, due_at = ? WHERE id = ?",
                        (
                            spec.to_json(),
                            spec.definition_hash(),
                            int(spec.enabled),
                            now,
                            keep_anchor,
                            nxt,
                            due,
                            row[0],
                        ),
                    )
                    report.updated.append(spec.name)
            for name, row in existing.items():
                if row[3] == "config" and name not in wanted:
                    await self._conn.execute("DELETE FROM tasks WHERE id = ?", (row[0],))
                    report.removed.append(name)
        return report

    async def edit_task(self, name: str, spec: TaskSpec, now: int) -> Task:
        """Replace task `name`'s definition with `spec` (which may rename it), in one write:
        the generation is bumped and the next slot computed from `now`; runs in flight go
        on. The spec is checked again as build_spec would; a bad value or a name that is
        taken raises BadInput and nothing changes. Run-time state stays (enabled, note,
        source: a config task edited here keeps source 'config', so the next sync of the
        config file puts the file's definition back). An interval keeps its grid (the
        row's anchor) unless the spec gives one, as sync_tasks does."""
        from tickui.errors import BadInput
        from tickui.spec import build_spec

        try:
            checked = build_spec(self._spec_fields(spec), now, allow_past=True)
        except (TypeError, ValueError) as exc:  # BadInput is a ValueError
            if isinstance(exc, BadInput):
                raise
            raise BadInput("spec", str(exc)) from None
        if checked != spec:
            raise BadInput("spec", "is not a definition build_spec gives (check its fields)")
        async with self._write():
            row = await self._one("SELECT id, anchor FROM tasks WHERE name = ?", (name,))
            if row is None:
                raise NotFound(f"no task named {name!r}")
            if spec.name != name:
                taken = await self._one("SELECT 1 FROM tasks WHERE name = ?", (spec.name,))
                if taken is not None:
                    raise BadInput("name", f"a task named {spec.name!r} exists already")
            anchor = spec.anchor if spec.anchor is not None else row[1]
            nxt, due = self._next(spec, spec.name, anchor, now)
            await self._conn.execute(
                "UPDATE tasks SET name = ?, spec = ?, definition_hash = ?,"
                " generation = generation + 1, updated_at = ?, anchor = ?, next_run_at = ?,"
                " due_at = ? WHERE id = ?",
                (
                    spec.name,
                    spec.to_json(),
                    spec.definition_hash(),
                    now,
                    anchor,
                    nxt,
                    due,
                    row[0],
                ),
            )
        return await self.get_task(spec.name)

    @staticmethod
    def _spec_fields(spec: TaskSpec) -> dict[str, Any]:
        """A TaskSpec as the fields build_spec takes, exactly (durations in whole ms or
        in seconds with six decimals, instants in ISO with microseconds)."""
        from tickui.timeutil import iso

        def duration(micros: int) -> str:
            return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{micros / MICROS:.6f}s"

        key = {"cron": "cron", "interval": "every", "once": "at"}[spec.kind]
        expr: Any = spec.expr
        if spec.kind == "interval":
            expr = duration(int(spec.expr))
        elif spec.kind == "once":
            expr = iso(int(spec.expr))
        raw: dict[str, Any] = {
            "name": spec.name,
            key: expr,
            "tz": spec.tz,
            "misfire": spec.misfire,
            "concurrency": spec.concurrency,
            "command": spec.command,
            "env": spec.env,
            "disabled": not spec.enabled,
        }
        if spec.timeout is not None:
            raw["timeout"] = duration(spec.timeout)
        if spec.jitter:
            raw["jitter"] = duration(spec.jitter)
        if spec.anchor is not None:
            raw["anchor"] = iso(spec.anchor)
        if spec.cwd is not None:
            raw["cwd"] = spec.cwd
        return raw


def _stats_from(rows: Iterable[Any]) -> dict[int, TaskStats]:
    """Rows (task_id, state, missed, scheduled_for, started_at, finished_at) grouped by
    task, newest first within a task."""
    result: dict[int, TaskStats] = {}
    durations: dict[int, list[int]] = {}
    succeeded: dict[int, int] = {}
    stats = TaskStats()
    took: list[int] = []
    current = None
    for task_id, state, missed, scheduled, started, finished in rows:
        if task_id != current:
            current = task_id
            stats = result[task_id] = TaskStats(state, scheduled, started, finished)
            took = durations[task_id] = []
            succeeded[task_id] = 0
        stats.missed += missed or 0
        if state == "skipped":
            stats.skipped += 1
        elif state in ACTIVE:
            stats.active += 1
        elif stats.finished < STATS_WINDOW:
            if stats.finished == 0:
                stats.last_result = state
            stats.finished += 1
            if state == "succeeded":
                succeeded[task_id] += 1
            if state != "cancelled" and started is not None and finished is not None:
                took.append(finished - started)
    for task_id, stats in result.items():
        if stats.finished:
            stats.success_rate = succeeded[task_id] / stats.finished
        took = durations[task_id]
        if took:
            stats.median_duration_us = round(median(took))
    return result
