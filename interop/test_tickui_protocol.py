"""(b) tickui's RuntimeScheduler driven the way ONEX code drives ONEX's: built from ONEX's
config and ONEX's own EventBusKafka, called with datetimes, its metrics validated by
ModelRuntimeSchedulerMetrics and compared with what ONEX's RuntimeScheduler reports for the
very same calls."""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime, timedelta

import pytest
from conftest import ONEX_VERSION, FlakyBus, create_topic, onex_bus, onex_topic, read_all
from omnibase_infra.runtime.models import (
    ModelRuntimeSchedulerConfig,
    ModelRuntimeSchedulerMetrics,
    ModelRuntimeTick,
)
from omnibase_infra.runtime.protocols import ProtocolRuntimeScheduler
from omnibase_infra.runtime.runtime_scheduler import RuntimeScheduler as OnexScheduler

# Compared with ONEX's scheduler after the same calls (the durations and uptime are timings).
SAME_MEANING = (
    "status", "ticks_emitted", "ticks_failed", "last_tick_at", "circuit_breaker_open",
    "consecutive_failures",
)  # fmt: skip


def onex_config(topic: str, **extra) -> ModelRuntimeSchedulerConfig:
    return ModelRuntimeSchedulerConfig(
        scheduler_id=extra.pop("scheduler_id", "tickui-interop"),
        tick_topic=topic,
        tick_interval_ms=extra.pop("tick_interval_ms", 1000),
        max_tick_jitter_ms=0,
        persist_sequence_number=False,
        valkey_host="localhost",
        **extra,
    )


def as_onex(metrics) -> ModelRuntimeSchedulerMetrics:
    return ModelRuntimeSchedulerMetrics.model_validate_json(json.dumps(metrics.onex_dict()))


def test_tickui_scheduler_has_onex_protocol_shape():
    from tickui import RuntimeScheduler

    members = ProtocolRuntimeScheduler.__protocol_attrs__
    assert members >= {"emit_tick", "get_metrics", "start", "stop", "scheduler_id"}
    for name in members:
        theirs = inspect.getattr_static(ProtocolRuntimeScheduler, name)
        ours = inspect.getattr_static(RuntimeScheduler, name)
        if isinstance(theirs, property):
            assert isinstance(ours, property), name
            continue
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), name
        mine = inspect.signature(ours).parameters
        for param in inspect.signature(theirs).parameters.values():
            assert param.name in mine, (name, param.name)
            assert mine[param.name].default == param.default, (name, param.name)


async def test_onex_style_calls_on_a_running_tickui_scheduler(boot):
    from tickui import RuntimeScheduler

    topic = onex_topic()
    await create_topic(boot, topic)
    bus = onex_bus(boot)
    await bus.start()
    try:
        s = RuntimeScheduler(config=onex_config(topic), event_bus=bus)
        if getattr(ProtocolRuntimeScheduler, "_is_runtime_protocol", False):
            assert isinstance(s, ProtocolRuntimeScheduler)
        assert s.scheduler_id == "tickui-interop" and not s.is_running

        # A naive datetime is refused before a sequence number is used.
        with pytest.raises((TypeError, ValueError)):
            await s.emit_tick(datetime(2030, 1, 1, 12, 0, 0))
        assert s.current_sequence_number == 0

        await s.start()
        assert s.is_running
        now = datetime.now(UTC)
        assert await s.emit_tick(now) is None
        m = await s.get_metrics()
        onex = as_onex(m)
        assert str(onex.status) == "running"
        assert onex.scheduler_id == "tickui-interop"
        assert onex.ticks_emitted >= 1 and onex.ticks_failed == 0
        assert onex.tick_success_rate() == m.tick_success_rate() == 1.0
        assert onex.is_healthy() is m.is_healthy() is True
        assert onex.unpersisted_sequence_count() == m.unpersisted_sequence_count() >= 0
        assert onex.current_sequence_number == m.current_sequence_number >= 1
        assert onex.circuit_breaker_open is m.circuit_breaker_open is False
        assert onex.started_at is not None and onex.started_at.utcoffset() is not None
        assert onex.last_tick_at is not None and onex.last_tick_at >= now - timedelta(seconds=1)
        assert onex.total_uptime_seconds >= 0
        await s.stop()
        stopped = as_onex(await s.get_metrics())
        assert str(stopped.status) == "stopped" and not stopped.is_healthy()
        assert not s.is_running
    finally:
        await bus.close()

    # What it published is ONEX's tick; the direct call's `now` is on the wire as given.
    records = await read_all(boot, topic)
    ticks = [ModelRuntimeTick.model_validate_json(r.value) for r in records]
    assert len(ticks) == stopped.ticks_emitted
    assert now in {t.now for t in ticks}
    assert max(t.sequence_number for t in ticks) <= stopped.current_sequence_number


async def test_failures_breaker_and_metrics_mean_what_onex_means(boot):
    """Same config, same bus faults, same calls: ONEX's scheduler and tickui's must agree."""
    from tickui import RuntimeScheduler
    from tickui.common.errors import TickPublishError

    t0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
    results = {}
    for name, cls in (("onex", OnexScheduler), ("tickui", RuntimeScheduler)):
        topic = onex_topic()
        await create_topic(boot, topic)
        bus = onex_bus(boot)
        await bus.start()
        flaky = FlakyBus(bus, {2: TimeoutError("injected"), 3: ConnectionError("injected")})
        try:
            s = cls(config=onex_config(topic, circuit_breaker_threshold=2), event_bus=flaky)
            errors = []
            for i in range(4):  # ok, timeout, failure (the breaker opens), breaker open
                try:
                    await s.emit_tick(t0 + timedelta(seconds=i))
                    errors.append(None)
                except Exception as exc:
                    errors.append(exc)
            m = await s.get_metrics()
        finally:
            await bus.close()
        results[name] = (errors, m, await read_all(boot, topic))

    onex_errors, onex_m, _ = results["onex"]
    errors, m, records = results["tickui"]
    names = [type(e).__name__ if e else None for e in errors]
    assert names == [type(e).__name__ if e else None for e in onex_errors], (names, ONEX_VERSION)
    assert names == [None, "InfraTimeoutError", "InfraConnectionError", "InfraUnavailableError"]
    assert all(isinstance(e, TickPublishError) for e in errors[1:])
    assert isinstance(errors[1], TimeoutError) and isinstance(errors[2], ConnectionError)

    ours = as_onex(m)
    for field in SAME_MEANING:
        assert getattr(ours, field) == getattr(onex_m, field), (field, ours, onex_m)
    assert ours.last_tick_at == t0  # the `now` of the last tick that was published
    assert ours.tick_success_rate() == onex_m.tick_success_rate() == 0.25
    assert ours.is_healthy() is onex_m.is_healthy() is False
    assert ours.unpersisted_sequence_count() == m.unpersisted_sequence_count() >= 0
    assert ours.current_sequence_number >= 3  # three ticks were built and tried
    # Exactly the successful tick reached the broker, as ONEX's tick.
    assert [ModelRuntimeTick.model_validate_json(r.value).now for r in records] == [t0]
