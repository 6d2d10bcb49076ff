"""The RuntimeScheduler with an in-memory bus, in real (short) time."""

from __future__ import annotations

import asyncio
import itertools
import json
import selectors
import subprocess
import sys
import textwrap
import time

import pytest

from tickui.common.clock import SystemClock
from tickui.common.timeutil import iso
from tickui.ticks.bus import MemoryBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.sequence import SequenceAllocator, SequenceStoreError
from tickui.ticks.ticker import RuntimeScheduler
from tickui.ticks.wire import HEADER_NAMES, onex_time

_LIVE: list[RuntimeScheduler] = []


@pytest.fixture(autouse=True)
async def _stop_leftover_tickers():
    """Stop every ticker a test made, so a failing assertion reports instead of hanging
    the event loop's teardown (see test_an_abandoned_ticker_does_not_hang_the_exit)."""
    yield
    while _LIVE:
        await _LIVE.pop().stop(timeout=1)


def _ticker(bus=None, **config) -> RuntimeScheduler:
    base = {
        "interval_ms": 20,
        "breaker_threshold": 3,
        "breaker_reset_s": 1,
        "publish_timeout_s": 0.2,
        "scheduler_id": "test-ticker",
    }
    base.update(config)
    ticker = RuntimeScheduler(
        TickerConfig(**base), SystemClock(), bus, SequenceAllocator(None, "k", 10), align=False
    )
    _LIVE.append(ticker)
    return ticker


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
    assert named["source"] == b"runtime-scheduler.test-ticker" and named["timestamp"]
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
    assert ticker.metrics().is_healthy() is False  # ONEX's rule: the breaker is open
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
    assert max(gaps) < 1.0, gaps  # the publish hangs 5 s; ticks (every 20 ms) go on
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
    tick = await ticker.emit_tick_at(now=1_800_000_000_000_000)
    assert tick.now == 1_800_000_000_000_000
    assert ticker.current_sequence_number >= tick.sequence_number
    metrics = await ticker.get_metrics()
    await ticker.stop()
    assert metrics.status == "running" and metrics.ticks_emitted >= 1
    assert metrics.lateness_p99_ms is not None and metrics.success_rate == 1.0
    assert any(json.loads(m[2])["now"] == "2027-01-15T08:00:00Z" for m in bus.messages)


# ---- more, in the same style ---------------------------------------------------------------

T_X = 1_800_000_000_000_000  # 2027-01-15T08:00:00Z in microseconds


class FakeSeqStore:
    name = "fake"

    def __init__(self) -> None:
        self.value: dict[str, int] = {}
        self.down = False
        self.calls = 0

    async def reserve(self, key: str, floor: int, block: int) -> int:
        self.calls += 1
        if self.down:
            raise SequenceStoreError("fake store is down")
        self.value[key] = max(self.value.get(key, 0), floor) + block
        return self.value[key]

    async def release(self, key: str, expected: int, value: int) -> None:
        if self.down:
            raise SequenceStoreError("fake store is down")
        if self.value.get(key) == expected:
            self.value[key] = value

    async def close(self) -> None:
        return None


class ShiftedClock:
    """The system clock plus an offset a test can step, as NTP or a resume would."""

    scale = 1.0

    def __init__(self) -> None:
        self.shift = 0
        self._base = SystemClock()

    def now(self) -> int:
        return self._base.now() + self.shift

    def monotonic(self) -> float:
        return self._base.monotonic()


def _make(bus=None, sequence=None, clock=None, **config) -> RuntimeScheduler:
    base = {
        "interval_ms": 20,
        "breaker_threshold": 3,
        "breaker_reset_s": 1,
        "publish_timeout_s": 0.2,
        "scheduler_id": "test-ticker",
    }
    base.update(config)
    ticker = RuntimeScheduler(
        TickerConfig(**base),
        clock or SystemClock(),
        bus,
        sequence or SequenceAllocator(None, "k", 10),
        align=False,
    )
    _LIVE.append(ticker)
    return ticker


async def test_start_and_stop_are_idempotent_and_a_second_start_adds_no_loop():
    ticker = _make()
    assert not ticker.is_running and ticker.metrics().status == "stopped"
    await ticker.stop()  # stopping a ticker that never started is harmless
    await ticker.start()
    assert ticker.is_running and ticker.metrics().status == "running"
    loop_task = ticker._loop_task
    await ticker.start()
    assert ticker._loop_task is loop_task  # no second tick loop
    await asyncio.sleep(0.4)
    emitted = ticker.metrics().ticks_emitted
    missed = ticker.metrics().ticks_missed
    # one loop: about 20 slots in 0.4 s, not 40
    assert 10 <= emitted + missed <= 24, (emitted, missed)
    await ticker.stop()
    assert not ticker.is_running
    after = ticker.metrics().ticks_emitted
    await ticker.stop()
    await asyncio.sleep(0.1)
    assert ticker.metrics().ticks_emitted == after  # stopped means no more ticks
    assert ticker.metrics().status == "stopped"


async def test_a_restart_continues_the_sequence():
    ticker = _make()
    seen = []

    async def record(tick) -> None:
        seen.append(tick.sequence_number)

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(seen) >= 3)
    await ticker.stop()
    before = list(seen)
    await ticker.start()
    await _until(lambda: len(seen) >= len(before) + 3)
    await ticker.stop()
    assert seen == sorted(set(seen))
    assert seen[len(before)] == before[-1] + 1


async def test_subscribers_see_the_tick_before_it_is_published():
    bus = MemoryBus()
    ticker = _make(bus)
    published_at_call = []

    async def check(tick) -> None:
        ids = {json.loads(m[2])["tick_id"] for m in bus.messages}
        published_at_call.append(tick.tick_id in ids)

    ticker.subscribe(check)
    await ticker.start()
    await _until(lambda: len(published_at_call) >= 10)
    tick = await ticker.emit_tick_at()
    await ticker.stop()
    assert published_at_call and not any(published_at_call)
    # emit_tick waited for its publish
    assert any(json.loads(m[2])["tick_id"] == tick.tick_id for m in bus.messages)


async def test_the_published_event_matches_its_tick():
    bus = MemoryBus()
    ticker = _make(bus)
    ticks = {}

    async def record(tick) -> None:
        ticks[tick.tick_id] = tick

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(bus.messages) >= 5)
    await ticker.stop()
    for topic, key, value, headers in bus.messages:
        body = json.loads(value)
        tick = ticks[body["tick_id"]]
        assert topic == ticker.config.topic
        assert key == ticker.scheduler_id.encode() == b"test-ticker"
        assert body["sequence_number"] == tick.sequence_number
        assert body["now"] == onex_time(tick.now)
        assert body["scheduled_at"] == onex_time(tick.scheduled_at)
        assert tick.scheduled_at <= tick.now
        assert tick.now - tick.scheduled_at < 1_000_000  # lateness, not garbage
        named = dict(headers)
        assert [name for name, _ in headers] == list(HEADER_NAMES)  # ONEX's ten, in order
        assert all(isinstance(v, bytes) for v in named.values())
        assert named["timestamp"] == iso(tick.now).encode()  # datetime.isoformat(), as ONEX
        assert named["source"] == b"runtime-scheduler.test-ticker"
        assert named["message_id"] == body["tick_id"].encode()
        assert named["correlation_id"] == body["correlation_id"].encode()
        assert named["event_type"] == b"runtime.tick.v1"
        assert body["tick_id"] != body["correlation_id"]
    ids = [json.loads(m[2])["tick_id"] for m in bus.messages]
    assert len(ids) == len(set(ids))


async def test_a_custom_topic_is_used():
    bus = MemoryBus()
    ticker = _make(bus, topic="other.ticks")
    await ticker.start()
    await _until(lambda: len(bus.messages) >= 2)
    await ticker.stop()
    assert {m[0] for m in bus.messages} == {"other.ticks"}


async def test_no_drift_in_the_real_loop_despite_emit_costs():
    """Each emit costs 5 ms of blocking work (a synchronous listener). The reference
    loop would lose a quarter of the slots; ours stays on the 20 ms grid."""
    ticker = _make()
    loop = asyncio.get_running_loop()
    scheduled = []

    async def record(tick) -> None:
        scheduled.append(tick.scheduled_at)

    ticker.subscribe(record)
    ticker.on_change(lambda: time.sleep(0.005))
    began = loop.time()
    await ticker.start()
    await asyncio.sleep(1.0)
    await ticker.stop()
    elapsed = loop.time() - began
    m = ticker.metrics()
    slots = m.ticks_emitted + m.ticks_missed
    assert abs(slots - elapsed / 0.02) <= 3, (slots, elapsed)
    # every tick's scheduled time is on the grid started by the first one
    phases = [((at - scheduled[0]) / 1000) % 20 for at in scheduled]  # ms past a slot
    off_grid = [p for p in phases if min(p, 20 - p) > 3]
    assert len(off_grid) <= 2, off_grid


async def test_a_blocked_loop_counts_missed_slots_and_does_not_burst():
    ticker = _make()
    loop = asyncio.get_running_loop()
    times = []

    async def record(tick) -> None:
        times.append(loop.time())

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(times) >= 3)
    time.sleep(0.3)  # the whole loop is stuck for 15 slots
    unblocked = loop.time()
    await asyncio.sleep(0.2)
    await ticker.stop()
    m = ticker.metrics()
    assert m.ticks_missed >= 8, m.ticks_missed
    # the tick after the stall is for the newest slot, so it is not late for it
    assert m.lateness_max_ms is not None and m.lateness_max_ms < 20
    burst = [t for t in times if unblocked <= t < unblocked + 0.03]
    assert len(burst) <= 3, burst  # a catch-up would be ~15 ticks at once
    assert len([t for t in times if t >= unblocked]) <= 0.2 / 0.02 + 3


async def test_while_open_only_one_probe_per_reset_period_reaches_the_bus():
    bus = MemoryBus()
    ticker = _make(bus)
    await ticker.start()
    bus.fail_with = "down"
    await _until(lambda: ticker.breaker.state == "OPEN")
    attempts = bus.attempts
    assert attempts == 3  # the threshold, and not one more
    m = ticker.metrics()
    assert m.breaker_failures == 3 and m.breaker_state == "OPEN"
    assert m.consecutive_failures >= 3 and m.circuit_breaker_open  # refusals count (ONEX)
    assert m.breaker_retry_in_s is not None and 0 < m.breaker_retry_in_s <= 1
    assert m.is_healthy() is False
    await asyncio.sleep(1.5)  # one reset period passes: exactly one probe, which fails
    await ticker.stop()
    assert bus.attempts == attempts + 1
    moves = [(t["from"], t["to"]) for t in ticker.metrics().transitions]
    assert moves == [("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN")]
    assert "probe failed: down" in ticker.metrics().transitions[-1]["reason"]
    assert all(t["at"] for t in ticker.metrics().transitions)


async def test_local_ticks_continue_at_full_rate_while_the_breaker_is_open():
    bus = MemoryBus()
    bus.fail_with = "down"
    ticker = _make(bus)
    seen = []

    async def record(tick) -> None:
        seen.append(tick.sequence_number)

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: ticker.breaker.state == "OPEN")
    count = len(seen)
    await asyncio.sleep(0.4)
    await ticker.stop()
    assert len(seen) - count >= 10  # ~20 expected: the outage does not slow ticking
    m = ticker.metrics()
    assert m.ticks_published == 0 and m.ticks_failed >= len(seen) - 5
    assert m.success_rate == 0.0


async def test_a_hung_bus_keeps_the_interval_and_times_publishes_out():
    bus = MemoryBus(delay=5)
    ticker = _make(bus)
    loop = asyncio.get_running_loop()
    times = []

    async def record(tick) -> None:
        times.append(loop.time())

    ticker.subscribe(record)
    await ticker.start()
    await asyncio.sleep(0.8)
    await ticker.stop(timeout=1)
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    median = gaps[len(gaps) // 2]
    assert 0.015 <= median <= 0.03, median
    assert len(times) >= 25  # ~40 expected
    m = ticker.metrics()
    assert m.ticks_published == 0 and not bus.messages
    assert m.breaker_state == "OPEN"  # three timeouts of 0.2 s opened it
    assert "timed out after 0.2s" in (m.transitions[0]["reason"] or "")


async def test_simulated_failures_do_not_reach_the_bus_and_can_be_switched_off():
    bus = MemoryBus()
    ticker = _make(bus)
    ticker.simulate_failures = True
    await ticker.start()
    await _until(lambda: ticker.breaker.state == "OPEN")
    assert bus.attempts == 0 and not bus.messages
    assert "simulated" in (ticker.metrics().last_error or "")
    assert ticker.metrics().ticks_failed >= 3
    ticker.simulate_failures = False
    await _until(lambda: ticker.breaker.state == "CLOSED", timeout=3)
    await _until(lambda: len(bus.messages) >= 2)
    await ticker.stop()
    assert ticker.metrics().simulating_failures is False
    assert bus.attempts == len(bus.messages)  # only real publishes reached it


async def test_emit_tick_with_a_given_now():
    ticker = _make()  # no bus: nothing to wait for
    seen = []

    async def record(tick) -> None:
        seen.append(tick)

    ticker.subscribe(record)
    tick = await ticker.emit_tick_at(now=T_X)
    await asyncio.sleep(0)
    assert tick.now == T_X and tick.scheduled_at == T_X  # emitted at once: no lateness
    assert tick.scheduler_id == "test-ticker" and tick.tick_interval_ms == 20
    assert tick.sequence_number == ticker.current_sequence_number == 1
    assert seen == [tick]
    assert tick.to_json()["now"] == "2027-01-15T08:00:00+00:00"
    other = await ticker.emit_tick_at(now=T_X + 1)
    assert other.now == T_X + 1 and other.sequence_number == 2


async def test_emit_tick_with_a_failing_bus_returns_and_counts_a_failure():
    bus = MemoryBus()
    bus.fail_with = "nope"
    ticker = _make(bus, interval_ms=60_000)  # the loop stays out of the way
    await ticker.start()
    await asyncio.sleep(0.05)
    before = ticker.metrics().ticks_failed
    tick = await ticker.emit_tick_at(now=T_X)
    m = await ticker.get_metrics()
    await ticker.stop()
    assert tick.now == T_X
    assert m.ticks_failed == before + 1 and m.last_error == "nope"


async def test_metrics_while_healthy_and_after_failures():
    bus = MemoryBus()
    ticker = _make(bus, interval_ms=50)
    await ticker.start()
    await _until(lambda: ticker.metrics().ticks_published >= 5)
    m = await ticker.get_metrics()
    assert m.status == "running" and m.is_healthy() is True and m.healthy is True
    assert m.success_rate == 1.0 and m.ticks_failed == 0
    assert m.publish_last_ms is not None and m.publish_avg_ms is not None
    assert 0 <= m.publish_avg_ms <= m.publish_max_ms
    assert m.lateness_p50_ms is not None and m.lateness_p99_ms is not None
    assert 0 <= m.lateness_p50_ms <= m.lateness_p99_ms <= m.lateness_max_ms
    assert m.started_at is not None and m.started_at.utcoffset() is not None
    assert m.to_json()["started_at"].endswith("+00:00")
    assert m.uptime_s > 0
    assert m.bus == "memory" and m.sequence_store == "memory" and m.sequence_state == "off"
    assert m.breaker_state == "CLOSED" and m.breaker_retry_in_s is None
    assert m.current_sequence == ticker.current_sequence_number >= 5
    assert m.lateness_recent_ms and m.publish_recent_ms
    data = m.to_json()
    json.dumps(data)  # serialisable
    assert "lateness_recent_ms" not in data
    for name in ("ticks_emitted", "ticks_missed", "breaker_state", "is_healthy", "uptime_s"):
        assert name in data
    bus.fail_with = "x"
    await _until(lambda: ticker.metrics().ticks_failed >= 2)
    m = ticker.metrics()
    assert m.success_rate == round(m.ticks_published / (m.ticks_published + m.ticks_failed), 4)
    assert m.success_rate < 1.0
    await ticker.stop()
    assert ticker.metrics().is_healthy() is False  # stopped is not healthy
    assert ticker.metrics().healthy is False
    assert ticker.metrics().status == "stopped"


async def test_stop_waits_for_the_tick_in_flight_and_persists_the_sequence():
    store = FakeSeqStore()
    ticker = _make(sequence=SequenceAllocator(store, "seq", 10))
    state = {"started": 0, "finished": 0}

    async def slow(tick) -> None:
        state["started"] += 1
        await asyncio.sleep(0.15)
        state["finished"] += 1

    ticker.subscribe(slow)
    await ticker.start()
    await _until(lambda: state["started"] >= 2)
    await ticker.stop()
    assert state["finished"] == state["started"]
    assert store.value["seq"] == ticker.current_sequence_number  # unused block given back
    m = ticker.metrics()
    assert m.last_persisted_sequence == m.current_sequence
    assert m.sequence_store == "fake"
    # a new ticker on the same store continues right after
    again = _make(sequence=SequenceAllocator(store, "seq", 10), interval_ms=60_000)
    seen = []

    async def record(tick) -> None:
        seen.append(tick.sequence_number)

    again.subscribe(record)
    await again.start()
    await _until(lambda: seen)
    await again.stop()
    assert seen[0] == m.current_sequence + 1


async def test_a_crashed_ticker_restarts_above_every_number_it_used():
    store = FakeSeqStore()
    ticker = _make(sequence=SequenceAllocator(store, "seq", 10))
    await ticker.start()
    await _until(lambda: ticker.current_sequence_number >= 25)
    used = ticker.current_sequence_number
    ticker._stopping.set()  # "kill -9": no stop(), no giving back
    await asyncio.sleep(0.05)
    used = max(used, ticker.current_sequence_number)
    assert store.value["seq"] >= used
    again = _make(sequence=SequenceAllocator(store, "seq", 10))
    await again.start()
    first = await again.emit_tick_at()
    await again.stop()
    assert first.sequence_number > used


async def test_a_dead_sequence_store_does_not_stop_ticking_and_is_shown():
    store = FakeSeqStore()
    store.down = True
    ticker = _make(sequence=SequenceAllocator(store, "seq", 4), interval_ms=50)
    seen = []

    async def record(tick) -> None:
        seen.append(tick.sequence_number)

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(seen) >= 4)
    m = ticker.metrics()
    assert m.sequence_state == "unreachable" and "down" in (m.sequence_error or "")
    assert m.healthy is False  # tickui's health also needs the sequence store
    assert m.is_healthy() is True  # ONEX's does not look at it
    calls = store.calls
    assert calls <= 3  # backing off, not one attempt per tick
    store.down = False
    await _until(lambda: ticker.metrics().sequence_state == "ok", timeout=3)
    await _until(lambda: len(seen) >= 30 or store.value.get("seq", 0) >= max(seen))
    await ticker.stop()
    assert seen == list(range(1, len(seen) + 1))
    assert store.value["seq"] >= max(seen)
    assert ticker.metrics().sequence_error is None


async def test_a_failing_subscriber_does_not_stop_the_others_or_the_loop():
    ticker = _make()
    seen = []

    async def broken(tick) -> None:
        raise RuntimeError("subscriber bug")

    async def record(tick) -> None:
        seen.append(tick.sequence_number)

    ticker.subscribe(broken)
    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(seen) >= 10)
    await ticker.stop()
    assert seen == sorted(seen) and ticker.metrics().ticks_coalesced == 0


async def test_on_change_listeners_are_told_about_ticks():
    ticker = _make()
    calls = []
    ticker.on_change(lambda: calls.append(1))
    ticker.on_change(lambda: 1 / 0)  # a broken listener does not hurt
    await ticker.start()
    await _until(lambda: len(calls) >= 5)
    await ticker.stop()
    assert ticker.metrics().ticks_emitted >= 5


@pytest.mark.parametrize("shift_s", [3600, -3600])
async def test_a_wall_clock_jump_is_recorded_and_ticks_at_once(shift_s):
    clock = ShiftedClock()
    ticker = _make(clock=clock, interval_ms=1000)
    loop = asyncio.get_running_loop()
    seen = []

    async def record(tick) -> None:
        seen.append((loop.time(), tick))

    ticker.subscribe(record)
    await ticker.start()
    await _until(lambda: len(seen) >= 1)  # tick 0, at once
    await asyncio.sleep(0.2)
    clock.shift = shift_s * 1_000_000
    stepped = loop.time()
    await _until(lambda: len(seen) >= 2, timeout=2)
    at, tick = seen[1]
    # Real time on a shared machine: only "not at the next slot, 0.8 s away". The README's
    # 0.1 s is asserted exactly on virtual time below.
    assert at - stepped < 0.5
    assert abs(tick.now - (SystemClock().now() + clock.shift)) < 500_000
    assert tick.now == tick.scheduled_at  # a jump tick is not "late"
    m = ticker.metrics()
    assert m.clock_jumps == 1
    assert m.last_clock_jump_s == pytest.approx(shift_s, abs=0.1)
    await ticker.stop()


async def test_without_a_jump_no_jump_is_recorded():
    ticker = _make(clock=ShiftedClock(), interval_ms=20)
    await ticker.start()
    await asyncio.sleep(0.3)
    await ticker.stop()
    m = ticker.metrics()
    assert m.clock_jumps == 0 and m.last_clock_jump_s is None


T0 = 1_800_000_000 * 1_000_000  # a fixed wall-clock start for virtual time


class _VirtualSelector:
    """A selector that never blocks: a wait of `timeout` seconds moves the loop's virtual
    time on by exactly that, and each turn of the loop costs it STEP (so spinning moves too)."""

    STEP = 1e-5

    def __init__(self) -> None:
        self._real = selectors.DefaultSelector()
        self.now = 0.0

    def select(self, timeout=None):
        events = self._real.select(0)
        if events:
            return events
        if timeout is None:
            raise RuntimeError("virtual loop idle with nothing scheduled")
        self.now += max(timeout, self.STEP)
        return []

    def __getattr__(self, name):
        return getattr(self._real, name)


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on virtual time: timing assertions hold exactly, whatever the load."""

    def __init__(self) -> None:
        self._virtual = _VirtualSelector()
        super().__init__(selector=self._virtual)

    def time(self) -> float:
        return self._virtual.now


class _LoopClock:
    """Wall time that follows the loop's (virtual) monotonic time, plus a steppable shift."""

    scale = 1.0

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.shift = 0

    def now(self) -> int:
        return T0 + round(self._loop.time() * 1_000_000) + self.shift

    def monotonic(self) -> float:
        return self._loop.time()


@pytest.mark.parametrize("phase", [0.013, 0.257, 0.61, 0.83])
def test_a_clock_jump_is_noticed_within_the_promised_tenth_of_a_second(phase):
    """README: a wall-clock jump is noticed within 0.1 s and ticked on at once. On virtual
    time this holds exactly, wherever in the 1 s interval the jump falls."""
    loop = _VirtualLoop()
    clock = _LoopClock(loop)
    seen: list[tuple[float, int]] = []

    async def main() -> tuple[float, list[tuple[float, int]], int]:
        ticker = _make(clock=clock, interval_ms=1000)

        async def record(tick) -> None:
            seen.append((loop.time(), tick.now))

        ticker.subscribe(record)
        await ticker.start()
        while not seen:  # tick 0, at once
            await asyncio.sleep(0.001)
        stepped = seen[0][0] + phase
        loop.call_at(stepped, lambda: setattr(clock, "shift", 3600 * 1_000_000))
        while len(seen) < 2:
            await asyncio.sleep(0.001)
        jumps = ticker.metrics().clock_jumps
        await ticker.stop()
        return stepped, seen, jumps

    try:
        stepped, seen, jumps = loop.run_until_complete(main())
    finally:
        loop.close()
    at, now = seen[1]
    assert jumps == 1
    assert now >= T0 + 3600 * 1_000_000, "the second tick is not on the jumped clock"
    assert at - stepped <= 0.1 + 0.002, f"the jump was noticed {at - stepped:.3f} s after it"


def _run_virtual(interval_ms: int, stall_after: int | None, stall_s: float, ticks: int):
    """An aligned ticker on virtual time; the subscriber blocks the whole loop for
    `stall_s` (as a synchronous call would) on tick number `stall_after`."""
    loop = _VirtualLoop()
    clock = _LoopClock(loop)
    loop._virtual.now = 0.2345  # start off the grid
    seen: list = []

    async def main():
        ticker = RuntimeScheduler(
            TickerConfig(interval_ms=interval_ms, scheduler_id="virtual"),
            clock,
            None,
            SequenceAllocator(None, "k", 10),
        )

        async def record(tick) -> None:
            seen.append((loop.time(), tick))
            if len(seen) == stall_after:
                loop._virtual.now += stall_s  # the loop is stuck: wall and monotonic move

        ticker.subscribe(record)
        await ticker.start()
        while len(seen) < ticks:
            await asyncio.sleep(0.001)
        await ticker.stop()
        return ticker.metrics()

    try:
        metrics = loop.run_until_complete(main())
    finally:
        loop.close()
    return seen, metrics


def test_scheduled_at_is_exactly_on_the_wall_clock_slot():
    seen, m = _run_virtual(250, None, 0, 12)
    slot = 250_000
    for _, tick in seen:
        assert tick.scheduled_at % slot == 0, tick.scheduled_at  # on the slot, not 2 ms after
        assert 0 <= tick.now - tick.scheduled_at < 5_000
    slots = [tick.scheduled_at for _, tick in seen]
    assert [b - a for a, b in itertools.pairwise(slots)] == [slot] * (len(slots) - 1)
    assert m.ticks_missed == 0


def test_after_a_stall_one_tick_for_the_newest_slot_and_the_others_missed():
    """Tick 3's delivery blocks the loop for 3.5 s (interval 1 s): the next tick is for
    the newest slot, 3 s after tick 3's, and the two slots in between count as missed;
    no late tick for the old slot followed at once by the current one."""
    seen, m = _run_virtual(1000, 3, 3.5, 6)
    ticks = [tick for _, tick in seen]
    assert [t.sequence_number for t in ticks] == [1, 2, 3, 4, 5, 6]
    assert ticks[3].scheduled_at - ticks[2].scheduled_at == 3_000_000
    assert all(t.scheduled_at % 1_000_000 == 0 for t in ticks)
    assert ticks[3].now - ticks[3].scheduled_at < 600_000  # 0.5 s: the stall's overrun
    times = [at for at, _ in seen]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) > 0.4, gaps  # never two ticks back to back
    assert m.ticks_missed == 2
    assert [t.scheduled_at - ticks[3].scheduled_at for t in ticks[3:]] == [0, 1_000_000, 2_000_000]


_ABANDON = textwrap.dedent(
    """
    import asyncio

    from tickui.ticks.bus import MemoryBus
    from tickui.common.clock import SystemClock
    from tickui.ticks.sequence import SequenceAllocator
    from tickui.ticks.ticker import RuntimeScheduler
    from tickui.ticks.config import TickerConfig


    async def main():
        config = TickerConfig(interval_ms=20, scheduler_id="x")
        alloc = SequenceAllocator(None, "k", 10)
        ticker = RuntimeScheduler(config, SystemClock(), MemoryBus(), alloc, align=False)
        await ticker.start()
        await ticker.emit_tick()
        # returning without stop(): an exception path; asyncio.run cancels what is left


    asyncio.run(main())
    print("exited")
    """
)


def test_an_abandoned_ticker_does_not_hang_the_exit():
    try:
        result = subprocess.run(
            [sys.executable, "-c", _ABANDON], capture_output=True, text=True, timeout=5
        )
    except subprocess.TimeoutExpired:
        pytest.fail("asyncio.run did not return within 5 s: the publish task ignored cancel()")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exited"
