"""tickui's RuntimeScheduler driven the way ONEX code drives ONEX's: the seed's protocol
(`emit_tick(now: datetime | None) -> None`, typed errors, `get_metrics()` with ONEX's
fields, methods and meanings), built from an ONEX-shaped config and an ONEX-shaped bus.
No ONEX import: the look-alikes below have the attribute names ONEX's objects have."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

import services
from tickui import RuntimeScheduler
from tickui.common.clock import SystemClock
from tickui.common.errors import (
    InfraConnectionError,
    InfraTimeoutError,
    InfraUnavailableError,
    SchedulerConfigError,
    TickPublishError,
    TickTimeError,
)
from tickui.ticks.bus import MemoryBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.metrics import ONEX_FIELDS, SchedulerMetrics, SchedulerStatus
from tickui.ticks.sequence import SequenceAllocator, SequenceStoreError, ValkeySequenceStore

WHEN = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
_LIVE: list[RuntimeScheduler] = []


@pytest.fixture(autouse=True)
async def _stop_leftovers():
    yield
    while _LIVE:
        await _LIVE.pop().stop(timeout=1)


def onex_config(**fields) -> SimpleNamespace:
    """An object with ModelRuntimeSchedulerConfig's field names (its defaults, but no
    Valkey and a long interval so the loop stays out of the way)."""
    base = dict(
        tick_interval_ms=60_000,
        scheduler_id="onex-like",
        tick_topic="onex.intent.platform.runtime-tick.v1",
        persist_sequence_number=False,
        sequence_number_key="runtime_scheduler_sequence",
        max_tick_jitter_ms=100,
        circuit_breaker_threshold=5,
        circuit_breaker_reset_timeout_seconds=60.0,
        enable_metrics=True,
        metrics_prefix="runtime_scheduler",
        valkey_host="localhost",
        valkey_port=6379,
        valkey_password=None,
        valkey_timeout_seconds=5.0,
        valkey_connection_retries=3,
    )
    base.update(fields)
    return SimpleNamespace(**base)


class OnexLikeBus:
    """A bus shaped like ONEX's EventBusKafka: `publish(topic, key, value, headers)` that
    reads the headers object's attributes as `_model_headers_to_kafka` does (a list of
    tuples would fail here, as it does there). `script` says what each call does."""

    def __init__(self, script: list[str] | None = None) -> None:
        self.script = list(script or [])
        self.sent: list[tuple[str, bytes, bytes, list[tuple[str, bytes]]]] = []
        self.calls = 0
        self.started = self.closed = False

    async def start(self) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def stop(self) -> None:
        self.closed = True

    async def publish(self, topic: str, key: bytes | None, value: bytes, headers=None) -> None:
        self.calls += 1
        action = self.script.pop(0) if self.script else "ok"
        if action == "hang":
            await asyncio.Event().wait()
        if action == "timeout":
            raise TimeoutError("broker too slow")
        if action == "fail":
            raise OSError("connection refused")
        kafka = [
            ("content_type", headers.content_type.encode()),
            ("correlation_id", str(headers.correlation_id).encode()),
            ("message_id", str(headers.message_id).encode()),
            ("timestamp", headers.timestamp.isoformat().encode()),
            ("source", headers.source.encode()),
            ("event_type", headers.event_type.encode()),
            ("schema_version", headers.schema_version.encode()),
            ("priority", headers.priority.encode()),
            ("retry_count", str(headers.retry_count).encode()),
            ("max_retries", str(headers.max_retries).encode()),
        ]
        for name in (
            "destination",
            "trace_id",
            "span_id",
            "parent_span_id",
            "parent_message_id",
            "operation_name",
            "routing_key",
            "partition_key",
            "idempotency_key",
            "ttl_seconds",
        ):
            if getattr(headers, name) is not None:  # plain attribute access, as ONEX
                kafka.append((name, str(getattr(headers, name)).encode()))
        self.sent.append((topic, key, value, kafka))


def scheduler(bus=None, **fields) -> RuntimeScheduler:
    timeout = fields.pop("publish_timeout_s", None)
    wire = fields.pop("wire", None)
    s = RuntimeScheduler(
        config=onex_config(**fields),
        event_bus=bus if bus is not None else OnexLikeBus(),
        publish_timeout_s=timeout,
        wire=wire,
    )
    _LIVE.append(s)
    return s


# ---- emit_tick: the seed's signature and time rules ------------------------------------------


def test_the_protocol_signatures_are_the_seeds():
    s = scheduler()
    for name in ("scheduler_id", "is_running", "current_sequence_number"):
        assert hasattr(s, name)
    emit = inspect.signature(RuntimeScheduler.emit_tick)
    assert list(emit.parameters) == ["self", "now"] and emit.parameters["now"].default is None
    assert inspect.iscoroutinefunction(RuntimeScheduler.emit_tick)
    assert inspect.iscoroutinefunction(RuntimeScheduler.get_metrics)
    assert inspect.iscoroutinefunction(RuntimeScheduler.start)
    assert inspect.iscoroutinefunction(RuntimeScheduler.stop)


async def test_emit_tick_with_an_aware_datetime_returns_none_and_publishes_it():
    bus = OnexLikeBus()
    s = scheduler(bus)
    assert await s.emit_tick(now=WHEN) is None
    other_zone = datetime(2030, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert await s.emit_tick(other_zone) is None
    first, second = (json.loads(m[2]) for m in bus.sent)
    assert first["now"] == first["scheduled_at"] == "2030-01-01T12:00:00.123456Z"
    assert second["now"] == "2030-01-01T12:00:00Z"  # the same instant, in UTC
    assert [first["sequence_number"], second["sequence_number"]] == [1, 2]
    topic, key, _, headers = bus.sent[0]
    assert topic == "onex.intent.platform.runtime-tick.v1" and key == b"onex-like"
    named = dict(headers)
    assert named["source"] == b"runtime-scheduler.onex-like"
    assert named["message_id"] == first["tick_id"].encode()
    assert named["timestamp"] == b"2030-01-01T12:00:00.123456+00:00"
    assert len(headers) == 10
    m = await s.get_metrics()
    assert m.ticks_emitted == 2 and m.last_tick_at == other_zone


async def test_emit_tick_without_now_uses_the_current_time():
    bus = OnexLikeBus()
    s = scheduler(bus)
    before = datetime.now(UTC)
    await s.emit_tick()
    after = datetime.now(UTC)
    now = datetime.fromisoformat(json.loads(bus.sent[0][2])["now"])
    assert before - timedelta(milliseconds=1) <= now <= after + timedelta(milliseconds=1)


@pytest.mark.parametrize(
    "bad",
    [datetime(2030, 1, 1, 12, 0), 1_893_499_200_000_000, "2030-01-01T12:00:00Z", 1.5],
    ids=["naive", "int-micros", "text", "float"],
)
async def test_a_naive_or_non_datetime_now_is_refused_before_a_sequence_number_is_used(bad):
    bus = OnexLikeBus()
    s = scheduler(bus)
    delivered = []

    async def record(tick) -> None:
        delivered.append(tick)

    s.subscribe(record)
    with pytest.raises(TickTimeError) as caught:
        await s.emit_tick(now=bad)
    assert isinstance(caught.value, TypeError | ValueError)
    assert s.current_sequence_number == 0 and bus.calls == 0 and not delivered
    await s.emit_tick(now=WHEN)  # the next good tick is number 1: no gap
    assert json.loads(bus.sent[0][2])["sequence_number"] == 1
    m = await s.get_metrics()
    assert m.ticks_failed == 0 and m.current_sequence_number == 1


# ---- typed errors -----------------------------------------------------------------------------


async def test_a_failing_bus_raises_infra_connection_error_and_uses_the_number():
    s = scheduler(OnexLikeBus(["fail"]))
    with pytest.raises(InfraConnectionError) as caught:
        await s.emit_tick(now=WHEN)
    error = caught.value
    assert isinstance(error, TickPublishError) and isinstance(error, ConnectionError)
    assert str(error) == "Failed to emit tick to topic onex.intent.platform.runtime-tick.v1"
    assert isinstance(error.__cause__, OSError) and error.reason == "connection refused"
    assert error.error_code == "ONEX_CORE_205_SERVICE_UNAVAILABLE"
    assert error.sequence_number == 1 and error.correlation_id
    m = await s.get_metrics()
    assert (m.current_sequence_number, m.ticks_emitted, m.ticks_failed) == (1, 0, 1)
    assert m.consecutive_failures == 1 and m.last_tick_at is None


async def test_a_hanging_bus_raises_infra_timeout_error():
    s = scheduler(OnexLikeBus(["hang"]), publish_timeout_s=0.1)
    with pytest.raises(InfraTimeoutError) as caught:
        await s.emit_tick(now=WHEN)
    assert isinstance(caught.value, TimeoutError) and isinstance(caught.value, TickPublishError)
    assert str(caught.value).startswith("Timeout emitting tick to topic ")
    assert caught.value.error_code == "ONEX_CORE_092_TIMEOUT_ERROR"
    assert (await s.get_metrics()).ticks_failed == 1


async def test_a_bus_timeout_error_is_infra_timeout_error_too():
    s = scheduler(OnexLikeBus(["timeout"]))
    with pytest.raises(InfraTimeoutError):
        await s.emit_tick(now=WHEN)


async def test_the_breaker_sequence_matches_onex():
    """ONEX with threshold 2: ok, timeout, fail (the breaker opens), then the next call is
    refused without reaching the bus: sequence 4, emitted 1, failed 3, consecutive 3."""
    bus = OnexLikeBus(["ok", "timeout", "fail", "ok"])
    s = scheduler(bus, circuit_breaker_threshold=2)
    await s.emit_tick(now=WHEN)
    with pytest.raises(InfraTimeoutError):
        await s.emit_tick(now=WHEN)
    with pytest.raises(InfraConnectionError):
        await s.emit_tick(now=WHEN)
    with pytest.raises(InfraUnavailableError) as caught:
        await s.emit_tick(now=WHEN)
    assert str(caught.value) == (
        "Circuit breaker is open - runtime-scheduler.onex-like temporarily unavailable"
    )
    assert bus.calls == 3  # the refused tick never reached the bus
    m = await s.get_metrics()
    assert m.current_sequence_number == 4
    assert (m.ticks_emitted, m.ticks_failed, m.consecutive_failures) == (1, 3, 3)
    assert m.circuit_breaker_open is True
    assert m.tick_success_rate() == 0.25
    assert m.last_tick_at == WHEN


async def test_the_loop_keeps_ticking_on_failures_and_emit_tick_still_raises():
    """Inside a running scheduler the queue publishes; emit_tick still raises the error."""
    bus = OnexLikeBus(["fail"] * 100)
    s = scheduler(bus, tick_interval_ms=100, max_tick_jitter_ms=0, circuit_breaker_threshold=50)
    await s.start()
    with pytest.raises(InfraConnectionError):
        await s.emit_tick(now=WHEN)
    await s.stop()
    m = await s.get_metrics()
    assert m.ticks_emitted == 0 and m.ticks_failed >= 1 and m.ticks_delivered >= 1


async def test_stop_during_a_slow_start_leaves_the_scheduler_stopped():
    """stop() while start() still waits for its sequence store: once stop() returns the
    scheduler is stopped, and stays so when start() finishes (it used to end `running`,
    with a dead loop, after stop() had returned)."""
    bus = OnexLikeBus()
    s = scheduler(bus, tick_interval_ms=100, max_tick_jitter_ms=0)
    connect = s.sequence.start

    async def slow_store(now: float) -> None:
        await asyncio.sleep(0.2)
        await connect(now)

    s.sequence.start = slow_store
    starting = asyncio.create_task(s.start())
    await asyncio.sleep(0.02)
    assert s.status == "starting"
    await s.stop()
    assert s.status == "stopped" and not s.is_running
    await starting
    await asyncio.sleep(0.3)
    assert s.status == "stopped" and not s.is_running and bus.calls == 0
    await s.start()  # and it can start again
    assert s.is_running
    await s.stop()


async def test_stop_settles_every_emit_tick_waiting_behind_a_dead_broker():
    """A running scheduler queues emit_tick's publish; a stop() that gives up on the queue
    (the broker hangs) must still answer every caller, with a typed error, and count the
    ticks as failed: none may wait forever (ONEX's emit_tick always returns or raises)."""
    bus = OnexLikeBus(["hang"] * 10)
    s = scheduler(bus, publish_timeout_s=0.1, circuit_breaker_threshold=100)
    await s.start()
    calls = [asyncio.create_task(s.emit_tick(now=WHEN)) for _ in range(5)]
    await asyncio.sleep(0.02)
    await s.stop(timeout=1)
    done, pending = await asyncio.wait(calls, timeout=2)
    for task in pending:
        task.cancel()
    assert not pending, "emit_tick still waiting after stop()"
    assert all(isinstance(t.exception(), TickPublishError) for t in done)
    m = await s.get_metrics()
    assert (m.current_sequence_number, m.ticks_emitted, m.ticks_failed) == (5, 0, 5)


# ---- metrics -----------------------------------------------------------------------------------


async def test_metrics_have_onex_fields_methods_and_meanings():
    bus = OnexLikeBus()
    s = scheduler(bus)
    m = await s.get_metrics()
    assert isinstance(m, SchedulerMetrics)
    assert m.status == SchedulerStatus.STOPPED and m.started_at is None
    assert m.tick_success_rate() == 1.0 and m.is_healthy() is False
    assert m.unpersisted_sequence_count() == 0
    await s.start()
    await s.emit_tick(now=WHEN)
    m = await s.get_metrics()
    assert m.status == "running" and m.status.is_active() and m.status.can_stop()
    assert m.is_healthy() is True
    assert m.ticks_emitted == 1 and m.ticks_failed == 0
    assert m.current_sequence_number == 1 == s.current_sequence_number
    assert m.last_persisted_sequence == 0  # no Valkey: nothing persisted (ONEX: stays 0)
    assert m.unpersisted_sequence_count() == 1
    assert m.last_tick_at == WHEN
    assert m.last_tick_duration_ms >= 0 and m.max_tick_duration_ms >= m.last_tick_duration_ms
    assert m.average_tick_duration_ms == pytest.approx(m.last_tick_duration_ms, abs=0.01)
    assert m.started_at is not None and m.started_at.tzinfo is not None
    assert m.circuit_breaker_open is False and m.consecutive_failures == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.ticks_emitted = 5  # type: ignore[misc]
    await s.stop()
    later = await s.get_metrics()
    assert later.status == "stopped" and later.status.can_start() and later.status.is_terminal()
    assert later.is_healthy() is False
    assert later.total_uptime_seconds >= m.total_uptime_seconds  # keeps growing (ONEX)
    # tickui's own figures, under their own names
    for name in ("ticks_missed", "lateness_p99_ms", "clock_jumps", "transitions"):
        assert hasattr(later, name)
    assert later.ticks_delivered >= 1 and later.sequence_store == "memory"


async def test_onex_dict_has_exactly_the_fourteen_fields_in_json_form():
    s = scheduler(OnexLikeBus(["ok", "fail"]))
    await s.start()
    await s.emit_tick(now=WHEN)
    with pytest.raises(InfraConnectionError):
        await s.emit_tick(now=WHEN)
    data = json.loads(json.dumps((await s.get_metrics()).onex_dict()))
    assert tuple(data) == ONEX_FIELDS and len(data) == 14
    assert data["status"] == "running" and data["scheduler_id"] == "onex-like"
    assert data["last_tick_at"] == "2030-01-01T12:00:00.123456+00:00"
    assert datetime.fromisoformat(data["started_at"]).tzinfo is not None
    assert (data["ticks_emitted"], data["ticks_failed"], data["consecutive_failures"]) == (1, 1, 1)
    assert data["circuit_breaker_open"] is False
    for name in ("last_tick_duration_ms", "average_tick_duration_ms", "max_tick_duration_ms"):
        assert isinstance(data[name], float) and data[name] >= 0
    assert isinstance(data["total_uptime_seconds"], float)
    full = (await s.get_metrics()).to_json()  # tickui's JSON: ONEX's fields, then its own
    assert list(full)[:14] == list(ONEX_FIELDS) and "ticks_missed" in full


def test_status_values_and_questions_are_onexs():
    assert [s.value for s in SchedulerStatus] == [
        "stopped",
        "starting",
        "running",
        "stopping",
        "error",
    ]
    S = SchedulerStatus
    assert {s for s in S if s.is_active()} == {S.STARTING, S.RUNNING, S.STOPPING}
    assert {s for s in S if s.can_start()} == {S.STOPPED, S.ERROR}
    assert {s for s in S if s.can_stop()} == {S.RUNNING, S.STARTING}
    assert {s for s in S if s.is_terminal()} == {S.STOPPED, S.ERROR}
    assert str(S.RUNNING) == "running" and S.RUNNING == "running"


def test_is_healthy_and_success_rate_follow_onexs_rules():
    base = SchedulerMetrics(scheduler_id="x", status=SchedulerStatus.RUNNING)
    assert base.is_healthy() and base.tick_success_rate() == 1.0
    assert not dataclasses.replace(base, consecutive_failures=5).is_healthy()
    assert dataclasses.replace(base, consecutive_failures=4).is_healthy()
    assert not dataclasses.replace(base, circuit_breaker_open=True).is_healthy()
    assert not dataclasses.replace(base, status=SchedulerStatus.STARTING).is_healthy()
    assert dataclasses.replace(base, ticks_emitted=9, ticks_failed=1).tick_success_rate() == 0.9


class BlockStore:
    """A sequence store that reserves blocks ahead, as tickui's do (can be taken down)."""

    name = "blocks"

    def __init__(self) -> None:
        self.value = 0
        self.down = False

    async def reserve(self, key: str, floor: int, block: int) -> int:
        if self.down:
            raise SequenceStoreError("blocks: down")
        self.value = max(self.value, floor) + block
        return self.value

    async def release(self, key: str, expected: int, value: int) -> None:
        if self.value == expected:
            self.value = value

    async def close(self) -> None:
        return None


async def test_last_persisted_is_what_the_store_covers_never_above_current():
    """Today's bug: the end of the reserved block (100) was reported with 5 in use, so
    ONEX's unpersisted count went to -95. Now persisted <= current, the count >= 0."""
    store = BlockStore()
    s = RuntimeScheduler(
        TickerConfig(interval_ms=60_000, scheduler_id="blocks"),
        SystemClock(),
        MemoryBus(),
        SequenceAllocator(store, "k", 100),
        align=False,
    )
    _LIVE.append(s)
    await s.start()
    for _ in range(5):
        await s.emit_tick(now=WHEN)
    m = await s.get_metrics()
    assert store.value >= 100 and m.sequence_reserved >= 100  # reserved far ahead...
    assert m.current_sequence_number == 6  # the loop's first tick (at once) and our five
    assert m.last_persisted_sequence == 6  # ...but only what is in use counts as persisted
    assert m.unpersisted_sequence_count() == 0
    store.down = True
    s.sequence.reserved = 0  # the store lost it; ticking goes on in memory
    await s.emit_tick(now=WHEN)
    m = await s.get_metrics()
    assert m.last_persisted_sequence == 0 and m.unpersisted_sequence_count() == 7
    await s.stop()


# ---- the drop-in: ONEX-shaped config and bus -----------------------------------------------------


def test_an_onex_like_config_maps_onto_tickuis_settings():
    s = scheduler(
        tick_interval_ms=250,
        scheduler_id="  mapped  ",
        tick_topic="my.ticks.v1",
        max_tick_jitter_ms=400,
        circuit_breaker_threshold=7,
        circuit_breaker_reset_timeout_seconds=30.0,
        sequence_number_key="my_key",
    )
    c = s.config
    assert (c.interval_ms, c.scheduler_id, c.topic) == (250, "mapped", "my.ticks.v1")
    assert c.jitter_ms == 249  # tickui's jitter stays inside the slot
    assert (s.breaker.threshold, s.breaker.reset_timeout) == (7, 30.0)
    assert s.sequence.key == "my_key" and s.sequence.store is None  # persist off: memory
    assert s.wire == "bare" and s.scheduler_id == "mapped"


def test_persisting_goes_to_valkey_at_the_configured_host_and_port():
    s = scheduler(
        persist_sequence_number=True,
        valkey_host="valkey.internal",
        valkey_port=6390,
        valkey_password="p@ss word",
        valkey_timeout_seconds=2.5,
        valkey_connection_retries=2,
    )
    store = s.sequence.store
    assert isinstance(store, ValkeySequenceStore)
    assert store.url == "redis://:p%40ss%20word@valkey.internal:6390/0"
    assert s.config.valkey_timeout_s == 2.5 and s.config.valkey_retries == 2
    assert s.sequence.key == "runtime_scheduler_sequence"


def test_missing_config_or_bus_is_a_config_error():
    with pytest.raises(SchedulerConfigError):
        RuntimeScheduler(config=None, event_bus=OnexLikeBus())
    with pytest.raises(SchedulerConfigError):
        RuntimeScheduler(config=onex_config())
    with pytest.raises(SchedulerConfigError):
        RuntimeScheduler(config=onex_config(tick_interval_ms=5), event_bus=OnexLikeBus())
    with pytest.raises(SchedulerConfigError):
        RuntimeScheduler(config=onex_config(), event_bus=OnexLikeBus(), wire="protobuf")


@pytest.mark.parametrize("interval", [10, 50, 99])
def test_an_onex_config_under_100ms_is_refused_before_any_tick(interval):
    """ONEX's config allows 10 ms, but ModelRuntimeTick needs >= 100: every such tick on the
    bus would be rejected by ONEX consumers (ONEX's own scheduler raises on each emit)."""
    bus = OnexLikeBus()
    with pytest.raises(SchedulerConfigError) as caught:
        RuntimeScheduler(config=onex_config(tick_interval_ms=interval), event_bus=bus)
    assert "ONEX consumers reject" in str(caught.value) and "100" in str(caught.value)
    assert "\n" not in str(caught.value) and bus.calls == 0
    RuntimeScheduler(config=onex_config(tick_interval_ms=100), event_bus=bus)  # the floor


async def test_positional_config_and_bus_work_too_and_the_bus_stays_the_callers():
    bus = OnexLikeBus()
    s = RuntimeScheduler(onex_config(), bus)
    _LIVE.append(s)
    assert s.bus is bus
    await s.start()
    await s.emit_tick(now=WHEN)
    await s.stop()
    assert not bus.started and not bus.closed  # the caller starts and closes its bus
    assert len(bus.sent) >= 1


async def test_envelope_wire_through_an_onex_like_bus():
    bus = OnexLikeBus()
    s = scheduler(bus, wire="envelope")
    await s.emit_tick(now=WHEN)
    body = json.loads(bus.sent[0][2])
    assert body["event_type"] == "platform.runtime-tick"
    assert body["payload"]["now"] == "2030-01-01T12:00:00.123456Z"
    assert body["source_tool"] == "runtime-scheduler.onex-like"


async def test_tickuis_own_memory_bus_works_as_an_event_bus():
    bus = MemoryBus()
    s = scheduler(bus)
    await s.emit_tick(now=WHEN)
    topic, key, value, headers = bus.messages[0]
    assert topic == "onex.intent.platform.runtime-tick.v1" and key == b"onex-like"
    assert [name for name, _ in headers][:2] == ["content_type", "correlation_id"]
    assert json.loads(value)["sequence_number"] == 1


async def test_persisted_sequence_in_a_real_valkey_continues_after_a_restart():
    with services.private_redis() as redis:
        port = int(redis.url.rsplit(":", 1)[1].split("/")[0])
        cfg = dict(persist_sequence_number=True, valkey_host="127.0.0.1", valkey_port=port)
        first = scheduler(OnexLikeBus(), **cfg)
        await first.start()
        for _ in range(3):
            await first.emit_tick(now=WHEN)
        m = await first.get_metrics()
        assert m.last_persisted_sequence == m.current_sequence_number >= 3
        assert m.unpersisted_sequence_count() == 0 and m.sequence_state == "ok"
        used = m.current_sequence_number
        await first.stop()
        bus = OnexLikeBus()
        second = scheduler(bus, **cfg)
        await second.start()
        await second.emit_tick(now=WHEN)
        await second.stop()
        numbers = [json.loads(v)["sequence_number"] for _, _, v, _ in bus.sent]
        assert min(numbers) == used + 1  # the restart continues, never repeats


def test_an_onex_scheduler_times_each_publish_out_at_5_s_by_default():
    """README: optional keyword `publish_timeout_s` (default 5 s)."""
    assert scheduler().config.publish_timeout_s == 5.0
    assert scheduler(publish_timeout_s=0.25).config.publish_timeout_s == 0.25
