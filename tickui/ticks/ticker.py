"""The tick emitter: the single source of "now" for the engine and for other services.

Tick k is due at slot k (start + k * interval, on a wall-clock multiple of the interval
when aligned) plus its jitter, slept to on the loop's monotonic clock, so ticks never
drift; its `scheduled_at` is the slot itself, exactly. After a stall, one tick goes out
for the newest slot and the slots in between are counted as missed, never sent. Each
tick goes to in-process subscribers first (the engine scans on it), then to the external
bus, if any, behind a circuit breaker and a per-publish timeout, from a queue: a slow or
dead broker never delays a tick.

Two faces:
- ONEX's `ProtocolRuntimeScheduler` (the public one): `await emit_tick(now: datetime |
  None = None) -> None`, raising the typed errors of tickui.common.errors on a failed publish,
  and `await get_metrics()` -> `SchedulerMetrics` (ONEX's metrics model, field for field).
  `RuntimeScheduler(config=<ModelRuntimeSchedulerConfig or look-alike>, event_bus=<any
  object with ONEX's `publish(topic, key, value, headers)`>)` is a drop-in for ONEX's.
- tickui's internal one in integer microseconds: `Tick`, `emit_tick_at(micros) -> Tick`
  (never raises for a failed publish: it is counted), `metrics()`, `subscribe`, `status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import statistics
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

from tickui.common.clock import Clock, SystemClock
from tickui.common.errors import (
    InfraConnectionError,
    InfraTimeoutError,
    InfraUnavailableError,
    SchedulerConfigError,
    TickPublishError,
    TickTimeError,
)
from tickui.common.timeutil import MICROS, from_micros, iso, to_micros
from tickui.ticks import wire
from tickui.ticks.breaker import CLOSED, OPEN, CircuitBreaker
from tickui.ticks.bus import EventBus
from tickui.ticks.clockwatch import ClockSetWatch
from tickui.ticks.config import TickerConfig
from tickui.ticks.metrics import SchedulerMetrics, SchedulerStatus
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.tick import Tick
from tickui.ticks.tickmath import (
    clock_jump,
    deadline,
    draw_jitter,
    first_slot,
    newest_slot,
    next_tick,
)

log = logging.getLogger("tickui.ticker")
EVENT_TYPE = "runtime.tick.v1"
WINDOW = 1000  # lateness samples kept for percentiles
SPARK = 120  # samples kept for sparklines
BACKLOG = 1000  # ticks waiting to be published before new ones are dropped
WATCH = 0.1  # how often a sleeping ticker looks for a wall-clock jump (seconds)
SPIN = 0.0015  # the last stretch before a deadline, waited out by yielding
GUARD = 0.002  # wake this long after a wall-clock slot, so `now` is never before it
ONEX_PUBLISH_TIMEOUT_S = 5.0  # ONEX's config has none: its bus times out on its own
ONEX_SEQUENCE_BLOCK_S = 60  # sequence numbers reserved ahead in Valkey, in seconds of ticks


Subscriber = Callable[[Tick], Awaitable[None]]


class ProtocolRuntimeScheduler(Protocol):
    """The seed's protocol (omnibase-infra `ProtocolRuntimeScheduler`), exactly."""

    @property
    def scheduler_id(self) -> str: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def current_sequence_number(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def emit_tick(self, now: datetime | None = None) -> None: ...

    async def get_metrics(self) -> SchedulerMetrics: ...


TickerMetrics = SchedulerMetrics  # the older name


@dataclass(slots=True)
class _Counters:
    delivered: int = 0
    published: int = 0
    failed: int = 0
    consecutive: int = 0  # failed emissions since the last success (ONEX's meaning)
    missed: int = 0
    coalesced: int = 0
    jumps: int = 0
    last_jump: float | None = None
    last_ok_at: int | None = None
    publish_total_ms: float = 0.0
    publish_last_ms: float = 0.0
    publish_max_ms: float = 0.0
    lateness: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    publish_recent: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK))


def _onex_like(config: Any) -> bool:
    return not isinstance(config, TickerConfig) and hasattr(config, "tick_interval_ms")


def ticker_config_from_onex(config: Any, publish_timeout_s: float | None = None) -> TickerConfig:
    """tickui's settings from ONEX's `ModelRuntimeSchedulerConfig` or any object with its
    field names (missing ones take ONEX's defaults). Raises SchedulerConfigError, also for
    an interval under 100 ms: ONEX's config allows 10 ms, but every tick so published fails
    ONEX's ModelRuntimeTick (ONEX's own scheduler raises on each emit)."""

    def get(name: str, default: Any) -> Any:
        value = getattr(config, name, default)
        return default if value is None else value

    try:
        interval = int(get("tick_interval_ms", 1000))
        jitter = int(get("max_tick_jitter_ms", 100))
        threshold = int(get("circuit_breaker_threshold", 5))
        reset = float(get("circuit_breaker_reset_timeout_seconds", 60.0))
        persist = bool(get("persist_sequence_number", True))
        host = str(get("valkey_host", os.environ.get("VALKEY_HOST", "localhost")))
        port = int(get("valkey_port", 6379))
        password = getattr(config, "valkey_password", None)
        timeout = float(get("valkey_timeout_seconds", 5.0))
        retries = int(get("valkey_connection_retries", 3))
    except (TypeError, ValueError) as exc:
        raise SchedulerConfigError(f"scheduler config: {exc}") from exc
    if not 10 <= interval <= 60_000:
        raise SchedulerConfigError("scheduler config: tick_interval_ms must be from 10 to 60000")
    if interval < wire.MIN_INTERVAL_MS:  # ONEX's config allows it; its tick model does not
        raise SchedulerConfigError(
            f"scheduler config: {interval} ms ticks cannot go to the event bus: ONEX consumers"
            f" reject a tick_interval_ms under {wire.MIN_INTERVAL_MS}"
        )
    if not 1 <= threshold <= 100 or not 1 <= reset <= 3600 or jitter < 0:
        raise SchedulerConfigError("scheduler config: circuit breaker settings out of range")
    password = getattr(password, "get_secret_value", lambda: password)()  # a SecretStr too
    auth = f":{quote(str(password), safe='')}@" if password else ""
    scheduler_id = str(get("scheduler_id", "runtime-scheduler-default")).strip()
    return TickerConfig(
        interval_ms=interval,
        jitter_ms=min(jitter, interval - 1),  # tickui's jitter stays inside the slot
        breaker_threshold=threshold,
        breaker_reset_s=reset,
        publish_timeout_s=publish_timeout_s or ONEX_PUBLISH_TIMEOUT_S,
        scheduler_id=scheduler_id,
        topic=str(get("tick_topic", wire.DEFAULT_TOPIC["envelope"])),
        persist_sequence=persist,
        sequence_key=str(get("sequence_number_key", "runtime_scheduler_sequence")),
        valkey_url=f"redis://{auth}{host}:{port}/0" if persist else None,
        valkey_timeout_s=min(60.0, max(0.1, timeout)),
        valkey_retries=min(10, max(0, retries)),
    )


class RuntimeScheduler:
    """The ticker. Two ways to build one:

    - tickui's: `RuntimeScheduler(config: TickerConfig, clock, bus, sequence)`: the bus
      (tickui's MemoryBus/KafkaBus, or None for local ticks only) and the sequence
      allocator are made by the caller (tickui.runtime.runner) and started/stopped with the ticker.
    - ONEX's: `RuntimeScheduler(config=<ModelRuntimeSchedulerConfig or any object with its
      field names>, event_bus=<any object with async publish(topic, key, value, headers)>)`,
      told apart by the config's type (a TickerConfig or not). The system clock is used;
      sequence numbers go to Valkey at valkey_host:valkey_port under sequence_number_key
      when persist_sequence_number (else memory); the bus belongs to the caller, who
      starts and closes it (as with ONEX's scheduler). `wire` picks the format ("bare",
      the seed's, by default; "envelope" for current ONEX consumers).
    """

    def __init__(
        self,
        config: Any = None,
        clock: Clock | None = None,
        bus: EventBus | None = None,
        sequence: SequenceAllocator | None = None,
        rng: random.Random | None = None,
        align: bool = True,
        *,
        event_bus: Any = None,
        wire: str | None = None,
        publish_timeout_s: float | None = None,
    ) -> None:
        if config is None:
            raise SchedulerConfigError("RuntimeScheduler needs a config")
        self._owns_bus = True
        if _onex_like(config):
            if event_bus is None and clock is not None and hasattr(clock, "publish"):
                clock, event_bus = None, clock  # RuntimeScheduler(config, event_bus)
            if event_bus is None:
                raise SchedulerConfigError("RuntimeScheduler needs an event_bus")
            onex = config
            config = ticker_config_from_onex(onex, publish_timeout_s)
            bus, self._owns_bus = event_bus, False
            if sequence is None:
                store = None
                if config.persist_sequence and config.valkey_url:
                    from tickui.ticks.sequence import ValkeySequenceStore

                    store = ValkeySequenceStore(
                        config.valkey_url, config.valkey_timeout_s, config.valkey_retries
                    )
                block = max(10, ONEX_SEQUENCE_BLOCK_S * 1000 // config.interval_ms)
                sequence = SequenceAllocator(store, config.sequence_key, block)
        elif event_bus is not None:
            bus = event_bus
        if sequence is None:
            sequence = SequenceAllocator(None, config.sequence_key, 10)
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.bus = bus
        self.sequence = sequence
        self.align = align
        self.wire = wire or getattr(config, "wire", "bare")
        if self.wire not in wire_formats():
            raise SchedulerConfigError(f"wire {self.wire!r} is not one of bare, envelope")
        self.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_reset_s)
        self.simulate_failures = False
        self._rng = rng or random.Random()
        self._status = SchedulerStatus.STOPPED
        self._counts = _Counters()
        self._subscribers: list[Subscriber] = []
        self._deliveries: dict[int, asyncio.Task[None]] = {}
        self._queue: asyncio.Queue[tuple[Tick, asyncio.Future[Any] | None]] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._publisher: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._clock_watch: ClockSetWatch | None = None
        self._started_mono: float | None = None
        self._started_at: int | None = None
        self._listeners: list[Callable[[], None]] = []
        self._lifecycle = asyncio.Lock()  # start() and stop() one at a time

    # ---- the protocol ----------------------------------------------------------------

    @property
    def scheduler_id(self) -> str:
        return self.config.scheduler_id

    @property
    def is_running(self) -> bool:
        return self._status == SchedulerStatus.RUNNING

    @property
    def status(self) -> SchedulerStatus:
        """stopped, starting, running, stopping or error (a str): no full metrics needed."""
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
        """Start ticking (a no-op unless stopped). start() and stop() run one at a time: a
        stop() called while a start() is still under way (its sequence store connecting)
        waits for it and then stops, so the scheduler is stopped when stop() returns."""
        async with self._lifecycle:
            try:
                await self._start()
            except BaseException:
                if self._status == SchedulerStatus.STARTING:
                    self._status = SchedulerStatus.ERROR
                raise

    async def _start(self) -> None:
        if not self._status.can_start():
            return
        self._status = SchedulerStatus.STARTING
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        await self.sequence.start(loop.time())
        if self.bus is not None:
            if self._owns_bus:
                await self.bus.start()
            self._queue = asyncio.Queue(BACKLOG)
            self._publisher = asyncio.create_task(self._publish_loop(), name="tickui-publish")
        # before the start is taken: opening it must not push the first ticks late
        self._clock_watch = _clock_set_watch(self.clock)
        self._started_mono, self._started_at = loop.time(), self.clock.now()
        self._status = SchedulerStatus.RUNNING
        self._loop_task = asyncio.create_task(self._tick_loop(), name="tickui-ticker")
        self._loop_task.add_done_callback(self._loop_ended)
        log.info(
            "ticker %s every %d ms, sequence from %d (%s)",
            self.scheduler_id,
            self.config.interval_ms,
            self.sequence.current + 1,
            self.sequence.state,
        )

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("the tick loop failed", exc_info=task.exception())
            self._status = SchedulerStatus.ERROR

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop ticking, wait (bounded) for the tick in flight and queued publishes, then
        give the unused reserved sequence numbers back. Calling it twice is harmless; one
        called during a start() waits for it to finish first."""
        async with self._lifecycle:
            await self._stop(timeout)

    async def _stop(self, timeout: float) -> None:
        if self._status in (SchedulerStatus.STOPPED, SchedulerStatus.STOPPING):
            return
        self._status = SchedulerStatus.STOPPING
        self._stopping.set()
        if self._clock_watch is not None:  # its sleep lasts to the next tick otherwise
            self._clock_watch.interrupt()
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
            self._drain(self._queue)  # nothing waits forever on a tick never published
        self._queue, self._publisher = None, None
        if self.bus is not None and self._owns_bus:
            await self.bus.stop()
        await self.sequence.close()
        self._status = SchedulerStatus.STOPPED
        self._changed()

    async def emit_tick(self, now: datetime | None = None) -> None:
        """ONEX's `emit_tick`: one tick now, outside the loop, published before returning.

        `now` must be a timezone-aware datetime (None: the clock's time); anything else
        raises TickTimeError before a sequence number is used. A publish that fails
        raises InfraConnectionError, one that times out InfraTimeoutError, an open
        breaker InfraUnavailableError (all TickPublishError); as in ONEX, such a tick
        has used its sequence number and counts in ticks_failed."""
        if now is not None:
            if not isinstance(now, datetime):
                raise TickTimeError(f"now must be a datetime, not {type(now).__name__}")
            if now.tzinfo is None or now.utcoffset() is None:
                raise TickTimeError("now must be timezone-aware (a naive datetime was given)")
        micros = None if now is None else to_micros(now)
        _, error = await self._emit(micros)
        if error is not None:
            raise error

    async def emit_tick_at(self, now: int | None = None) -> Tick:
        """tickui's emit: one tick at wall time `now` (integer microseconds; None: the
        clock's), delivered and published before returning. A failed publish is counted
        (ticks_failed, the breaker), not raised."""
        tick, _ = await self._emit(now)
        return tick

    async def _emit(self, now: int | None) -> tuple[Tick, TickPublishError | None]:
        tick, published = self._produce(now, lateness=0.0)
        if published is not None:
            return tick, await published
        if self.bus is not None:  # not started: publish here, as ONEX's scheduler does
            return tick, await self._publish(tick)
        return tick, None

    async def get_metrics(self) -> SchedulerMetrics:
        """ONEX's `get_metrics`: an immutable snapshot (see tickui.ticks.metrics)."""
        return self.metrics()

    # ---- the loop -------------------------------------------------------------------

    def _slot_us(self) -> int:
        """One interval on the ticker's clock (which runs `scale` times real time)."""
        return max(1, round(self.config.interval_ms * 1000 * self.clock.scale))

    def _anchor(self, interval: float, after_jump: bool) -> tuple[float, int]:
        """Slot 0 of a fresh grid: (its monotonic deadline, its wall time in micros).

        Aligned: the first wall-clock multiple of the interval from now (after a jump,
        one at least half an interval away, so the jump's own tick is not followed at
        once by another). Not aligned: now (after a jump, one interval from now)."""
        loop = asyncio.get_running_loop()
        wall = self.clock.now()  # before the monotonic reading: slots never precede `now`
        mono = loop.time()
        slot = self._slot_us()
        if not self.align:
            return (mono + interval, wall + slot) if after_jump else (mono, wall)
        base = first_slot(wall, slot)
        if after_jump and base - wall < slot // 2:
            base += slot
        return mono + (base - wall) / MICROS / self.clock.scale + GUARD, base

    async def _tick_loop(self) -> None:
        try:
            await self._tick_on()
        finally:
            if self._clock_watch is not None:
                self._clock_watch.close()
                self._clock_watch = None

    async def _tick_on(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.interval_ms / 1000
        jitter = self.config.jitter_ms / 1000
        slot = self._slot_us()
        start, base = self._anchor(interval, after_jump=False)
        last, offset = -1, self._offset(loop)
        while not self._stopping.is_set():
            planned = next_tick(start, interval, last, loop.time(), draw_jitter(self._rng, jitter))
            self._counts.missed += planned.missed
            jumped = await self._sleep_until(planned.deadline, offset, interval)
            if self._stopping.is_set():
                break
            offset = self._offset(loop)
            if jumped is not None:  # tick at once on the new wall time, then a new grid
                self._produce(None, 0.0)
                start, base = self._anchor(interval, after_jump=True)
                last = -1
                continue
            # Woken late past the whole slot (a stall): one tick, for the newest slot.
            index, skipped = newest_slot(start, interval, planned.index, loop.time())
            self._counts.missed += skipped
            last = index
            due = planned.deadline if index == planned.index else deadline(start, interval, index)
            self._produce(None, max(0.0, loop.time() - due), scheduled=base + index * slot)

    def _offset(self, loop: asyncio.AbstractEventLoop) -> float:
        return self.clock.now() / MICROS / self.clock.scale - loop.time()

    async def _sleep_until(self, deadline: float, offset: float, interval: float) -> float | None:
        """Sleep to `deadline`, looking for a wall-clock jump meanwhile; return the jump.

        On the system clock the kernel wakes the sleep when the clock is set (see
        clockwatch.py); on any other clock it is looked at every WATCH s. The selector
        sleeps in whole milliseconds (rounded up), so the last stretch is waited out by
        yielding to the loop instead: ticks land within a fraction of a ms.
        """
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            if self._stopping.is_set():
                return None
            watch = self._clock_watch
            if left <= SPIN:
                await asyncio.sleep(0)
            elif watch is not None and watch.watching:
                await watch.wait(left - SPIN)
            else:
                await asyncio.sleep(min(left - SPIN, WATCH))
            jump = clock_jump(offset, self._offset(loop), interval)
            if jump is not None:
                self._counts.jumps += 1
                self._counts.last_jump = jump
                log.warning("wall clock jumped by %+.3f s; ticking now", jump)
                return jump
        return None

    def _produce(
        self, now: int | None, lateness: float, scheduled: int | None = None
    ) -> tuple[Tick, asyncio.Future[Any] | None]:
        """Make the tick (its sequence number used here), deliver it, queue its publish.

        `scheduled`: the slot's wall time; None for a tick outside the grid (emit_tick, a
        clock jump), whose scheduled_at is its `now`."""
        loop = asyncio.get_running_loop()
        wall = self.clock.now() if now is None else now
        tick = Tick(
            now=wall,
            tick_id=str(uuid.uuid4()),
            sequence_number=self.sequence.next(loop.time()),
            scheduled_at=wall if scheduled is None else min(scheduled, wall),
            correlation_id=str(uuid.uuid4()),
            scheduler_id=self.scheduler_id,
            tick_interval_ms=self.config.interval_ms,
        )
        counts = self._counts
        counts.delivered += 1
        counts.lateness.append(lateness * 1000)
        if self.bus is None:
            counts.last_ok_at = wall
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

    def _enqueue(self, tick: Tick, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        assert self._queue is not None
        done: asyncio.Future[Any] = loop.create_future()
        try:
            self._queue.put_nowait((tick, done))
        except asyncio.QueueFull:
            reason = "publish backlog full; tick dropped"
            self._failed(reason)
            done.set_result(
                self._error(InfraUnavailableError, tick, f"{reason} ({self.scheduler_id})")
            )
        return done

    # ---- publishing -------------------------------------------------------------------

    async def _publish_loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            tick, done = await queue.get()
            error: TickPublishError | None = None
            try:
                error = await self._publish(tick)
            except asyncio.CancelledError:  # stop() gave up on a publish in flight
                error = self._abandoned(tick)
                raise
            except Exception as exc:
                log.exception("publishing tick %s failed", tick.sequence_number)
                error = self._error(InfraConnectionError, tick, None, exc)
            finally:
                queue.task_done()
                if done is not None and not done.done():
                    done.set_result(error)

    def _abandoned(self, tick: Tick) -> TickPublishError:
        """A tick stop() gave up on (its publish cut short, or still queued): counted as
        failed, and its emit_tick caller, if any, gets this error instead of waiting forever."""
        reason = "scheduler stopped before the tick was published"
        self._failed(reason)
        return self._error(InfraUnavailableError, tick, f"{reason} ({self.scheduler_id})")

    def _drain(self, queue: asyncio.Queue[tuple[Tick, asyncio.Future[Any] | None]]) -> None:
        """After the publisher stopped: settle every tick still queued (see _abandoned)."""
        while not queue.empty():
            tick, done = queue.get_nowait()
            queue.task_done()
            error = self._abandoned(tick)
            if done is not None and not done.done():
                done.set_result(error)

    def _error(
        self,
        kind: type[TickPublishError],
        tick: Tick,
        message: str | None = None,
        cause: BaseException | None = None,
    ) -> TickPublishError:
        topic = self.config.topic
        if message is None:
            verb = "Timeout emitting" if kind is InfraTimeoutError else "Failed to emit"
            message = f"{verb} tick to topic {topic}"
        error = kind(
            message,
            topic=topic,
            scheduler_id=self.scheduler_id,
            sequence_number=tick.sequence_number,
            correlation_id=tick.correlation_id,
            reason=None if cause is None else (str(cause) or type(cause).__name__),
        )
        error.__cause__ = cause
        return error

    def _failed(self, reason: str) -> None:
        self._counts.failed += 1
        self._counts.consecutive += 1
        self.breaker.last_error = reason

    async def _publish(self, tick: Tick) -> TickPublishError | None:
        """Publish one tick; None on success, else the typed error (already counted)."""
        assert self.bus is not None
        loop = asyncio.get_running_loop()
        state = self.breaker.state
        if not self.breaker.allow(loop.time(), self.clock.now()):
            self._counts.failed += 1  # fails fast: no network call while open
            self._counts.consecutive += 1
            self._after_breaker(state)
            return self._error(
                InfraUnavailableError,
                tick,
                f"Circuit breaker is open - runtime-scheduler.{self.scheduler_id} "
                "temporarily unavailable",
            )
        started = loop.time()
        try:
            if self.simulate_failures:
                raise RuntimeError("simulated publish failure")
            key, value, headers = wire.encode(tick, self.wire, self.config.topic)
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation.
            async with asyncio.timeout(self.config.publish_timeout_s):
                await self.bus.publish(self.config.topic, key, value, headers)
        except Exception as exc:
            timed_out = isinstance(exc, TimeoutError)
            reason = str(exc) or type(exc).__name__
            if timed_out:
                reason = f"publish timed out after {self.config.publish_timeout_s:g}s"
            self._counts.failed += 1
            self._counts.consecutive += 1
            self.breaker.failure(loop.time(), self.clock.now(), reason)
            self._after_breaker(state)
            kind = InfraTimeoutError if timed_out else InfraConnectionError
            return self._error(kind, tick, None, exc)
        took = (loop.time() - started) * 1000
        counts = self._counts
        counts.published += 1
        counts.consecutive = 0
        counts.last_ok_at = tick.now
        counts.publish_total_ms += took
        counts.publish_last_ms = took
        counts.publish_max_ms = max(took, counts.publish_max_ms)
        counts.publish_recent.append(took)
        self.breaker.success(loop.time(), self.clock.now())
        self._after_breaker(state)
        return None

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

    def metrics(self) -> SchedulerMetrics:
        """The snapshot `get_metrics()` returns, without awaiting (for the dashboard)."""
        counts = self._counts
        loop_time = asyncio.get_running_loop().time() if _has_loop() else None
        uptime = (loop_time - self._started_mono) if loop_time and self._started_mono else 0.0
        lateness = sorted(counts.lateness)
        store = self.sequence.store.name if self.sequence.store is not None else "memory"
        p99 = _quantile(lateness, 0.99)
        healthy = (
            self._status == SchedulerStatus.RUNNING
            and self.breaker.state == CLOSED
            and self.sequence.state in ("ok", "off")
            and (p99 is None or p99 < self.config.interval_ms)
        )
        emitted = counts.published if self.bus is not None else counts.delivered
        current = self.sequence.current
        persisted = min(current, self.sequence.reserved) if self.sequence.store else 0
        return SchedulerMetrics(
            scheduler_id=self.scheduler_id,
            status=self._status,
            ticks_emitted=emitted,
            ticks_failed=counts.failed,
            last_tick_at=None if counts.last_ok_at is None else from_micros(counts.last_ok_at),
            last_tick_duration_ms=round(counts.publish_last_ms, 3),
            average_tick_duration_ms=round(counts.publish_total_ms / counts.published, 3)
            if counts.published
            else 0.0,
            max_tick_duration_ms=round(counts.publish_max_ms, 3),
            current_sequence_number=current,
            last_persisted_sequence=max(0, persisted),
            circuit_breaker_open=self.breaker.state == OPEN,
            consecutive_failures=counts.consecutive,
            started_at=None if self._started_at is None else from_micros(self._started_at),
            total_uptime_seconds=round(max(0.0, uptime), 3),
            interval_ms=self.config.interval_ms,
            bus=getattr(self.bus, "name", type(self.bus).__name__) if self.bus else "none",
            wire=self.wire,
            ticks_delivered=counts.delivered,
            ticks_published=counts.published,
            ticks_missed=counts.missed,
            ticks_coalesced=counts.coalesced,
            lateness_p50_ms=_r(_quantile(lateness, 0.5)),
            lateness_p99_ms=_r(p99),
            lateness_max_ms=_r(lateness[-1] if lateness else None),
            clock_jumps=counts.jumps,
            last_clock_jump_s=_r(counts.last_jump),
            sequence_store=store,
            sequence_state=self.sequence.state,
            sequence_error=self.sequence.error,
            sequence_reserved=self.sequence.reserved,
            breaker_state=self.breaker.state,
            breaker_failures=self.breaker.failures,
            breaker_threshold=self.breaker.threshold,
            breaker_retry_in_s=_r(self.breaker.retry_in(loop_time)) if loop_time else None,
            last_error=self.breaker.last_error,
            transitions=tuple(
                {"at": iso(t.at), "from": t.source, "to": t.target, "reason": t.reason}
                for t in self.breaker.transitions
            ),
            simulating_failures=self.simulate_failures,
            healthy=healthy,
            lateness_recent_ms=tuple(counts.lateness)[-SPARK:],
            publish_recent_ms=tuple(counts.publish_recent),
        )


def wire_formats() -> tuple[str, ...]:
    return wire.WIRES


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


def _clock_set_watch(clock: Clock) -> ClockSetWatch | None:
    """The kernel's word on clock steps, for the system clock itself (or a clock class
    that says its steps are the system's: `steps_announced = True` in its own body). Any
    other clock, a subclass of SystemClock included, is looked at instead."""
    announced = type(clock) is SystemClock or vars(type(clock)).get("steps_announced") is True
    if not announced or clock.scale != 1:
        return None
    watch = ClockSetWatch.open()
    if watch is not None:
        watch.attach(asyncio.get_running_loop())
    return watch


async def _bounded(task: asyncio.Task[Any], timeout: float) -> None:
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
