"""Starting queued occurrences (retries, buffer_one's waiting slot, backfills): a part
of SchedulerEngine (tickui/engine.py holds the state). What starts, is skipped or is
cancelled is decided in tickui/queueing.py."""

from __future__ import annotations

from collections import Counter

from tickui.dispatch import Job
from tickui.engine.records import EngineChange
from tickui.model.queueing import plan_queued
from tickui.model.records import Task


class QueuedStarts:
    """The scan's queued part, and which buffer_one tasks have a slot waiting."""

    async def _scan_queued(self, now: int) -> None:
        """Start, skip or cancel the due queued occurrences (retries, buffer_one's waiting
        slot, backfills): see tickui/queueing.py."""
        rows = await self.store.due_queued(now, self.config.batch)
        if not rows:
            return
        tasks = {t.id: t for t in await self.store.tasks_by_id(sorted({o.task_id for o in rows}))}
        active = Counter(o.task_id for o in await self.store.active_occurrences())
        plan = plan_queued(rows, tasks, active, now, self.grace, self._waited)
        assert self._lease.token is not None
        started = await self.store.take_queued(
            plan.start, plan.skip, plan.cancel, self.owner, self._lease.token, now
        )
        self._waited = (self._waited | set(plan.waiting)) - set(plan.start)
        if len(self._waited) > 100_000:
            self._waited = set(plan.waiting)
        await self._dispatch([Job(tasks[o.task_id], o) for o in started], queued=True)
        self._notify(EngineChange(frozenset(tasks), frozenset(o.id for o in rows)))

    async def _buffered(self, page: list[Task]) -> set[int]:
        """buffer_one: the page's buffer_one tasks that have a run waiting already (a
        buffered slot or a retry: at most one waits)."""
        ids = [task.id for task in page if task.spec.concurrency == "buffer_one"]
        if not ids:
            return set()
        return {occ.task_id for occ in await self.store.queued_of(ids) if occ.kind != "backfill"}
