"""(a) Every tick `tickui run` publishes to Tansu, in both wire formats, judged by ONEX itself:
ModelRuntimeTick for the bare tick, the subscriber's envelope deserializer for the envelope,
EventBusKafka's header parser for the ten headers."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from uuid import UUID

import pytest
from conftest import (
    ENVELOPE_KEYS,
    ONEX_HEADERS,
    RUN_INTERVAL_MS,
    deserialize_envelope,
    onex_bus,
    onex_time,
    parse_headers,
    read_all,
    tickui_run_result,
)
from omnibase_core.models.events.model_event_envelope import ModelEventEnvelope
from omnibase_infra.runtime.models import ModelRuntimeTick

DEFAULT_TOPIC = {"bare": "runtime.tick.v1", "envelope": "onex.intent.platform.runtime-tick.v1"}
INTERVAL_MS = RUN_INTERVAL_MS


@pytest.mark.parametrize("wire", ["bare", "envelope"])
def test_every_published_tick_is_accepted_by_onex(wire, boot):
    # `tickui run --kafka BOOT --wire WIRE --for 3 --tick-interval 200ms`, started by conftest
    run = tickui_run_result(wire)
    assert run.returncode == 0, run.stderr[-2000:]
    topic = DEFAULT_TOPIC[wire]  # the wire's default topic, no --topic given
    records = asyncio.run(read_all(boot, topic))
    assert len(records) >= 5, f"{len(records)} ticks in 3 s at {INTERVAL_MS} ms"
    final = json.loads(run.stderr.strip().splitlines()[-1])["ticker"]
    assert final["ticks_emitted"] == len(records), "ONEX's meaning: ticks published"

    ticks: list[ModelRuntimeTick] = []
    for record in records:
        raw = json.loads(record.value)
        if wire == "bare":
            tick = ModelRuntimeTick.model_validate_json(record.value)
            # Times and ids exactly as ONEX would write this tick itself.
            assert raw == json.loads(tick.model_dump_json())
        else:
            assert set(raw) == ENVELOPE_KEYS, set(raw) ^ ENVELOPE_KEYS
            envelope = deserialize_envelope(record.value, topic)
            assert envelope.event_type == "platform.runtime-tick"
            tick = ModelRuntimeTick.model_validate(envelope.payload)
            assert raw["payload"] == json.loads(tick.model_dump_json())
            typed = ModelEventEnvelope[ModelRuntimeTick].model_validate_json(record.value)
            assert typed.payload == tick
            assert envelope.source_tool == f"runtime-scheduler.{tick.scheduler_id}"
            assert envelope.correlation_id == tick.correlation_id
            assert raw["envelope_timestamp"] == onex_time(envelope.envelope_timestamp)
            assert envelope.envelope_id != tick.tick_id
        assert record.key == tick.scheduler_id.encode()
        assert tick.tick_interval_ms == INTERVAL_MS
        assert tick.now.utcoffset() is not None and tick.scheduled_at.utcoffset() is not None
        slot_us = round(tick.scheduled_at.timestamp() * 1_000_000)
        assert slot_us % (INTERVAL_MS * 1000) == 0, f"scheduled_at off the slot: {tick}"
        assert tick.now >= tick.scheduled_at
        _check_headers(boot, record, tick, wire, topic, envelope if wire == "envelope" else None)
        ticks.append(tick)

    numbers = [t.sequence_number for t in ticks]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    assert len({t.tick_id for t in ticks}) == len(ticks)
    assert len({t.scheduler_id for t in ticks}) == 1


def _check_headers(boot, record, tick, wire, topic, envelope) -> None:
    names = [name for name, _ in record.headers]
    assert names == list(ONEX_HEADERS), names  # all ten, ONEX's order, no optional ones
    raw = {name: value.decode() for name, value in record.headers}
    parsed = parse_headers(boot, record.headers)  # ONEX's own consumer-side parser
    # Its parser falls back to defaults on bad values: check the raw text strictly as well.
    assert UUID(raw["correlation_id"]) == parsed.correlation_id == tick.correlation_id
    assert UUID(raw["message_id"]) == parsed.message_id
    stamp = datetime.fromisoformat(raw["timestamp"])
    assert stamp.utcoffset() is not None, raw["timestamp"]
    assert stamp == parsed.timestamp
    assert raw["content_type"] == parsed.content_type == "application/json"
    assert raw["source"] == parsed.source == f"runtime-scheduler.{tick.scheduler_id}"
    assert raw["schema_version"] == parsed.schema_version == "1.0.0"
    assert raw["priority"] == parsed.priority == "normal"
    assert raw["retry_count"] == "0" and parsed.retry_count == 0
    assert raw["max_retries"] == "3" and parsed.max_retries == 3
    if wire == "bare":  # as ONEX 0.38.6 sends them
        assert parsed.message_id == tick.tick_id
        assert parsed.event_type == "runtime.tick.v1"
        assert stamp == tick.now
    else:  # as ONEX 0.38.76 sends them
        assert parsed.message_id == envelope.envelope_id
        assert parsed.event_type == topic
        assert stamp == envelope.envelope_timestamp
    # ONEX's producer side turns the parsed headers back into the same bytes (the timestamp
    # may differ only in how the offset is written).
    again = dict(onex_bus(boot)._model_headers_to_kafka(parsed))
    for name, value in record.headers:
        if name != "timestamp":
            assert again[name] == value, (name, again[name], value)
