"""The scheduler engine: scans on ticks, claims due slots, dispatches, reconciles.

The engine owns no timer of its own. Whoever drives it (the ticker, a test with a
manual clock) calls `tick(now)`; tick precision is scheduling precision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tickui import procs
from tickui.clock import Clock
from tickui.dispatch import Dispatcher, DispatchFailure, Job, NotStarted
from tickui.dispatch.containment import end_orphaned_run
from tickui.errors import TickuiError
from tickui.faults import fault_text, is_disk_full
from tickui.lease import LeaseKeeper
from tickui.models import Occurrence, Task
from tickui.occurrence import Change, Progress, fold_events
from tickui.planning import DueTask, Plan, plan_task, run_now_refusal
from tickui.queueing import plan_queued
from tickui.redact import redact
from tickui.store import LeaseLost, Store
from tickui.timeutil import MICROS

log = logging.getLogger("tickui.engine")


@dataclass(frozen=True)
class EngineConfig:
    misfire_grace: int = 5 * MICROS
    lease_ttl: int = 30 * MICROS
    stop_grace: float = 10.0
    keep: int = 1000
    batch: int = 1000
    tick_period: int = MICROS
    prune_every: int = 60 * MICROS
    owner: str | None = None
    # E: scan as soon as a run ends while a queued row is due (buffer_one's waiting slot
    # starts within ms, not at the next tick). tickui run and the dashboard turn it on;
    # tests that step a manual clock scan when they say.
    scan_on_end: bool = False


@dataclass(frozen=True)
class EngineStatus:
    """A snapshot for the UI and CLI; every time is engine-clock microseconds."""

    running: bool
    owner: str
    lease_state: str  # held | standby | none
    holder: str | None
    lease_expires_at: int | None
    last_scan_at: int | None
    result: str | None  # ok | standby | waiting_runtime | error
    detail: str | None
    next_scan_at: int | None
    counts: dict[str, int]
    coalesced: int
    was_standby: bool
    warning: str | None = None  # something degraded while scanning works (run output)

    def to_json(self) -> dict[str, object]:
        from tickui.timeutil import iso

        return {
            "running": self.running,
            "owner": self.owner,
            "lease_state": self.lease_state,
            "holder": self.holder,
            "lease_expires_at": iso(self.lease_expires_at),
            "last_scan_at": iso(self.last_scan_at),
            "result": self.result,
            "detail": self.detail,
            "next_scan_at": iso(self.next_scan_at),
            "counts": dict(self.counts),
            "coalesced_scans": self.coalesced,
            "was_standby": self.was_standby,
            "warning": self.warning,
        }


@dataclass(frozen=True)
class EngineChange:
    """What changed, so a viewer can redraw only those rows."""

    tasks: frozenset[int] = frozenset()
    occurrences: frozenset[int] = frozenset()
    status: bool = False


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


NOT_STARTED = "not_started: this engine lost its lease before starting it"


@dataclass
class _Scan:
    at: int | None = None
    result: str | None = None
    detail: str | None = None
    counts: Counter[str] = field(default_factory=Counter)


def default_owner() -> str:
    return f"{procs.host()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class SchedulerEngine:
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
        self._lease = LeaseKeeper(store, clock, self.owner, self.config.lease_ttl)
        self._scan = _Scan()
        self._running = False
        self._scanning = asyncio.Lock()
        self._reconciling = asyncio.Lock()
        self._wake = asyncio.Event()
        self._reconciler: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[EngineChange], None]] = []
        self._coalesced = 0
        self._last_prune: int | None = None
        self._wake_after_scan = False
        self._receipts: dict[
            int, dict[str, object]
        ] = {}  # occurrence id -> receipt not yet written
        self._faults: dict[str, str] = {}  # what failed -> its error, logged once per outage
        self._waited: set[int] = set()  # queued rows seen due and held back (not missed)
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
        said = []
        for attribute, what in (
            ("recording_problem", "run events not recorded"),
            ("output_problem", "run output not written"),
        ):
            problem = getattr(self.dispatcher, attribute, None)
            if isinstance(problem, str):
                said.append(f"{what} ({problem})")
        return "; ".join(said) or None

    # ---- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        if self._running:
            return
        self._running = True
        await self.store.list_tasks(with_stats=False)  # parses every definition once, up front
        self._reconciler = asyncio.create_task(self._reconcile_loop(), name="tickui-reconcile")
        await self.tick(self.clock.now())

    async def stop(self, grace: float | None = None) -> None:
        """End scanning, let active runs finish (bounded), cancel the rest, free the lease."""
        if not self._running:
            return
        self._running = False
        async with self._scanning:
            pass
        await self.dispatcher.shutdown(self.config.stop_grace if grace is None else grace)
        await self.reconcile()
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
            self._reconciler = None
        with contextlib.suppress(Exception):
            await self._lease.release()
        await self.refresh_counts()
        self._notify(EngineChange(status=True))

    # ---- the scan ------------------------------------------------------------------------

    async def tick(self, now: int) -> None:
        """Scan once at `now`. A tick that arrives while a scan runs is coalesced."""
        if not self._running:
            return
        if self._scanning.locked():
            self._coalesced += 1
            return
        async with self._scanning:
            try:
                if await self._hold_lease(now):
                    if self._receipts or await self.store.scan_has_work(now):
                        await self._handle_requests(now)
                        await self._scan_queued(now)
                        await self._scan_due(now)
                        await self.reconcile()
                    await self._maybe_prune(now)
                    self._set_result(now, "ok", None)
                else:
                    holder = self._lease.seen
                    who = f"lease held by {holder.owner}" if holder else "lease unavailable"
                    self._set_result(now, "standby", who)
                self._recovered("scan")
            except LeaseLost as exc:
                self._lease.lost()
                self._set_result(now, "standby", str(exc))
            except Exception as exc:
                self._set_result(now, "error", self._faulted("scan", exc))
        if self._wake_after_scan:
            self._wake_after_scan = False
            self._wake.set()
        self._notify(EngineChange(status=True))

    def _set_result(self, now: int, result: str, detail: str | None) -> None:
        self._scan.at, self._scan.result, self._scan.detail = now, result, detail

    def _faulted(self, what: str, exc: BaseException) -> str:
        """The one-line, redacted text of a failure; logged once per outage, not per tick
        (a full disk would otherwise write a traceback every second)."""
        text = fault_text(exc)
        if self._faults.get(what) != text:
            self._faults[what] = text
            if is_disk_full(exc) or isinstance(exc, sqlite3.OperationalError):
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
        held, new = await self._lease.hold(now)
        if new:
            await self._recover(now)
        return held

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
        for start in range(0, len(due), self.config.batch):
            if not await self.may_start():  # a pause since the lease was last confirmed
                raise LeaseLost("the lease lapsed during the scan; claiming nothing more")
            page = await self.store.tasks_by_id(due[start : start + self.config.batch])
            waiting = await self._buffered(page)
            plans = [
                self._plan(task, now, bool(active.get(task.id)), task.id in waiting)
                for task in page
            ]
            await self._claim_and_dispatch({t.id: t for t in page}, plans, active, now)
            await asyncio.sleep(0)

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
        """E: buffer_one: the page's buffer_one tasks that have a slot waiting already (a
        queued first attempt of kind scheduled)."""
        ids = [task.id for task in page if task.spec.concurrency == "buffer_one"]
        if not ids:
            return set()
        return {
            occ.task_id
            for occ in await self.store.queued_of(ids)
            if occ.kind == "scheduled" and occ.attempt == 1
        }

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
        try:
            results = await self.dispatcher.dispatch(jobs, self.may_start)
            self._recovered("dispatch")
        except Exception as exc:  # a dispatcher must not raise; if one does, say so per run
            reason = self._faulted("dispatch", exc)
            results = [DispatchFailure("DISPATCH_FAILED", reason)] * len(jobs)
        now = self.clock.now()
        failed, unstarted = [], []
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, DispatchFailure):
                failed.append((job.occurrence.id, result.code, redact(result.detail)))
            elif isinstance(result, NotStarted):
                unstarted.append(job.occurrence.id)
            else:
                receipt: dict[str, object] = {"accepted_at": now}
                if result.command_id != job.occurrence.command_id:
                    receipt["command_id"] = result.command_id
                if result.log_path is not None:
                    receipt["log_path"] = result.log_path
                self._receipts[job.occurrence.id] = receipt
        await self.store.fail_occurrences(failed, now, states=("claimed",))
        if unstarted and queued:  # taken from the queue: back to it, for the lease holder
            await self.store.requeue(unstarted)
            log.warning("lease lost: %d queued run(s) not started, queued again", len(unstarted))
        elif unstarted:
            released = await self.store.release_unstarted(unstarted, now, NOT_STARTED)
            log.warning("lease lost: %d claimed run(s) not started, handed back", len(released))
            self._notify(EngineChange(occurrences=frozenset(unstarted)))

    # ---- run now, cancel -------------------------------------------------------------

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
            with contextlib.suppress(RunNowRefused):
                await self._run_now(task, request.id, now)

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

    # ---- settlement ----------------------------------------------------------------------

    async def reconcile(self) -> list[int]:
        """Move active occurrences by receipts and the runtime events after their cursors.

        Receipts held since dispatch are written here, in the same update as whatever the
        events already say, so a run that is accepted and finished costs one write.
        """
        changed: list[int] = []
        async with self._reconciling:
            receipts, self._receipts = self._receipts, {}
            after: int | None = 0
            while after is not None:
                pending, after = await self.store.unreconciled(after, self.config.batch)
                changes = [c for p, events in pending if (c := _fold(p, events, receipts))]
                await self.store.apply_changes(changes)
                changed.extend(c.id for c in changes if c.state)
                if after is not None:
                    await asyncio.sleep(0)
            if receipts:  # accepted, nothing heard yet
                await self.store.mark_accepted(
                    [(i, r.get("command_id"), r.get("log_path")) for i, r in receipts.items()],
                    min(r["accepted_at"] for r in receipts.values()),
                )
                changed.extend(receipts)
        if changed:
            self._notify(EngineChange(occurrences=frozenset(changed)))
        return changed

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._scanning.locked():
                self._wake_after_scan = True  # the scan reconciles as it ends
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

    # ---- recovery and pruning ------------------------------------------------------------

    async def _recover(self, now: int) -> None:
        """Runs left active by an engine that is gone end failed/INTERRUPTED, orphans killed."""
        await self.reconcile()
        assert self._lease.token is not None
        # This engine's own runs under an older token (its lease lapsed during a pause or
        # a wall-clock step, and no one else took it) are not orphans: its dispatcher
        # still watches them and records how they end. Only claims it never started
        # (their outcome could not be written) are left to recover.
        orphans = [
            occ
            for occ in await self.store.foreign_active(self._lease.token)
            if occ.owner != self.owner or occ.state == "claimed"
        ]
        failed = []
        for occ in orphans:
            killed = await _kill_orphan(occ)
            if occ.state == "claimed" and occ.pid is None:
                detail = f"engine {occ.owner} lost its lease; not known to have started"
            else:
                detail = f"engine {occ.owner} is gone" + (
                    "; its process group was killed" if killed else ""
                )
            failed.append((occ.id, "INTERRUPTED", detail))
        await self.store.fail_occurrences(failed, now)
        if failed:
            log.warning("recovered %d interrupted occurrence(s)", len(failed))
            self._notify(EngineChange(occurrences=frozenset(o.id for o in orphans)))

    async def _maybe_prune(self, now: int) -> None:
        if self._last_prune is None:
            self._last_prune = now - self.config.prune_every // 2  # not in the first scan
        if now - self._last_prune < self.config.prune_every:
            return
        self._last_prune = now
        for path in await self.store.prune(self.config.keep):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _fold(progress: Progress, events: list, receipts: dict[int, dict]) -> Change | None:
    """Events folded into an occurrence, with its dispatch receipt when one is pending."""
    receipt = receipts.pop(progress.id, None)
    if receipt is None:
        return fold_events(progress, events)
    accepted = progress.state == "claimed"
    start = (
        Progress(progress.id, "accepted", progress.command_id, progress.run_id, progress.cursor)
        if accepted
        else progress
    )
    change = fold_events(start, events) or Change(progress.id, progress.cursor)
    state = change.state or ("accepted" if accepted else None)
    return Change(change.id, change.cursor, state, {**receipt, **change.fields})


async def _kill_orphan(occ: Occurrence) -> bool:
    """End what a vanished engine on this host left running of `occ`: its group and every
    descendant, wherever it was reparented. Another host's processes are not ours to signal."""
    if (occ.owner or "").split(":", 1)[0] != procs.host():
        return False
    return await end_orphaned_run(occ) > 0
