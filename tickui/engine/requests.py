"""Run-now requests and cancels: a part of SchedulerEngine (tickui/engine.py, which
holds the state these methods use)."""

from __future__ import annotations

import contextlib

from tickui.common.errors import TickuiError
from tickui.dispatch import Job
from tickui.engine.records import EngineChange
from tickui.model.planning import run_now_refusal
from tickui.model.records import Occurrence, Task
from tickui.store import Store


class RunNowRefused(TickuiError):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"run-now refused ({code}): {reason}")
        self.code = code
        self.reason = reason


async def queue_run_now(store: Store, task: Task, now: int) -> int:
    """Leave a run-now request for whichever engine holds the lease (or starts next).
    What can be refused here (disabled, active under forbid) is recorded and raised."""
    active = any(o.task_id == task.id for o in await store.active_occurrences())
    request = await store.add_request(task, "run_now", now)
    refusal = run_now_refusal(task.enabled, task.spec.concurrency, active)
    if refusal is not None:
        await store.finish_request(request, now, "refused", None, f"{refusal[0]}: {refusal[1]}")
        raise RunNowRefused(*refusal)
    return request


CANCEL_BACKFILL = "cancel_backfill"  # a request kind (commands.py leaves it)


class RunsOnRequest:
    """run_now, the run-now requests left for the lease holder, cancel."""

    async def run_now(self, name: str) -> Occurrence:
        """Start a manual occurrence now; the schedule does not move. Refusals are stored."""
        now = self.clock.now()
        task = await self.store.get_task(name)
        request = await self.store.add_request(task, "run_now", now)
        return await self._run_now(task, request, now)

    async def _run_now(self, task: Task, request: int, now: int) -> Occurrence:
        active = [o for o in await self.store.active_occurrences() if o.task_id == task.id]
        refusal = run_now_refusal(task.enabled, task.spec.concurrency, bool(active))
        if refusal is None and self._lease.token is None:
            refusal = ("STANDBY", "this engine does not hold the lease")
        if refusal is not None:
            await self.store.finish_request(
                request, now, "refused", None, f"{refusal[0]}: {refusal[1]}"
            )
            raise RunNowRefused(*refusal)
        occ = await self.store.claim_manual(task, self.owner, self._lease.token, now)
        await self.store.finish_request(request, now, "started", occ.id, None)
        if task.spec.concurrency == "replace":
            for old in active:
                await self.dispatcher.cancel(old.id, "replaced")
        await self._dispatch([Job(task, occ)])
        await self.reconcile()
        self._notify(EngineChange(frozenset({task.id}), frozenset({occ.id})))
        return await self.store.get_occurrence(occ.id)

    async def _handle_requests(self, now: int) -> None:
        for request in await self.store.pending_requests():
            task = await self.store.find_task(request.task)
            if task is None or task.id != request.task_id:
                await self.store.finish_request(
                    request.id, now, "refused", None, "TASK_GONE: the task was removed"
                )
                continue
            if request.kind == CANCEL_BACKFILL:
                await self._cancel_backfill(task, request.id, now)
                continue
            with contextlib.suppress(RunNowRefused):
                await self._run_now(task, request.id, now)

    async def _cancel_backfill(self, task: Task, request: int, now: int) -> None:
        """`task backfill NAME --cancel` from another process: its waiting runs it
        cancelled itself; the running ones are this engine's to end (then never retried)."""
        running = [
            o.id
            for o in await self.store.active_occurrences()
            if o.task_id == task.id and o.kind == "backfill"
        ]
        ended = [occ_id for occ_id in running if await self.cancel(occ_id)]
        await self.store.finish_request(
            request, now, "done", None, f"cancelled {len(ended)} running backfill run(s)"
        )

    async def cancel(self, occurrence_id: int) -> bool:
        """Cancel a running occurrence this engine started, or a queued one."""
        done = await self.dispatcher.cancel(occurrence_id, "cancelled_by_user")
        if not done:
            now = self.clock.now()
            done = await self.store.cancel_queued_occurrence(
                occurrence_id, now, "cancelled_by_user"
            )
        await self.reconcile()
        return done
