"""Prometheus metrics of the engine, its ticker and its hooks, served at /metrics.

prometheus-client gives the exposition format and the registry: one private
`CollectorRegistry` per endpoint (never the library's global one), and its HTTP server in a
thread of its own. That thread only renders the values it finds: every value is set here,
on the event loop, from what the engine already tells.

- Runs (`tickui_runs_total`, the start lateness, retries, missed and skipped slots) come
  from the engine's changes, in one observer: the changed occurrences are read in its own
  task, each counted once as it starts and as it ends (this engine's runs only).
- The lease follows the engine's scans and the breaker the ticker's moves, as they
  happen. The rest is sampled every second on the loop: the ticker's counts, the hooks'
  delivery counts, and three counts from the database (active and queued runs on their
  partial indexes, live workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import start_http_server

from tickui.common.errors import BadInput, Unavailable
from tickui.common.faults import fault_text
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import QUEUED
from tickui.model.records import FINISHED, Occurrence
from tickui.ticks.breaker import CLOSED, HALF_OPEN, OPEN

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from tickui.common.clock import Clock
    from tickui.engine import EngineChange, SchedulerEngine
    from tickui.hooks import HookService
    from tickui.store import Store
    from tickui.ticks.ticker import RuntimeScheduler

log = logging.getLogger("tickui.metrics")

SAMPLE_EVERY = 1.0  # seconds between two samples of the lease, ticker, hooks and counts
DONE_KEPT = 100_000  # ended runs remembered, so a repeated change is not counted again
# Start lateness, in seconds: a tick's worth of delay up to runs minutes late.
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
BREAKER_STATES = {CLOSED: "closed", OPEN: "open", HALF_OPEN: "half_open"}
HOOK_OUTCOMES = ("delivered", "failed", "dropped")
# What the observer counted of a run that has not ended yet.
_STARTED, _RETRY, _MISSED = 1, 2, 4


class Families:
    """The metric families, on a registry of their own."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        task = ["task"]
        self.runs = Counter(
            "tickui_runs",
            "Runs this engine claimed, as they ended, by task and outcome"
            " (succeeded, failed, cancelled).",
            ["task", "outcome"],
            registry=r,
        )
        self.lateness = Histogram(
            "tickui_run_start_lateness_seconds",
            "How long after its slot a scheduled run started (first attempts only).",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.active = Gauge("tickui_runs_active", "Runs claimed, accepted or running.", registry=r)
        self.queued = Gauge(
            "tickui_runs_queued",
            "Runs waiting to start: retries, buffer_one's waiting slot, backfills.",
            registry=r,
        )
        self.retries = Counter(
            "tickui_retries", "Retry attempts this engine started, by task.", task, registry=r
        )
        self.missed = Counter(
            "tickui_slots_missed",
            "Slots that passed beyond the misfire grace unstarted, by task.",
            task,
            registry=r,
        )
        self.skipped = Counter(
            "tickui_slots_skipped",
            "Slots recorded skipped (an overlap under forbid, a misfire skip, a retry no"
            " longer wanted), by task.",
            task,
            registry=r,
        )
        self.lease = Gauge(
            "tickui_lease_held", "1 while this engine holds the lease, else 0.", registry=r
        )
        self.ticks_emitted = Counter(
            "tickui_ticks_emitted", "Ticks emitted (published, or delivered without a bus).",
            registry=r,
        )  # fmt: skip
        self.ticks_failed = Counter(
            "tickui_ticks_failed",
            "Ticks that failed to publish or that an open breaker refused.",
            registry=r,
        )
        self.breaker = Enum(
            "tickui_tick_breaker_state",
            "The tick publisher's circuit breaker.",
            states=list(BREAKER_STATES.values()),
            registry=r,
        )
        self.workers = Gauge(
            "tickui_workers_alive",
            "Workers alive that sent a heartbeat within [dispatch] worker_timeout.",
            registry=r,
        )
        self.hooks = Counter(
            "tickui_hook_deliveries",
            "Hook deliveries by outcome (delivered, failed; dropped: a full queue).",
            ["outcome"],
            registry=r,
        )


def _grow(counter: Counter, before: int, now: int) -> int:
    """Add what a running count grew by since `before` (all of it, if it started over)."""
    counter.inc(now - before if now >= before else now)
    return now


class MetricsObserver:
    """Keeps `families` current from the engine, the ticker and the hooks, on the loop."""

    def __init__(
        self,
        families: Families,
        store: Store,
        clock: Clock,
        engine: SchedulerEngine,
        ticker: RuntimeScheduler,
        hooks: HookService | None,
        worker_timeout: int,
    ) -> None:
        self.families = families
        self.store, self.clock = store, clock
        self.engine, self.ticker, self.hooks = engine, ticker, hooks
        self.worker_timeout = worker_timeout
        self._open: dict[int, int] = {}  # run id -> what was counted of it so far
        self._done: OrderedDict[int, None] = OrderedDict()
        self._pending: set[int] = set()
        self._flushing = asyncio.Lock()  # one flush at a time: a second waits for the first
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ticks = (0, 0)  # the ticker's emitted and failed counts last sampled
        self._hook_counts = dict.fromkeys(HOOK_OUTCOMES, 0)
        self._fault: str | None = None
        self._closed = False
        families.breaker.state(BREAKER_STATES[CLOSED])
        engine.subscribe(self._on_change)
        ticker.on_change(self._on_ticker)

    # ---- on the loop ---------------------------------------------------------------

    def _on_change(self, change: EngineChange) -> None:
        """The engine's listener: the lease as it stands after each scan; the changed
        runs' ids noted for the observer's task (no I/O here)."""
        if change.status:
            self.families.lease.set(1 if self.engine.holds_lease else 0)
        if change.occurrences:
            self._pending.update(change.occurrences)
            self._wake.set()
        self.start()

    def _on_ticker(self) -> None:
        """The ticker's listener (after each tick and breaker move)."""
        self.families.breaker.state(BREAKER_STATES.get(self.ticker.breaker.state, "open"))

    def start(self) -> None:
        if self._task is None and not self._closed:
            with contextlib.suppress(RuntimeError):  # no loop yet: the first change starts it
                self._task = asyncio.get_running_loop().create_task(
                    self._follow(), name="tickui-metrics"
                )

    async def _follow(self) -> None:
        loop = asyncio.get_running_loop()
        sampled = loop.time() - SAMPLE_EVERY
        while True:
            wait = max(0.0, sampled + SAMPLE_EVERY - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            try:
                await self.flush()
                if loop.time() - sampled >= SAMPLE_EVERY:
                    sampled = loop.time()
                    await self.sample()
                if self._fault is not None:
                    log.warning("metrics work again after: %s", self._fault)
                    self._fault = None
            except Exception as exc:  # the engine's own problem: it reports it
                text = fault_text(exc)
                if text != self._fault:
                    self._fault = text
                    log.warning("metrics not updated: %s (logged once)", text)

    async def flush(self) -> None:
        """Count what the changed runs did since they were last seen. Returns once every
        change noted before the call is counted, also those a flush under way took."""
        async with self._flushing:
            ids, self._pending = sorted(self._pending), set()
            if ids:
                for occ in await self.store.occurrences_by_id(ids):
                    self.see(occ)

    def see(self, occ: Occurrence) -> None:
        """Count, once each: its missed slots, a retry, its start (and lateness), and how
        it ended. A run is this engine's if it claimed it; a queued row it never claimed
        (a skipped retry) counts as skipped only; another engine's runs (a gone one's,
        ended by this engine's recovery) are that engine's to count."""
        if occ.id in self._done or occ.state == QUEUED:
            return
        mine = occ.owner == self.engine.owner
        if occ.owner is not None and not mine:
            return
        f, task = self.families, occ.task
        counted = self._open.get(occ.id, 0)
        if occ.missed and not counted & _MISSED:
            f.missed.labels(task).inc(occ.missed)
            counted |= _MISSED
        if mine and occ.attempt > 1 and occ.state != "skipped" and not counted & _RETRY:
            f.retries.labels(task).inc()
            counted |= _RETRY
        if occ.started_at is not None and not counted & _STARTED:
            if occ.kind == "scheduled" and occ.attempt == 1:
                f.lateness.observe(max(0, occ.started_at - occ.scheduled_for) / MICROS)
            counted |= _STARTED
        if occ.state == "skipped":
            f.skipped.labels(task).inc()
        elif occ.state not in FINISHED:
            self._open[occ.id] = counted
            return
        elif mine:
            f.runs.labels(task, occ.state).inc()
        self._open.pop(occ.id, None)
        self._done[occ.id] = None
        if len(self._done) > DONE_KEPT:
            self._done.popitem(last=False)

    async def sample(self) -> None:
        """The values read rather than counted: the lease, the ticker's counts, the hooks'
        deliveries, and the database's counts of runs and workers."""
        f = self.families
        f.lease.set(1 if self.engine.holds_lease else 0)
        ticking = self.ticker.metrics()
        emitted = _grow(f.ticks_emitted, self._ticks[0], ticking.ticks_emitted)
        self._ticks = (emitted, _grow(f.ticks_failed, self._ticks[1], ticking.ticks_failed))
        if self.hooks is not None:
            for outcome in HOOK_OUTCOMES:
                seen = self.hooks.counts[outcome]
                self._hook_counts[outcome] = _grow(
                    f.hooks.labels(outcome), self._hook_counts[outcome], seen
                )
        active, queued = await self.store.pending_counts()
        f.active.set(active)
        f.queued.set(queued)
        f.workers.set(await self.store.alive_workers(self.clock.now() - self.worker_timeout))

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class MetricsEndpoint:
    """The HTTP server (its own thread) and, once attached, the observer feeding it."""

    def __init__(self, listen: str) -> None:
        disable_created_metrics()  # no `_created` twin beside every counter
        self.listen = listen
        self.families = Families()
        self.observer: MetricsObserver | None = None
        self._server: tuple[WSGIServer, threading.Thread] | None = _serve(
            listen, self.families.registry
        )
        self.url = f"http://{listen}/metrics"

    def attach(
        self,
        store: Store,
        clock: Clock,
        engine: SchedulerEngine,
        ticker: RuntimeScheduler,
        hooks: HookService | None,
        worker_timeout: int,
    ) -> None:
        self.observer = MetricsObserver(
            self.families, store, clock, engine, ticker, hooks, worker_timeout
        )
        self.observer.start()

    async def close(self) -> None:
        """Stop observing, then serving (the server's thread ends within half a second)."""
        if self.observer is not None:
            await self.observer.close()
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(_stop, *server)

    def close_now(self) -> None:
        """Stop serving, from outside the loop (the assembly failed after it started)."""
        server, self._server = self._server, None
        if server is not None:
            _stop(*server)


def _stop(server: WSGIServer, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join(5)


def _serve(listen: str, registry: CollectorRegistry) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` at `listen` (host:port) from a thread: bad input (exit 2) for an
    address that is not this machine's or not known, a fault (exit 1) for a port in use
    or not allowed."""
    host, _, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        server, thread = start_http_server(int(port), host, registry)
    except socket.gaierror as exc:
        raise BadInput("metrics", f"cannot listen on {listen}: {exc.strerror}") from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise Unavailable(f"metrics: cannot listen on {listen}: {why}") from None
        raise BadInput("metrics", f"cannot listen on {listen}: {why}") from None
    thread.name = "tickui-metrics-http"
    return server, thread
