"""The tick emitter: the single source of "now" for the engine and for other services.

Ticks come from the slot loop (slots.py: on a grid, never drifting, a stall costing one
tick). Each tick goes to in-process subscribers first (the engine scans on it), then to
the external bus, if any, through the publisher (publisher.py: a queue, a circuit breaker
and a per-publish timeout): a slow or dead broker never delays a tick.

Two faces:
- ONEX's `ProtocolRuntimeScheduler` (the public one, see onex.py): `await emit_tick(now:
  datetime | None = None) -> None`, raising the typed errors of tickui.common.errors on a
  failed publish, and `await get_metrics()` -> `SchedulerMetrics` (ONEX's metrics model,
  field for field). `RuntimeScheduler(config=<ModelRuntimeSchedulerConfig or look-alike>,
  event_bus=<any object with ONEX's `publish(topic, key, value, headers)`>)` is a drop-in
  for ONEX's.
- tickui's internal one in integer microseconds: `Tick`, `emit_tick_at(micros) -> Tick`
  (never raises for a failed publish: it is counted), `metrics()`, `subscribe`, `status`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from tickui.common.clock import Clock, SystemClock
from tickui.common.errors import SchedulerConfigError, TickPublishError, TickTimeError
from tickui.common.timeutil import to_micros
from tickui.ticks import wire
from tickui.ticks.breaker import CircuitBreaker
from tickui.ticks.bus import EventBus
from tickui.ticks.metrics import SchedulerMetrics, SchedulerStatus
from tickui.ticks.onex import onex_like, onex_sequence, ticker_config_from_onex
from tickui.ticks.publisher import TickPublisher, Waiter, bounded
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.slots import SlotLoop
from tickui.ticks.snapshot import DeliveryCounts, Uptime, snapshot
from tickui.ticks.tick import Tick

log = logging.getLogger("tickui.ticker")

Subscriber = Callable[[Tick], Awaitable[None]]

TickerMetrics = SchedulerMetrics  # the older name


class RuntimeScheduler:
    """The ticker. Two ways to build one:

    - tickui's: `RuntimeScheduler(config: TickerConfig, clock, bus, sequence)`: the bus
      (tickui's MemoryBus/KafkaBus, or None for local ticks only) and the sequence
      allocator are made by the caller (tickui.runtime.assembly) and started/stopped with
      the ticker.
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
        owns_bus = True
        if onex_like(config):
            if event_bus is None and clock is not None and hasattr(clock, "publish"):
                clock, event_bus = None, clock  # RuntimeScheduler(config, event_bus)
            if event_bus is None:
                raise SchedulerConfigError("RuntimeScheduler needs an event_bus")
            config = ticker_config_from_onex(config, publish_timeout_s)
            bus, owns_bus = event_bus, False
            if sequence is None:
                sequence = onex_sequence(config)
        elif event_bus is not None:
            bus = event_bus
        if sequence is None:
            sequence = SequenceAllocator(None, config.sequence_key, 10)
        wire = wire or config.wire
        if wire not in wire_formats():
            raise SchedulerConfigError(f"wire {wire!r} is not one of bare, envelope")
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.sequence = sequence
        self.align = align
        self._publisher = TickPublisher(bus, owns_bus, config, self.clock, wire, self._changed)
        self._slots = SlotLoop(config, self.clock, align, rng or random.Random(), self._produce)
        self._status = SchedulerStatus.STOPPED
        self._counts = DeliveryCounts()
        self._subscribers: list[Subscriber] = []
        self._deliveries: dict[int, asyncio.Task[None]] = {}  # subscriber index -> its task
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
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

    @property
    def bus(self) -> EventBus | None:
        return self._publisher.bus

    @property
    def wire(self) -> str:
        return self._publisher.wire

    @property
    def breaker(self) -> CircuitBreaker:
        return self._publisher.breaker

    @property
    def simulate_failures(self) -> bool:
        """Every publish fails while set (the dashboard's `f`, to watch the breaker)."""
        return self._publisher.simulate_failures

    @simulate_failures.setter
    def simulate_failures(self, value: bool) -> None:
        self._publisher.simulate_failures = value

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
        await self._publisher.start()
        # before the start is taken: opening it must not push the first ticks late
        self._slots.watch_clock()
        self._started_mono, self._started_at = loop.time(), self.clock.now()
        self._status = SchedulerStatus.RUNNING
        self._loop_task = asyncio.create_task(self._slots.run(self._stopping), name="tickui-ticker")
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
        self._slots.interrupt()
        if self._loop_task is not None:
            await bounded(self._loop_task, timeout)
        pending = [t for t in self._deliveries.values() if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        await self._publisher.stop(timeout)
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
        tick, published = self._produce(now, 0.0, None)
        if published is not None:
            return tick, await published
        if self.bus is not None:  # not started: publish here, as ONEX's scheduler does
            return tick, await self._publisher.publish(tick)
        return tick, None

    async def get_metrics(self) -> SchedulerMetrics:
        """ONEX's `get_metrics`: an immutable snapshot (see tickui.ticks.metrics)."""
        return self.metrics()

    # ---- each tick ----------------------------------------------------------------------

    def _produce(
        self, now: int | None, lateness: float, scheduled: int | None
    ) -> tuple[Tick, Waiter | None]:
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
        counts.last_at = wall
        self._deliver(tick)
        published = self._publisher.offer(tick, loop)
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

    def _changed(self) -> None:
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("ticker listener failed")

    # ---- metrics -------------------------------------------------------------------

    def metrics(self) -> SchedulerMetrics:
        """The snapshot `get_metrics()` returns, without awaiting (for the dashboard)."""
        loop_time = asyncio.get_running_loop().time() if _has_loop() else None
        return snapshot(
            scheduler_id=self.scheduler_id,
            status=self._status,
            interval_ms=self.config.interval_ms,
            bus_name=_bus_name(self.bus),
            uptime=Uptime(self._started_mono, self._started_at, loop_time),
            deliveries=self._counts,
            slots=self._slots.counts,
            publisher=self._publisher,
            sequence=self.sequence,
        )


def wire_formats() -> tuple[str, ...]:
    return wire.WIRES


def _bus_name(bus: Any) -> str | None:
    """tickui's buses name themselves; ONEX's event bus is any object with `publish`, so
    its class names it unless it has a name of its own."""
    if bus is None:
        return None
    return getattr(bus, "name", type(bus).__name__)


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
