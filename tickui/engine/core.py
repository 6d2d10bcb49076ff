"""The scheduler engine: scans on ticks, claims due slots, dispatches, reconciles.

The engine owns no timer of its own. Whoever drives it (the ticker, a test with a
manual clock) calls `tick(now)`; tick precision is scheduling precision.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from tickui.common.clock import Clock
from tickui.common.collector import paused_collector
from tickui.common.faults import fault_text, is_outage
from tickui.common.redact import redact
from tickui.common.tasks import outlive
from tickui.dispatch import Dispatcher, DispatchFailure, Job, NotStarted
from tickui.engine.lease import LeaseKeeper
from tickui.engine.queued import QueuedStarts
from tickui.engine.records import (
    NOT_STARTED,
    EngineChange,
    EngineConfig,
    EngineStatus,
    default_owner,
)
from tickui.engine.recovery import Pruning, Recovery
from tickui.engine.requests import CANCEL_BACKFILL, RunNowRefused
from tickui.engine.settle import Settlement
from tickui.engine.shipping import RecordShipping
from tickui.model.audit import Actor
from tickui.model.planning import DueTask, Plan, plan_task, run_now_refusal
from tickui.model.records import Occurrence, Task
from tickui.store import LeaseLost, Store

log = logging.getLogger("tickui.engine")


@dataclass
class _Scan:
    at: int | None = None
    result: str | None = None
    detail: str | None = None
    counts: Counter[str] = field(default_factory=Counter)


class SchedulerEngine:
    """Scans on ticks, claims due slots, dispatches; runs now and cancels on request. The
    parts it holds: the lease (lease.LeaseKeeper), queued starts (queued.QueuedStarts),
    settlement (settle.Settlement), recovery and pruning (recovery.Recovery, Pruning)."""

    def __init__(
        self,
        store: Store,
        dispatcher: Dispatcher,
        clock: Clock,
        config: EngineConfig | None = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.clock = clock
        self.config = config or EngineConfig()
        self.owner = self.config.owner or default_owner()
        self._listeners: list[Callable[[EngineChange], None]] = []
        self._lease = LeaseKeeper(
            store, clock, self.owner, self.config.lease_ttl, dispatcher.lease_confirmed
        )
        self._settlement = Settlement(store, self.config.batch, self._notify)
        self._queued = QueuedStarts(store, self._lease, self.owner, self.config.batch)
        self._recovery = Recovery(store, dispatcher, self.owner)
        self._pruning = Pruning(store, self.config.keep, self.config.prune_every)
        self._shipping = RecordShipping(store, self.owner)
        self._scan = _Scan()
        self._running = False
        self._scanning = asyncio.Lock()
        self._wake = asyncio.Event()
        self._reconciler: asyncio.Task[None] | None = None
        self._asked = asyncio.Event()  # another process announced a request
        self._answerer: asyncio.Task[None] | None = None
        self._coalesced = 0
        self._worked = False  # a scan did work since the last checkpoint
        self._wake_after_scan = False
        self._faults: dict[str, str] = {}  # what failed -> its error, logged once per outage
        store.on_events(self._wake.set)

    # ---- observing -----------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running

    @property
    def holds_lease(self) -> bool:
        return self._lease.token is not None

    def subscribe(self, listener: Callable[[EngineChange], None]) -> None:
        self._listeners.append(listener)

    def _notify(self, change: EngineChange) -> None:
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("change listener failed")

    @property
    def grace(self) -> int:
        """On-time window: never shorter than two ticks, so time-lapse is not all misfires."""
        return max(self.config.misfire_grace, 2 * self.config.tick_period)

    def status(self) -> EngineStatus:
        seen = self._lease.seen
        last = self._scan.at
        return EngineStatus(
            running=self._running,
            owner=self.owner,
            lease_state=self._lease.state,
            holder=seen.owner if seen else None,
            lease_expires_at=seen.expires_at if seen else None,
            last_scan_at=last,
            result=self._scan.result,
            detail=self._scan.detail,
            next_scan_at=last + self.config.tick_period if last and self._running else None,
            counts=dict(self._scan.counts),
            coalesced=self._coalesced,
            was_standby=self._lease.was_standby,
            warning=self._warning(),
        )

    def _warning(self) -> str | None:
        return "; ".join(self.dispatcher.problems()) or None

    # ---- settling ---------------------------------------------------------------------

    async def reconcile(self) -> list[int]:
        """Move active occurrences by their receipts and runtime events (see Settlement)."""
        return await self._settlement.reconcile()

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._scanning.locked():
                self._wake_after_scan = True  # the lock's holder wakes this as it lets go
                continue
            try:
                changed = await self.reconcile()
                self._recovered("reconcile")
                # E: a run that ended may free a queued one (buffer_one's waiting slot, a
                # retry, a backfill): scan now rather than at the next tick.
                if (
                    self.config.scan_on_end
                    and changed
                    and await self.store.has_due_queued(self.clock.now())
                ):
                    await self.tick(self.clock.now())
            except Exception as exc:
                self._faulted("reconcile", exc)

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        if self._running:
            return
        self._running = True
        await self.store.list_tasks(with_stats=False)  # parses every definition once, up front
        # What is loaded by now (those definitions, the modules) lives as long as the engine:
        # out of the collector's reach, a full collection in a burst does not walk it again
        # (two of them took 50 ms of a 10,000-run burst). Still freed when no longer used.
        gc.freeze()
        await self.dispatcher.start()  # a remote dispatcher connects (in the background)
        self._reconciler = asyncio.create_task(self._reconcile_loop(), name="tickui-reconcile")
        self._answerer = asyncio.create_task(self._answer_requests(), name="tickui-requests")
        await self.tick(self.clock.now())

    async def stop(self, grace: float | None = None) -> None:
        """End scanning, let active runs finish (bounded), cancel the rest, free the lease."""
        if not self._running:
            return
        self._running = False
        async with self._scan_lock():
            pass
        self.store.hear_requests(None)
        await self.dispatcher.shutdown(self.config.stop_grace if grace is None else grace)
        await self.reconcile()
        for loop in (self._reconciler, self._answerer):
            if loop is not None:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop
        self._reconciler = self._answerer = None
        with contextlib.suppress(Exception):
            await self._lease.release()
        await self.refresh_counts()
        self._notify(EngineChange(status=True))

    # ---- the scan ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _scan_lock(self) -> AsyncIterator[None]:
        """The scan's lock. Run events that came while it was held were left for its
        holder (reconciling then would race the scan): whoever held it, a scan, an
        answer to a request or the stop, wakes the reconcile as it lets go."""
        try:
            async with self._scanning:
                yield
        finally:
            if self._wake_after_scan:
                self._wake_after_scan = False
                self._wake.set()

    async def tick(self, now: int) -> None:
        """Scan once at `now`. A tick that arrives while a scan runs is coalesced."""
        if not self._running:
            return
        if self._scanning.locked():
            self._coalesced += 1
            return
        async with self._scan_lock():
            try:
                if await self._hold_lease(now):
                    if self._settlement.holds_receipts or await self.store.scan_has_work(now):
                        # A scan with work makes and drops objects by the page (tasks,
                        # plans, runs, events; 10,000 due at once: some 300 collections,
                        # an eighth of the scan's time): the cyclic collector waits for its
                        # end. Nothing else changes: objects are freed as before.
                        with paused_collector():
                            await self._handle_requests(now)
                            await self._scan_queued(now)
                            await self._scan_due(now)
                            await self.reconcile()
                        self._worked = True
                    elif self._worked:  # the first quiet scan after work: fold the WAL in
                        self._worked = False
                        await self.store.checkpoint()
                    await self._pruning.when_due(now)
                    await self._tend(now)
                    self._set_result(now, "ok", None)
                else:
                    holder = self._lease.seen
                    who = f"lease held by {holder.owner}" if holder else "lease unavailable"
                    self._set_result(now, "standby", who)
                    await self._shipping.when_due(now)
                self._recovered("scan")
            except LeaseLost as exc:
                self._lost_lease()
                self._set_result(now, "standby", str(exc))
            except Exception as exc:
                self._set_result(now, "error", self._faulted("scan", exc))
        self._notify(EngineChange(status=True))

    async def _tend(self, now: int) -> None:
        """A remote dispatcher settles, on this clock, what its workers will not report
        (a deadline passed, a worker gone silent)."""
        await self.dispatcher.tend(now)

    def _set_result(self, now: int, result: str, detail: str | None) -> None:
        self._scan.at, self._scan.result, self._scan.detail = now, result, detail

    def _faulted(self, what: str, exc: BaseException) -> str:
        """The one-line, redacted text of a failure; logged once per outage, not per tick
        (a full disk would otherwise write a traceback every second)."""
        text = fault_text(exc)
        if self._faults.get(what) != text:
            self._faults[what] = text
            if is_outage(exc):
                log.warning("%s failed: %s (logged once until it recovers)", what, text)
            else:
                log.exception("%s failed (logged once until it recovers)", what)
        return text

    def _recovered(self, what: str) -> None:
        fault = self._faults.pop(what, None)
        if fault is not None:
            log.warning("%s works again after: %s", what, fault)

    async def refresh_counts(self) -> None:
        """Recount occurrences by state for `status()`; a scan of all history, so it is
        left to whoever shows the counts rather than done on every tick."""
        with contextlib.suppress(Exception):
            self._scan.counts = Counter(await self.store.state_counts())

    async def _hold_lease(self, now: int) -> bool:
        """Take or renew the lease; while it is held, requests announced are heard."""
        held, new = await self._lease.hold(now)
        self.store.hear_requests(self._asked.set if held else None)
        if new:
            await self._recover(now)
        return held

    def _lost_lease(self) -> None:
        self._lease.lost()
        self.store.hear_requests(None)

    async def _recover(self, now: int) -> None:
        """Runs left active by an engine that is gone end failed/INTERRUPTED, orphans killed."""
        await self.reconcile()
        assert self._lease.token is not None
        ended = await self._recovery.recover(self._lease.token, now)
        if ended:
            await self.reconcile()  # what their journals said, appended as their events
            self._notify(EngineChange(occurrences=ended))

    async def may_start(self) -> bool:
        """The fence the dispatcher asks just before each start (see LeaseKeeper)."""
        return await self._lease.may_start()

    async def _scan_due(self, now: int) -> None:
        """Claim and dispatch due tasks a page at a time, yielding between pages."""
        due = await self.store.due_task_ids(now)
        if not due:
            return
        active: dict[int, list[Occurrence]] = {}
        for occ in await self.store.active_occurrences():
            active.setdefault(occ.task_id, []).append(occ)
        batch = self.config.batch
        pages = [due[start : start + batch] for start in range(0, len(due), batch)]
        # Each page is read and planned while the one before it is claimed: the loop plans
        # while the store's thread writes. A page's tasks are none of another's.
        planning = asyncio.create_task(self._read_and_plan(pages[0], active, now))
        settling: asyncio.Task[list[int]] | None = None
        try:
            for index in range(len(pages)):
                page, plans = await planning
                if index + 1 < len(pages):
                    planning = asyncio.create_task(
                        self._read_and_plan(pages[index + 1], active, now)
                    )
                if not await self.may_start():  # a pause since the lease was last confirmed
                    raise LeaseLost("the lease lapsed during the scan; claiming nothing more")
                await self._claim_and_dispatch({t.id: t for t in page}, plans, active, now)
                # The pages dispatched so far are settled while the next one is claimed
                # (runs still being handed out are left alone: see Settlement).
                if settling is None or settling.done():
                    if settling is not None:
                        settling.result()
                    settling = asyncio.create_task(self.reconcile())
                await asyncio.sleep(0)
            if settling is not None:
                await settling
        finally:  # a page planned and left unclaimed (the scan failed): it read, wrote nothing
            if not planning.done():
                planning.cancel()
            elif not planning.cancelled():
                planning.exception()  # retrieved: its failure, if any, is not this scan's
            await outlive(settling)  # its write ends before the scan does

    async def _read_and_plan(
        self, ids: list[int], active: dict[int, list[Occurrence]], now: int
    ) -> tuple[list[Task], list[Plan]]:
        page = await self.store.tasks_by_id(ids)
        waiting = await self._queued.buffered(page)
        plans = []
        for count, task in enumerate(page, 1):
            plans.append(self._plan(task, now, bool(active.get(task.id)), task.id in waiting))
            if count % 250 == 0:
                await asyncio.sleep(0)  # the claim before this page sends its next statement
        return page, plans

    def _plan(self, task: Task, now: int, active: bool, waiting: bool = False) -> Plan:
        spec = task.spec
        due = DueTask(
            task.id,
            task.name,
            task.schedule,
            task.next_run_at or 0,
            spec.misfire,
            spec.concurrency,
            spec.jitter,
            task.generation,
        )
        return plan_task(due, now, self.grace, active, waiting)

    async def _scan_queued(self, now: int) -> None:
        """Start, skip or cancel the due queued occurrences (retries, buffer_one's waiting
        slot, backfills): see tickui/model/queueing.py."""
        taken = await self._queued.take(now, self.grace)
        if taken is not None:
            jobs, change = taken
            await self._dispatch(jobs, queued=True)
            self._notify(change)

    async def _claim_and_dispatch(
        self,
        by_id: dict[int, Task],
        plans: list[Plan],
        active: dict[int, list[Occurrence]],
        now: int,
    ) -> None:
        assert self._lease.token is not None
        claimed = await self.store.claim(plans, self.owner, self._lease.token, now)
        for plan in plans:
            if plan.cancel_active:
                for occ in active.get(plan.task.id, []):
                    await self.dispatcher.cancel(occ.id, "replaced")
        to_run = [occ for occ in claimed if occ.state == "claimed"]
        await self._dispatch([Job(by_id[occ.task_id], occ) for occ in to_run])
        for occ in to_run:
            active.setdefault(occ.task_id, []).append(occ)
        self._notify(EngineChange(frozenset(by_id), frozenset(o.id for o in claimed)))

    async def _dispatch(self, jobs: list[Job], queued: bool = False) -> None:
        if not jobs:
            return
        ids = [job.occurrence.id for job in jobs]
        settlement = self._settlement
        settlement.handing_out(ids)  # until a reconcile takes their receipts
        try:
            results = await self.dispatcher.dispatch(jobs, self._lease.may_start)  # per start
            self._recovered("dispatch")
        except Exception as exc:  # a dispatcher must not raise; if one does, say so per run
            reason = self._faulted("dispatch", exc)
            results = [DispatchFailure("DISPATCH_FAILED", reason)] * len(jobs)
        except BaseException:
            settlement.not_handed_out(ids)
            raise
        now = self.clock.now()
        failed, unstarted = [], []
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, DispatchFailure):
                failed.append((job.occurrence.id, result.code, redact(result.detail)))
                settlement.not_handed_out([job.occurrence.id])
            elif isinstance(result, NotStarted):
                unstarted.append(job.occurrence.id)
                settlement.not_handed_out([job.occurrence.id])
            else:
                receipt: dict[str, object] = {"accepted_at": now}
                if result.command_id != job.occurrence.command_id:
                    receipt["command_id"] = result.command_id
                if result.log_path is not None:
                    receipt["log_path"] = result.log_path
                settlement.accepted(job.occurrence.id, receipt)
        await self.store.fail_occurrences(failed, now, states=("claimed",))
        if unstarted and queued:  # taken from the queue: back to it, for the lease holder
            await self.store.requeue(unstarted)
            log.warning("lease lost: %d queued run(s) not started, queued again", len(unstarted))
        elif unstarted:
            released = await self.store.release_unstarted(unstarted, now, NOT_STARTED)
            log.warning("lease lost: %d claimed run(s) not started, handed back", len(released))
            self._notify(EngineChange(occurrences=frozenset(unstarted)))

    # ---- on request ----------------------------------------------------------------------

    async def run_now(self, name: str, actor: Actor | None = None) -> Occurrence:
        """Start a manual occurrence now; the schedule does not move. Refusals are stored.
        `actor`: the person asking (audited with the request)."""
        now = self.clock.now()
        task = await self.store.get_task(name)
        request = await self.store.add_request(task, "run_now", now, actor=actor)
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

    async def _answer_requests(self) -> None:
        """Requests another process announced (Store.announce_request), taken at once
        rather than at the next tick; after the scan under way, if one is."""
        while True:
            await self._asked.wait()
            self._asked.clear()
            async with self._scan_lock():
                now = self.clock.now()
                try:
                    if self._running and await self._hold_lease(now):
                        await self._handle_requests(now)
                        self._worked = True
                    self._recovered("requests")
                except LeaseLost:
                    self._lost_lease()
                except Exception as exc:
                    self._faulted("requests", exc)
            self._notify(EngineChange(status=True))

    async def _handle_requests(self, now: int) -> None:
        """The run-now and cancel requests other processes left (see requests.py)."""
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

    async def cancel(self, occurrence_id: int, actor: Actor | None = None) -> bool:
        """Cancel a running occurrence this engine started, or a queued one. `actor`: the
        person cancelling, audited once the cancel is done (a queued one's in its write)."""
        done = await self.dispatcher.cancel(occurrence_id, "cancelled_by_user")
        if done and actor is not None:
            occ = await self.store.get_occurrence(occurrence_id)
            await self.store.record_audit(
                actor, "cancel", occ.task, self.clock.now(), "running run", occurrence_id
            )
        if not done:
            now = self.clock.now()
            done = await self.store.cancel_queued_occurrence(
                occurrence_id, now, "cancelled_by_user", actor=actor
            )
        await self.reconcile()
        return done
