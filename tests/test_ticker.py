"""The RuntimeScheduler with an in-memory bus, in real (short) time."""

from __future__ import annotations

import asyncio
import itertools
import json

from tickui.bus import MemoryBus
from tickui.clock import SystemClock
from tickui.sequence import SequenceAllocator
from tickui.ticker import RuntimeScheduler
from tickui.ticker_config import TickerConfig


def _ticker(bus=None, **config) -> RuntimeScheduler:
    base = {
        "interval_ms": 20,
        "breaker_threshold": 3,
        "breaker_reset_s": 1,
        "publish_timeout_s": 0.2,
        "scheduler_id": "test-ticker",
    }
    base.update(config)
    return RuntimeScheduler(
        TickerConfig(**base), SystemClock(), bus, SequenceAllocator(None, "k", 10), align=False
    )


async def _until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_ticks_reach_subscribers_first_then_the_bus_with_the_contract():
    bus = MemoryBus()
    ticker = _ticker(bus)
    seen = []

    async def subscriber(tick) -> None:
        seen.append((tick.sequence_number, len(bus.messages)))

    ticker.subscribe(subscriber)
    await ticker.start()
    await ticker.start()  # idempotent
    await _until(lambda: len(bus.messages) >= 10)
    await ticker.stop()
    await ticker.stop()
    assert ticker.metrics().status == "stopped"
    assert all(published < number for number, published in seen)  # delivered before publish
    topic, key, value, headers = bus.messages[0]
    assert topic == "runtime.tick.v1" and key == b"test-ticker"
    body = json.loads(value)
    assert set(body) == {
        "now",
        "tick_id",
        "sequence_number",
        "scheduled_at",
        "correlation_id",
        "scheduler_id",
        "tick_interval_ms",
    }
    assert body["scheduler_id"] == "test-ticker" and body["tick_interval_ms"] == 20
    named = dict(headers)
    assert named["event_type"] == b"runtime.tick.v1"
    assert named["message_id"] == body["tick_id"].encode()
    assert named["correlation_id"] == body["correlation_id"].encode()
    assert named["source"] == b"tickui.test-ticker" and named["timestamp"]
    numbers = [json.loads(m[2])["sequence_number"] for m in bus.messages]
    assert numbers == sorted(set(numbers)) and numbers[0] == 1


async def test_breaker_opens_fails_fast_probes_and_closes():
    bus = MemoryBus()
    ticker = _ticker(bus)
    await ticker.start()
    await _until(lambda: ticker.metrics().ticks_published >= 3)
    bus.fail_with = "broker gone"
    await _until(lambda: ticker.breaker.state == "OPEN")
    attempts = bus.attempts
    failed = ticker.metrics().ticks_failed
    await asyncio.sleep(0.5)  # ticks keep coming, but nothing reaches the bus
    assert bus.attempts == attempts
    assert ticker.metrics().ticks_failed > failed + 10
    assert ticker.metrics().is_healthy is False
    bus.fail_with = None
    await _until(lambda: ticker.breaker.state == "CLOSED", timeout=3)
    await ticker.stop()
    moves = [(t["from"], t["to"]) for t in ticker.metrics().transitions]
    assert moves == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED")]
    assert ticker.metrics().last_error == "broker gone"


async def test_a_hung_bus_does_not_delay_ticks():
    bus = MemoryBus(delay=5)
    ticker = _ticker(bus)
    loop = asyncio.get_running_loop()
    times = []

    async def subscriber(tick) -> None:
        times.append(loop.time())

    ticker.subscribe(subscriber)
    await ticker.start()
    await _until(lambda: len(times) >= 30)
    await ticker.stop(timeout=1)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) < 0.2, gaps
    metrics = ticker.metrics()
    assert metrics.ticks_failed >= 1 and "timed out" in (metrics.last_error or "")


async def test_a_slow_subscriber_is_coalesced_never_stacked():
    ticker = _ticker()
    running = 0
    worst = 0

    async def slow(tick) -> None:
        nonlocal running, worst
        running += 1
        worst = max(worst, running)
        await asyncio.sleep(0.07)
        running -= 1

    ticker.subscribe(slow)
    await ticker.start()
    await asyncio.sleep(0.5)
    await ticker.stop()
    assert worst == 1
    assert ticker.metrics().ticks_coalesced > 5


async def test_simulated_failures_feed_the_breaker_without_touching_the_bus():
    bus = MemoryBus()
    ticker = _ticker(bus)
    await ticker.start()
    await _until(lambda: bus.attempts >= 2)
    ticker.simulate_failures = True
    attempts = bus.attempts
    await _until(lambda: ticker.breaker.state == "OPEN")
    assert bus.attempts == attempts
    assert ticker.metrics().simulating_failures is True
    await ticker.stop()


async def test_emit_tick_uses_the_given_now_and_reports_metrics():
    bus = MemoryBus()
    ticker = _ticker(bus)
    await ticker.start()
    tick = await ticker.emit_tick(now=1_800_000_000_000_000)
    assert tick.now == 1_800_000_000_000_000
    assert ticker.current_sequence_number >= tick.sequence_number
    metrics = await ticker.get_metrics()
    await ticker.stop()
    assert metrics.status == "running" and metrics.ticks_emitted >= 1
    assert metrics.lateness_p99_ms is not None and metrics.success_rate == 1.0
    assert any(json.loads(m[2])["now"] == "2027-01-15T08:00:00+00:00" for m in bus.messages)
