"""Hooks beside a running engine: engine changes and breaker moves become events, events go
to the hooks that want them, each delivery recorded. Nothing here can block the engine or
the UI: listeners only note ids and wake a background task; deliveries wait in a bounded
queue (a full one drops and counts) for a few workers, each send bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tickui.common import procs
from tickui.common.clock import Clock
from tickui.common.redact import safe_text
from tickui.hooks.config import HookConfig
from tickui.hooks.delivery import send
from tickui.hooks.events import (
    HookEvent,
    audit_event,
    breaker_event,
    from_occurrence,
    is_paused,
    matches,
    occurrence_events,
    paused_event,
    refused_event,
)
from tickui.ticks.breaker import CLOSED, OPEN

if TYPE_CHECKING:
    import aiohttp

    from tickui.engine import EngineChange, SchedulerEngine
    from tickui.store import Store
    from tickui.ticks.ticker import RuntimeScheduler

log = logging.getLogger("tickui.hooks")

ATTEMPTS = 3
BACKOFF = (0.5, 1.0)  # seconds before the 2nd and the 3rd attempt
QUEUE_MAX = 256  # events waiting per hook
WORKERS = 2  # senders per hook: a hook that hangs holds up its own deliveries only
SEEN_MAX = 10_000
CLOSE_GRACE = 5.0  # seconds close() waits for queued deliveries
REFUSED_EVERY = 60 * 1_000_000  # a refusal kind is told at most this often per sender
STOPPED = "not delivered: tickui stopped first"
CRASHED = "not delivered: tickui ended before it (killed?)"
OCCURRENCE_EVENTS = frozenset({"failed", "recovered", "missed", "paused"})
AUDIT_EVERY = 0.5  # seconds between the lease holder's looks for new audit entries
AUDIT_BACKLOG = 600 * 1_000_000  # entries this old when hooks start are told (no engine ran)


class HookService:
    def __init__(
        self,
        hooks: Sequence[HookConfig],
        store: Store,
        clock: Clock,
        *,
        attempts: int = ATTEMPTS,
        backoff: Sequence[float] = BACKOFF,
        queue_max: int = QUEUE_MAX,
        workers: int = WORKERS,
        host: str | None = None,
    ) -> None:
        self.hooks = tuple(hooks)
        self.store = store
        self.clock = clock
        self.attempts = attempts
        self.backoff = tuple(backoff) or (0.0,)
        self.host = host or procs.host()
        self.since = clock.now()  # a pause older than this was told before (or never)
        self.counts: Counter[str] = Counter()  # delivered, failed, dropped, errors
        self.wanted = frozenset().union(*(h.on for h in self.hooks))
        self._queue_max = queue_max
        self._workers_n = workers
        self._changed_occ: set[int] = set()
        self._changed_tasks: set[int] = set()
        self._seen: OrderedDict[tuple[int, str], None] = OrderedDict()
        self._paused: dict[int, int] = {}  # task id -> updated_at of the pause told
        self._breaker_open = False
        self._inflight: set[int] = set()
        self._wake: asyncio.Event | None = None
        self._queues: dict[str, asyncio.Queue[tuple[HookConfig, HookEvent, int]]] = {}
        self._processor: asyncio.Task[None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self._closing = False
        self._busy = False
        self._fault: str | None = None
        self._dropped_said = 0
        self._listeners: list[Callable[[], None]] = []
        self._engine: SchedulerEngine | None = None
        self._refused_told: dict[tuple[str, str], int] = {}  # (who, kind) -> told at

    # ---- wiring --------------------------------------------------------------------

    def attach(self, engine: SchedulerEngine | None, ticker: RuntimeScheduler | None) -> None:
        if engine is not None and self.wanted & (OCCURRENCE_EVENTS | {"audit"}):
            self._engine = engine
            if self.wanted & OCCURRENCE_EVENTS:
                engine.subscribe(self._on_change)
        if ticker is not None and self.wanted & {"breaker_open", "breaker_closed"}:
            ticker.on_change(lambda: self._on_breaker(ticker))
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # built outside a loop: the first event starts the service
            return
        self._start()  # now: deliveries a killed tickui left pending are closed at once

    def begin(self) -> None:
        """Start the background work now, in the running loop (a service built outside
        one starts at its first event otherwise; the audit's reader has no such event)."""
        self._start()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` (in the loop) whenever a delivery is recorded or ends, or an
        event is dropped: for a viewer's redraw of recent deliveries."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("hook listener failed")

    def _on_change(self, change: EngineChange) -> None:
        """The engine's listener: notes ids and wakes the processor; no I/O here."""
        if self._closing or not (change.occurrences or change.tasks):
            return
        if self._engine is not None and not self._engine.holds_lease:
            return  # a standby's view of another engine's runs: that engine tells them
        self._changed_occ.update(change.occurrences)
        if "paused" in self.wanted:
            self._changed_tasks.update(change.tasks)
        self._start()
        assert self._wake is not None
        self._wake.set()

    def _on_breaker(self, ticker: RuntimeScheduler) -> None:
        """The ticker's listener (after every tick and breaker move): tells the breaker
        opening once per outage (a failed probe keeps it open, not a new outage) and its
        closing."""
        breaker = ticker.breaker
        state = breaker.state
        if state == OPEN and not self._breaker_open:
            self._breaker_open = True
        elif state == CLOSED and self._breaker_open:
            self._breaker_open = False
        else:
            return
        last = breaker.transitions[-1] if breaker.transitions else None
        at = last.at if last else self.clock.now()
        reason = last.reason if last else None
        self.emit(breaker_event(self._breaker_open, state, reason, at, self.host))

    def on_refused(self, who: str, kind: str, count: int, detail: str) -> None:
        """A refusal (the dispatcher's listener): told at once the first time for `who`
        and `kind`, then at most once a minute, with the count so far."""
        if "refused" not in self.wanted:
            return
        if self._engine is not None and not self._engine.holds_lease:
            return
        now = self.clock.now()
        last = self._refused_told.get((who, kind))
        if last is not None and now - last < REFUSED_EVERY:
            return
        self._refused_told[(who, kind)] = now
        self.emit(refused_event(who, kind, count, detail, now, self.host))

    def _start(self) -> None:
        if self._wake is not None or self._closing:
            return
        self._wake = asyncio.Event()
        self._processor = asyncio.create_task(self._process_loop(), name="tickui-hooks")
        for hook in self.hooks:  # each hook its own queue and senders
            queue: asyncio.Queue[tuple[HookConfig, HookEvent, int]] = asyncio.Queue(self._queue_max)
            self._queues[hook.name] = queue
            self._workers += [
                asyncio.create_task(self._worker(queue), name=f"tickui-hook-{hook.name}-{n}")
                for n in range(self._workers_n)
            ]
        self._workers.append(asyncio.create_task(self._fail_stale(), name="tickui-hooks-stale"))
        if "audit" in self.wanted and self._engine is not None:
            self._workers.append(asyncio.create_task(self._audit_loop(), name="tickui-hooks-audit"))

    async def _audit_loop(self) -> None:
        """The lease holder tells what people did: the audit entries no holder told yet
        (a command line's, another dashboard's, its own), as run-now requests reach it,
        through the store. Each is marked told before it is queued: told once, even when
        the lease moves."""
        engine = self._engine
        assert engine is not None
        since = self.since - AUDIT_BACKLOG
        while not self._closing:
            if engine.holds_lease:
                try:
                    entries = await self.store.untold_audit(since)
                    await self.store.mark_audit_told([e.id for e in entries], self.clock.now())
                except Exception as exc:
                    text = safe_text(f"{type(exc).__name__}: {exc}")
                    if text != self._fault:
                        self._fault = text
                        log.warning("hook events not read: %s (logged once)", text)
                    entries = []
                for entry in entries:
                    self.emit(audit_event(entry, self.host))
                if entries:
                    continue
            await asyncio.sleep(AUDIT_EVERY)

    async def _fail_stale(self) -> None:
        """Deliveries a previous tickui left pending (it was killed mid-send) end failed."""
        try:
            count = await self.store.fail_stale_deliveries(self.since, self.clock.now(), CRASHED)
        except Exception as exc:
            log.warning("hook deliveries left pending not closed: %s", safe_text(exc))
            return
        if count:
            log.warning("%d hook delivery(ies) left pending by an earlier tickui: failed", count)
            self._changed()

    # ---- from changes to events ----------------------------------------------------

    async def _process_loop(self) -> None:
        assert self._wake is not None
        while True:
            self._busy = False
            await self._wake.wait()
            self._busy = True
            self._wake.clear()
            while self._changed_occ or self._changed_tasks:
                occs, tasks = self._changed_occ, self._changed_tasks
                self._changed_occ, self._changed_tasks = set(), set()
                try:
                    for event in await self.events_for(occs, tasks):
                        self.emit(event)
                    if self._fault is not None:
                        log.warning("hook events work again after: %s", self._fault)
                        self._fault = None
                except Exception as exc:
                    self.counts["errors"] += 1
                    text = safe_text(f"{type(exc).__name__}: {exc}")
                    if text != self._fault:
                        self._fault = text
                        log.warning("hook events not read: %s (logged once)", text)
            if self._closing:
                return

    async def events_for(self, occurrence_ids: set[int], task_ids: set[int]) -> list[HookEvent]:
        """The events the changed occurrences and tasks mean, each told once."""
        events: list[HookEvent] = []
        tasks = set(task_ids)
        rows = await self.store.hook_occurrences(occurrence_ids) if occurrence_ids else []
        for row in rows:
            previous = None
            if row["state"] == "succeeded" and "recovered" in self.wanted:
                previous = await self.store.previous_result(row["task_id"], row["id"])
            for name in occurrence_events(row, previous):
                if name in self.wanted and self._first(row["id"], name):
                    events.append(from_occurrence(name, row, self.host))
            if row["state"] == "failed" and "paused" in self.wanted:
                tasks.add(row["task_id"])
        if tasks and "paused" in self.wanted:
            for task in await self.store.hook_tasks(tasks):
                if not is_paused(task, self.since):
                    self._paused.pop(task["id"], None)
                    continue
                if self._paused.get(task["id"]) == task["updated_at"]:
                    continue
                self._paused[task["id"]] = task["updated_at"]
                last = await self.store.last_failed(task["id"])
                events.append(paused_event(task, last, self.host))
        return events

    def _first(self, occurrence_id: int, event: str) -> bool:
        key = (occurrence_id, event)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
        return True

    def emit(self, event: HookEvent) -> None:
        """Queue `event` for every hook that wants it; a full queue drops it (counted)."""
        if self._closing:
            return
        self._start()
        for hook in self.hooks:
            if not matches(hook, event):
                continue
            try:
                self._queues[hook.name].put_nowait((hook, event, self.clock.now()))
            except asyncio.QueueFull:
                self.counts["dropped"] += 1
                self._changed()
                if self.counts["dropped"] - self._dropped_said >= 100 or not self._dropped_said:
                    self._dropped_said = self.counts["dropped"]
                    log.warning(
                        "hook %s: queue full (%d waiting): %d event(s) dropped so far",
                        hook.name,
                        self._queue_max,
                        self.counts["dropped"],
                    )

    # ---- delivery --------------------------------------------------------------------

    async def _worker(self, queue: asyncio.Queue[tuple[HookConfig, HookEvent, int]]) -> None:
        while True:
            hook, event, _queued_at = await queue.get()
            try:
                await self.deliver(hook, event)
            except Exception as exc:
                self.counts["errors"] += 1
                log.warning("hook %s: %s", hook.name, safe_text(f"{type(exc).__name__}: {exc}"))
            finally:
                queue.task_done()

    async def deliver(self, hook: HookConfig, event: HookEvent) -> tuple[str, int, str]:
        """Up to `attempts` sends, recorded; returns (outcome, attempts, detail)."""
        delivery = None
        try:
            delivery = await self.store.start_delivery(
                hook.name, event.event, event.task, event.occurrence_id, self.clock.now()
            )
            self._inflight.add(delivery)
            self._changed()
        except Exception as exc:  # the alert matters more than its record
            log.warning("hook delivery not recorded: %s", safe_text(exc))
        if hook.url is not None and self._session is None:
            import aiohttp  # here: only URL hooks pay for it, at their first send

            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        ok, detail, attempts = False, "", 0
        while attempts < self.attempts and not ok:
            if attempts:
                await asyncio.sleep(self.backoff[min(attempts - 1, len(self.backoff) - 1)])
            attempts += 1
            ok, detail = await send(hook, event, self._session)
        outcome = "delivered" if ok else "failed"
        self.counts[outcome] += 1
        if not ok:
            log.warning(
                "hook %s (%s): %s not delivered after %d attempt(s): %s",
                hook.name,
                safe_text(hook.target),
                event.event,
                attempts,
                detail,
            )
        if delivery is not None:
            await self.store.finish_delivery(delivery, self.clock.now(), attempts, outcome, detail)
            self._inflight.discard(delivery)
        self._changed()
        return outcome, attempts, detail

    # ---- stopping --------------------------------------------------------------------

    async def close(self, grace: float = CLOSE_GRACE) -> None:
        """Tell what the last changes mean, wait up to `grace` s for queued deliveries,
        then end the rest (their records say they were not delivered)."""
        if self._closing:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        if self._processor is not None and self._wake is not None:
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._idle()), grace)
        self._closing = True
        if self._queues:
            left = max(0.0, deadline - loop.time())
            joined = asyncio.gather(*(q.join() for q in self._queues.values()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(joined, left)
        for task in [self._processor, *self._workers]:
            if task is not None:
                task.cancel()
        for task in [self._processor, *self._workers]:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._inflight:
            with contextlib.suppress(Exception):
                await self.store.fail_deliveries(sorted(self._inflight), self.clock.now(), STOPPED)
            self._inflight.clear()
        left_over = []  # events no sender took up: recorded, not lost without a trace
        for queue in self._queues.values():
            while not queue.empty():
                hook, event, queued_at = queue.get_nowait()
                left_over.append((hook.name, event.event, event.task, event.occurrence_id,
                                  queued_at))  # fmt: skip
        if left_over:
            self.counts["failed"] += len(left_over)
            with contextlib.suppress(Exception):
                await self.store.record_undelivered(left_over, self.clock.now(), STOPPED)
        if self._session is not None:
            with contextlib.suppress(Exception):
                await self._session.close()
            self._session = None

    async def _idle(self) -> None:
        """Until the processor has read every change noted so far."""
        while self._busy or self._changed_occ or self._changed_tasks or self._wake_set():
            await asyncio.sleep(0.01)

    def _wake_set(self) -> bool:
        return self._wake is not None and self._wake.is_set()

    def status(self) -> dict[str, Any]:
        """How many hooks, deliveries waiting in the queue and being sent, delivered,
        failed; events dropped (a full queue) and errors (events that could not be read, or
        a delivery not recorded)."""
        waiting = sum(q.qsize() for q in self._queues.values())
        counts = {key: self.counts[key] for key in ("delivered", "failed", "dropped", "errors")}
        sending = len(self._inflight)
        return {"hooks": len(self.hooks), "waiting": waiting, "sending": sending, **counts}


def attach(
    hooks: Sequence[HookConfig],
    store: Store,
    clock: Clock,
    engine: SchedulerEngine | None,
    ticker: RuntimeScheduler | None,
    **options: Any,
) -> HookService | None:
    """Hooks beside `engine` and `ticker`; None when there are none, or under time-lapse
    (a simulated day must not page anyone)."""
    if not hooks:
        return None
    if clock.scale != 1:
        log.info("time-lapse: hooks are not called")
        return None
    service = HookService(hooks, store, clock, **options)
    service.attach(engine, ticker)
    return service
