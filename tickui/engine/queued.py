"""Starting queued occurrences (retries, buffer_one's waiting slot, backfills). What
starts, is skipped or is cancelled is decided in tickui/model/queueing.py."""

from __future__ import annotations

from collections import Counter

from tickui.dispatch import Job
from tickui.engine.lease import LeaseKeeper
from tickui.engine.records import EngineChange
from tickui.model.queueing import plan_queued
from tickui.model.records import Task
from tickui.store import Store

WAITED_KEPT = 100_000  # held-back rows remembered before the memory starts over


class QueuedStarts:
    """The scan's queued part, and which buffer_one tasks have a slot waiting. Remembers
    the queued rows seen due and held back, so they are not counted missed."""

    def __init__(self, store: Store, lease: LeaseKeeper, owner: str, batch: int) -> None:
        self.store = store
        self.lease = lease
        self.owner = owner
        self.batch = batch
        self._waited: set[int] = set()

    async def take(self, now: int, grace: int) -> tuple[list[Job], EngineChange] | None:
        """Take the due queued occurrences to start (skipping or cancelling the rest):
        the jobs to dispatch and what changed, or None when nothing is due."""
        rows = await self.store.due_queued(now, self.batch)
        if not rows:
            return None
        tasks = {t.id: t for t in await self.store.tasks_by_id(sorted({o.task_id for o in rows}))}
        active = Counter(o.task_id for o in await self.store.active_occurrences())
        plan = plan_queued(rows, tasks, active, now, grace, self._waited)
        assert self.lease.token is not None
        started = await self.store.take_queued(
            plan.start, plan.skip, plan.cancel, self.owner, self.lease.token, now
        )
        self._waited = (self._waited | set(plan.waiting)) - set(plan.start)
        if len(self._waited) > WAITED_KEPT:
            self._waited = set(plan.waiting)
        jobs = [Job(tasks[o.task_id], o) for o in started]
        return jobs, EngineChange(frozenset(tasks), frozenset(o.id for o in rows))

    async def buffered(self, page: list[Task]) -> set[int]:
        """buffer_one: the page's buffer_one tasks that have a run waiting already (a
        buffered slot or a retry: at most one waits)."""
        ids = [task.id for task in page if task.spec.concurrency == "buffer_one"]
        if not ids:
            return set()
        return {occ.task_id for occ in await self.store.queued_of(ids) if occ.kind != "backfill"}
