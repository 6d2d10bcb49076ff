"""The tick emitter: the single source of "now" for the engine and for other services.

Tick k is due at start + k * interval (+ its jitter), slept to on the loop's monotonic
clock, so ticks never drift. Each tick goes to in-process subscribers first (the
engine scans on it), then to the external bus, if any, behind a circuit breaker and a
per-publish timeout, from a queue: a slow or dead broker never delays a tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import statistics
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from tickui.breaker import CLOSED, CircuitBreaker
from tickui.bus import EventBus
from tickui.clock import Clock
from tickui.sequence import SequenceAllocator
from tickui.ticker_config import TickerConfig
from tickui.tickmath import clock_jump, draw_jitter, next_tick
from tickui.timeutil import MICROS, iso

log = logging.getLogger("tickui.ticker")
EVENT_TYPE = "runtime.tick.v1"
WINDOW = 1000  # lateness samples kept for percentiles
SPARK = 120  # samples kept for sparklines
BACKLOG = 1000  # ticks waiting to be published before new ones are dropped
WATCH = 0.1  # how often a sleeping ticker looks for a wall-clock jump (seconds)
SPIN = 0.0015  # the last stretch before a deadline, waited out by yielding


@dataclass(slots=True)
class Tick:
    now: int
    tick_id: str
    sequence_number: int
    scheduled_at: int
    correlation_id: str
    scheduler_id: str
    tick_interval_ms: int

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["now"], data["scheduled_at"] = iso(self.now), iso(self.scheduled_at)
        return data

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            ("correlation_id", self.correlation_id.encode()),
            ("message_id", self.tick_id.encode()),
            ("timestamp", (iso(self.now) or "").encode()),
            ("source", f"tickui.{self.scheduler_id}".encode()),
            ("event_type", EVENT_TYPE.encode()),
        ]


Subscriber = Callable[[Tick], Awaitable[None]]


class ProtocolRuntimeScheduler(Protocol):
    """The surface of a tick scheduler, as in the reference design."""

    @property
    def scheduler_id(self) -> str: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def current_sequence_number(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def emit_tick(self, now: int | None = None) -> Tick: ...

    async def get_metrics(self) -> TickerMetrics: ...


@dataclass(slots=True)
class TickerMetrics:
    status: str
    scheduler_id: str
    interval_ms: int
    ticks_emitted: int
    ticks_published: int
    ticks_failed: int
    ticks_missed: int
    ticks_coalesced: int
    success_rate: float
    publish_last_ms: float | None
    publish_avg_ms: float | None
    publish_max_ms: float | None
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    clock_jumps: int
    last_clock_jump_s: float | None
    current_sequence: int
    last_persisted_sequence: int
    sequence_store: str
    sequence_state: str
    sequence_error: str | None
    bus: str
    breaker_state: str
    consecutive_failures: int
    breaker_threshold: int
    breaker_retry_in_s: float | None
    last_error: str | None
    transitions: list[dict[str, Any]]
    simulating_failures: bool
    started_at: str | None
    uptime_s: float
    is_healthy: bool
    lateness_recent_ms: list[float] = field(default_factory=list)
    publish_recent_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("lateness_recent_ms")
        data.pop("publish_recent_ms")
        return data


@dataclass(slots=True)
class _Counters:
    emitted: int = 0
    published: int = 0
    failed: int = 0
    missed: int = 0
    coalesced: int = 0
    jumps: int = 0
    last_jump: float | None = None
    publish_total_ms: float = 0.0
    publish_last_ms: float | None = None
    publish_max_ms: float | None = None
    lateness: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    publish_recent: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK))


class RuntimeScheduler:
    def __init__(
        self,
        config: TickerConfig,
        clock: Clock,
        bus: EventBus | None,
        sequence: SequenceAllocator,
        rng: random.Random | None = None,
        align: bool = True,
    ) -> None:
        self.config = config
        self.clock = clock
        self.bus = bus
        self.sequence = sequence
        self.align = align
        self.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_reset_s)
        self.simulate_failures = False
        self._rng = rng or random.Random()
        self._status = "stopped"
        self._counts = _Counters()
        self._subscribers: list[Subscriber] = []
        self._deliveries: dict[int, asyncio.Task[None]] = {}
        self._queue: asyncio.Queue[tuple[Tick, asyncio.Future[bool] | None]] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._publisher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._started_mono: float | None = None
        self._started_at: int | None = None
        self._listeners: list[Callable[[], None]] = []

    # ---- the protocol ----------------------------------------------------------------

    @property
    def scheduler_id(self) -> str:
        return self.config.scheduler_id

    @property
    def is_running(self) -> bool:
        return self._status == "running"

    @property
    def status(self) -> str:
        """stopped, starting, running or stopping: the header needs no full metrics."""
        return self._status

    @property
    def current_sequence_number(self) -> int:
        return self.sequence.current

    def subscribe(self, subscriber: Subscriber) -> None:
        """Deliver every tick to `subscriber` in this process, before any publishing."""
        self._subscribers.append(subscriber)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call `listener` after every tick and breaker move (for a viewer's redraw)."""
        self._listeners.append(listener)

    async def start(self) -> None:
        if self._status in ("running", "starting"):
            return
        self._status = "starting"
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        await self.sequence.start(loop.time())
        if self.bus is not None:
            await self.bus.start()
            self._queue = asyncio.Queue(BACKLOG)
            self._publisher = asyncio.create_task(self._publish_loop(), name="tickui-publish")
        self._started_mono, self._started_at = loop.time(), self.clock.now()
        self._status = "running"
        self._loop_task = asyncio.create_task(self._tick_loop(), name="tickui-ticker")
        log.info(
            "ticker %s every %d ms, sequence from %d (%s)",
            self.scheduler_id,
            self.config.interval_ms,
            self.sequence.current + 1,
            self.sequence.state,
        )

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop ticking, wait (bounded) for the tick in flight and queued publishes, then
        give the unused reserved sequence numbers back. Calling it twice is harmless."""
        if self._status in ("stopped", "stopping"):
            return
        self._status = "stopping"
        self._stopping.set()
        if self._loop_task is not None:
            await _bounded(self._loop_task, timeout)
        pending = [t for t in self._deliveries.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        if self._queue is not None and self._publisher is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), self.config.publish_timeout_s * 2)
            self._publisher.cancel()
            await _bounded(self._publisher, timeout)
        if self.bus is not None:
            await self.bus.stop()
        await self.sequence.close()
        self._status = "stopped"
        self._changed()

    async def emit_tick(self, now: int | None = None) -> Tick:
        """Emit one tick now (outside the loop), and wait for its publish when there is a bus."""
        tick, published = self._produce(now, lateness=0.0)
        if published is not None:
            await published
        return tick

    async def get_metrics(self) -> TickerMetrics:
        return self.metrics()

    # ---- the loop -------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.interval_ms / 1000
        jitter = self.config.jitter_ms / 1000
        start = loop.time() + (self._to_boundary(interval) if self.align else 0.0)
        last, offset = -1, self._offset(loop)
        while not self._stopping.is_set():
            planned = next_tick(start, interval, last, loop.time(), draw_jitter(self._rng, jitter))
            self._counts.missed += planned.missed
            jumped = await self._sleep_until(planned.deadline, offset, interval)
            if self._stopping.is_set():
                break
            offset = self._offset(loop)
            if jumped is None:
                last = planned.index
            self._produce(None, max(0.0, loop.time() - planned.deadline) if jumped is None else 0.0)

    def _offset(self, loop: asyncio.AbstractEventLoop) -> float:
        return self.clock.now() / MICROS / self.clock.scale - loop.time()

    def _to_boundary(self, interval: float) -> float:
        """Start just after a wall-clock multiple of the interval, where slots fall."""
        step = interval * self.clock.scale
        return ((-self.clock.now() / MICROS) % step) / self.clock.scale + 0.002

    async def _sleep_until(self, deadline: float, offset: float, interval: float) -> float | None:
        """Sleep to `deadline`, looking for a wall-clock jump meanwhile; return the jump.

        The selector sleeps in whole milliseconds (rounded up), so the last stretch is
        waited out by yielding to the loop instead: ticks land within a fraction of a ms.
        """
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            if self._stopping.is_set():
                return None
            await asyncio.sleep(min(left - SPIN, WATCH) if left > SPIN else 0)
            jump = clock_jump(offset, self._offset(loop), interval)
            if jump is not None:
                self._counts.jumps += 1
                self._counts.last_jump = jump
                log.warning("wall clock jumped by %+.3f s; ticking now", jump)
                return jump
        return None

    def _produce(
        self, now: int | None, lateness: float
    ) -> tuple[Tick, asyncio.Future[bool] | None]:
        loop = asyncio.get_running_loop()
        wall = self.clock.now() if now is None else now
        late_us = round(lateness * MICROS * self.clock.scale)
        tick = Tick(
            now=wall,
            tick_id=str(uuid.uuid4()),
            sequence_number=self.sequence.next(loop.time()),
            scheduled_at=wall - late_us,
            correlation_id=str(uuid.uuid4()),
            scheduler_id=self.scheduler_id,
            tick_interval_ms=self.config.interval_ms,
        )
        self._counts.emitted += 1
        self._counts.lateness.append(lateness * 1000)
        self._deliver(tick)
        published = self._enqueue(tick, loop) if self._queue is not None else None
        self._changed()
        return tick, published

    def _deliver(self, tick: Tick) -> None:
        """Hand the tick to each subscriber; one still busy with the last tick skips this one."""
        for index, subscriber in enumerate(self._subscribers):
            running = self._deliveries.get(index)
            if running is not None and not running.done():
                self._counts.coalesced += 1
                continue
            self._deliveries[index] = asyncio.create_task(_guarded(subscriber, tick))

    def _enqueue(self, tick: Tick, loop: asyncio.AbstractEventLoop) -> asyncio.Future[bool]:
        assert self._queue is not None
        done: asyncio.Future[bool] = loop.create_future()
        try:
            self._queue.put_nowait((tick, done))
        except asyncio.QueueFull:
            self._counts.failed += 1
            self.breaker.last_error = "publish backlog full; tick dropped"
            done.set_result(False)
        return done

    # ---- publishing -------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        assert self._queue is not None
        while True:
            tick, done = await self._queue.get()
            try:
                ok = await self._publish(tick)
            except Exception:
                log.exception("publishing tick %s failed", tick.sequence_number)
                ok = False
            finally:
                self._queue.task_done()
            if done is not None and not done.done():
                done.set_result(ok)

    async def _publish(self, tick: Tick) -> bool:
        assert self.bus is not None
        loop = asyncio.get_running_loop()
        state = self.breaker.state
        if not self.breaker.allow(loop.time(), self.clock.now()):
            self._counts.failed += 1  # fails fast: no network call while open
            self._after_breaker(state)
            return False
        started = loop.time()
        try:
            if self.simulate_failures:
                raise RuntimeError("simulated publish failure")
            value = json.dumps(tick.to_json()).encode()
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
            async with asyncio.timeout(self.config.publish_timeout_s):
                await self.bus.publish(
                    self.config.topic, self.scheduler_id.encode(), value, tick.headers()
                )
        except Exception as exc:
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                reason = f"publish timed out after {self.config.publish_timeout_s:g}s"
            self._counts.failed += 1
            self.breaker.failure(loop.time(), self.clock.now(), reason)
            self._after_breaker(state)
            return False
        took = (loop.time() - started) * 1000
        counts = self._counts
        counts.published += 1
        counts.publish_total_ms += took
        counts.publish_last_ms = took
        counts.publish_max_ms = max(took, counts.publish_max_ms or 0.0)
        counts.publish_recent.append(took)
        self.breaker.success(loop.time(), self.clock.now())
        self._after_breaker(state)
        return True

    def _after_breaker(self, before: str) -> None:
        if self.breaker.state != before:
            last = self.breaker.transitions[-1]
            log.warning("circuit breaker %s -> %s: %s", last.source, last.target, last.reason)
            self._changed()

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("ticker listener failed")

    # ---- metrics -------------------------------------------------------------------

    def metrics(self) -> TickerMetrics:
        counts = self._counts
        loop_time = asyncio.get_running_loop().time() if _has_loop() else None
        uptime = (loop_time - self._started_mono) if loop_time and self._started_mono else 0.0
        lateness = sorted(counts.lateness)
        attempts = counts.published + counts.failed
        rate = counts.published / attempts if attempts else 1.0
        store = self.sequence.store.name if self.sequence.store is not None else "memory"
        p99 = _quantile(lateness, 0.99)
        healthy = (
            self._status == "running"
            and self.breaker.state == CLOSED
            and self.sequence.state in ("ok", "off")
            and (p99 is None or p99 < self.config.interval_ms)
        )
        return TickerMetrics(
            status=self._status,
            scheduler_id=self.scheduler_id,
            interval_ms=self.config.interval_ms,
            ticks_emitted=counts.emitted,
            ticks_published=counts.published,
            ticks_failed=counts.failed,
            ticks_missed=counts.missed,
            ticks_coalesced=counts.coalesced,
            success_rate=round(rate, 4),
            publish_last_ms=_r(counts.publish_last_ms),
            publish_avg_ms=_r(counts.publish_total_ms / counts.published)
            if counts.published
            else None,
            publish_max_ms=_r(counts.publish_max_ms),
            lateness_p50_ms=_r(_quantile(lateness, 0.5)),
            lateness_p99_ms=_r(p99),
            lateness_max_ms=_r(lateness[-1] if lateness else None),
            clock_jumps=counts.jumps,
            last_clock_jump_s=_r(counts.last_jump),
            current_sequence=self.sequence.current,
            last_persisted_sequence=self.sequence.reserved,
            sequence_store=store,
            sequence_state=self.sequence.state,
            sequence_error=self.sequence.error,
            bus=self.bus.name if self.bus is not None else "none",
            breaker_state=self.breaker.state,
            consecutive_failures=self.breaker.failures,
            breaker_threshold=self.breaker.threshold,
            breaker_retry_in_s=_r(self.breaker.retry_in(loop_time)) if loop_time else None,
            last_error=self.breaker.last_error,
            transitions=[
                {"at": iso(t.at), "from": t.source, "to": t.target, "reason": t.reason}
                for t in self.breaker.transitions
            ],
            simulating_failures=self.simulate_failures,
            started_at=iso(self._started_at),
            uptime_s=round(uptime, 3),
            is_healthy=healthy,
            lateness_recent_ms=list(counts.lateness)[-SPARK:],
            publish_recent_ms=list(counts.publish_recent),
        )


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _guarded(subscriber: Subscriber, tick: Tick) -> None:
    try:
        await subscriber(tick)
    except Exception:
        log.exception("tick subscriber failed on tick %s", tick.sequence_number)


async def _bounded(task: asyncio.Task[Any], timeout: float) -> None:
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
