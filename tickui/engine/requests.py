"""Run-now requests left for whichever engine holds the lease, and why one is refused.
The lease holder's side (`SchedulerEngine.run_now`, the requests it finds) is in core."""

from __future__ import annotations

from tickui.common.errors import TickuiError
from tickui.model.audit import Actor
from tickui.model.planning import run_now_refusal
from tickui.model.records import Task
from tickui.store import Store


class RunNowRefused(TickuiError):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"run-now refused ({code}): {reason}")
        self.code = code
        self.reason = reason


async def queue_run_now(store: Store, task: Task, now: int, actor: Actor | None = None) -> int:
    """Leave a run-now request for whichever engine holds the lease (or starts next),
    and tell it so: it takes the request at once, not at its next tick.
    What can be refused here (disabled, active under forbid) is recorded and raised.
    `actor`: the person asking (their audit entry is written with the request)."""
    active = any(o.task_id == task.id for o in await store.active_occurrences())
    request = await store.add_request(task, "run_now", now, actor=actor)
    refusal = run_now_refusal(task.enabled, task.spec.concurrency, active)
    if refusal is not None:
        await store.finish_request(request, now, "refused", None, f"{refusal[0]}: {refusal[1]}")
        raise RunNowRefused(*refusal)
    await store.announce_request()
    return request


CANCEL_BACKFILL = "cancel_backfill"  # a request kind (`task backfill --cancel` leaves it)
