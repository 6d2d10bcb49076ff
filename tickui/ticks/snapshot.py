"""The ticker's metrics: what its parts counted, put together as ONEX's SchedulerMetrics
(field for field) and tickui's own fields."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from tickui.common.timeutil import from_micros, iso
from tickui.ticks.breaker import CLOSED, OPEN
from tickui.ticks.metrics import SchedulerMetrics, SchedulerStatus
from tickui.ticks.publisher import SPARK, TickPublisher
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.slots import SlotCounts

WINDOW = 1000  # lateness samples kept for percentiles


@dataclass(slots=True)
class DeliveryCounts:
    """Ticks made and handed to subscribers in this process."""

    delivered: int = 0
    coalesced: int = 0  # deliveries skipped: the subscriber was still busy
    last_at: int | None = None  # the last tick's time (stands for the last publish without a bus)
    lateness: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))


@dataclass(frozen=True)
class Uptime:
    started_mono: float | None  # loop time at start
    started_at: int | None  # wall time at start
    loop_time: float | None  # loop time now; None outside a running loop


def snapshot(
    *,
    scheduler_id: str,
    status: SchedulerStatus,
    interval_ms: int,
    bus_name: str | None,
    uptime: Uptime,
    deliveries: DeliveryCounts,
    slots: SlotCounts,
    publisher: TickPublisher,
    sequence: SequenceAllocator,
) -> SchedulerMetrics:
    """The metrics now. `bus_name` is None without a bus: emitted then means delivered."""
    published = publisher.counts
    breaker = publisher.breaker
    loop_time = uptime.loop_time
    up = (loop_time - uptime.started_mono) if loop_time and uptime.started_mono else 0.0
    lateness = sorted(deliveries.lateness)
    store = sequence.store.name if sequence.store is not None else "memory"
    p99 = _quantile(lateness, 0.99)
    healthy = (
        status == SchedulerStatus.RUNNING
        and breaker.state == CLOSED
        and sequence.state in ("ok", "off")
        and (p99 is None or p99 < interval_ms)
    )
    has_bus = bus_name is not None
    emitted = published.published if has_bus else deliveries.delivered
    last_ok = published.last_ok_at if has_bus else deliveries.last_at
    current = sequence.current
    persisted = min(current, sequence.reserved) if sequence.store else 0
    return SchedulerMetrics(
        scheduler_id=scheduler_id,
        status=status,
        ticks_emitted=emitted,
        ticks_failed=published.failed,
        last_tick_at=None if last_ok is None else from_micros(last_ok),
        last_tick_duration_ms=round(published.last_ms, 3),
        average_tick_duration_ms=round(published.total_ms / published.published, 3)
        if published.published
        else 0.0,
        max_tick_duration_ms=round(published.max_ms, 3),
        current_sequence_number=current,
        last_persisted_sequence=max(0, persisted),
        circuit_breaker_open=breaker.state == OPEN,
        consecutive_failures=published.consecutive,
        started_at=None if uptime.started_at is None else from_micros(uptime.started_at),
        total_uptime_seconds=round(max(0.0, up), 3),
        interval_ms=interval_ms,
        bus=bus_name or "none",
        wire=publisher.wire,
        ticks_delivered=deliveries.delivered,
        ticks_published=published.published,
        ticks_missed=slots.missed,
        ticks_coalesced=deliveries.coalesced,
        lateness_p50_ms=_r(_quantile(lateness, 0.5)),
        lateness_p99_ms=_r(p99),
        lateness_max_ms=_r(lateness[-1] if lateness else None),
        clock_jumps=slots.jumps,
        last_clock_jump_s=_r(slots.last_jump),
        sequence_store=store,
        sequence_state=sequence.state,
        sequence_error=sequence.error,
        sequence_reserved=sequence.reserved,
        breaker_state=breaker.state,
        breaker_failures=breaker.failures,
        breaker_threshold=breaker.threshold,
        breaker_retry_in_s=_r(breaker.retry_in(loop_time)) if loop_time else None,
        last_error=breaker.last_error,
        transitions=tuple(
            {"at": iso(t.at), "from": t.source, "to": t.target, "reason": t.reason}
            for t in breaker.transitions
        ),
        simulating_failures=publisher.simulate_failures,
        healthy=healthy,
        lateness_recent_ms=tuple(deliveries.lateness)[-SPARK:],
        publish_recent_ms=tuple(published.recent_ms),
    )


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
