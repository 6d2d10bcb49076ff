"""Ticks to the external bus: from a bounded queue, behind a circuit breaker and a
per-publish timeout, so a slow or dead broker never delays a tick. Failures come back
as the typed errors of tickui.common.errors (ONEX's), counted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tickui.common.clock import Clock
from tickui.common.errors import (
    InfraConnectionError,
    InfraTimeoutError,
    InfraUnavailableError,
    TickPublishError,
)
from tickui.ticks import wire
from tickui.ticks.breaker import CircuitBreaker
from tickui.ticks.bus import EventBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.tick import Tick

log = logging.getLogger("tickui.ticker")
BACKLOG = 1000  # ticks waiting to be published before new ones are dropped
SPARK = 120  # samples kept for sparklines

Waiter = asyncio.Future[Any]  # settles with the tick's TickPublishError, or None


@dataclass(slots=True)
class PublishCounts:
    published: int = 0
    failed: int = 0
    consecutive: int = 0  # failed emissions since the last success (ONEX's meaning)
    last_ok_at: int | None = None  # the last published tick's time
    total_ms: float = 0.0
    last_ms: float = 0.0
    max_ms: float = 0.0
    recent_ms: deque[float] = field(default_factory=lambda: deque(maxlen=SPARK))


class TickPublisher:
    """Publishes ticks to `bus` in `wire` format. A bus it owns (tickui's) it starts and
    stops; ONEX's event bus belongs to the caller. `changed` hears every breaker move."""

    def __init__(
        self,
        bus: EventBus | None,
        owns_bus: bool,
        config: TickerConfig,
        clock: Clock,
        wire_format: str,
        changed: Callable[[], None],
    ) -> None:
        self.bus = bus
        self.owns_bus = owns_bus
        self.config = config
        self.clock = clock
        self.wire = wire_format
        self.changed = changed
        self.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_reset_s)
        self.simulate_failures = False
        self.counts = PublishCounts()
        self._queue: asyncio.Queue[tuple[Tick, Waiter | None]] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def scheduler_id(self) -> str:
        return self.config.scheduler_id

    async def start(self) -> None:
        """Start the bus (when owned) and the queue's publisher; nothing without a bus."""
        if self.bus is None:
            return
        if self.owns_bus:
            await self.bus.start()
        self._queue = asyncio.Queue(BACKLOG)
        self._task = asyncio.create_task(self._publish_loop(), name="tickui-publish")

    async def stop(self, timeout: float) -> None:
        """Wait (bounded) for queued publishes, settle what is left unpublished, then stop
        the bus when owned."""
        if self._queue is not None and self._task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), self.config.publish_timeout_s * 2)
            self._task.cancel()
            await bounded(self._task, timeout)
            self._drain(self._queue)  # nothing waits forever on a tick never published
        self._queue, self._task = None, None
        if self.bus is not None and self.owns_bus:
            await self.bus.stop()

    def offer(self, tick: Tick, loop: asyncio.AbstractEventLoop) -> Waiter | None:
        """Queue the tick's publish: a future of its outcome, or None when not started."""
        if self._queue is None:
            return None
        done: Waiter = loop.create_future()
        try:
            self._queue.put_nowait((tick, done))
        except asyncio.QueueFull:
            reason = "publish backlog full; tick dropped"
            self._failed(reason)
            done.set_result(
                self._error(InfraUnavailableError, tick, f"{reason} ({self.scheduler_id})")
            )
        return done

    async def _publish_loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            tick, done = await queue.get()
            error: TickPublishError | None = None
            try:
                error = await self.publish(tick)
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

    def _drain(self, queue: asyncio.Queue[tuple[Tick, Waiter | None]]) -> None:
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
        self.counts.failed += 1
        self.counts.consecutive += 1
        self.breaker.last_error = reason

    async def publish(self, tick: Tick) -> TickPublishError | None:
        """Publish one tick; None on success, else the typed error (already counted)."""
        assert self.bus is not None
        loop = asyncio.get_running_loop()
        state = self.breaker.state
        if not self.breaker.allow(loop.time(), self.clock.now()):
            self.counts.failed += 1  # fails fast: no network call while open
            self.counts.consecutive += 1
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
            self.counts.failed += 1
            self.counts.consecutive += 1
            self.breaker.failure(loop.time(), self.clock.now(), reason)
            self._after_breaker(state)
            kind = InfraTimeoutError if timed_out else InfraConnectionError
            return self._error(kind, tick, None, exc)
        took = (loop.time() - started) * 1000
        counts = self.counts
        counts.published += 1
        counts.consecutive = 0
        counts.last_ok_at = tick.now
        counts.total_ms += took
        counts.last_ms = took
        counts.max_ms = max(took, counts.max_ms)
        counts.recent_ms.append(took)
        self.breaker.success(loop.time(), self.clock.now())
        self._after_breaker(state)
        return None

    def _after_breaker(self, before: str) -> None:
        if self.breaker.state != before:
            last = self.breaker.transitions[-1]
            log.warning("circuit breaker %s -> %s: %s", last.source, last.target, last.reason)
            self.changed()


async def bounded(task: asyncio.Task[Any], timeout: float) -> None:
    """Wait up to `timeout` s for `task`, then cancel it."""
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
