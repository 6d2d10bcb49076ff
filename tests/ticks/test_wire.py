"""The tick wire formats against bytes real ONEX wrote (omnibase-infra 0.38.6 and 0.38.76).

The two ONEX_* values below were printed by ONEX itself (0.38.76 venv, see ONEX-NOTES):
`ModelRuntimeTick(...).model_dump_json()` (the bare tick, as 0.38.6 publishes it) and
`json.dumps(ModelEventEnvelope(payload=tick, ...).model_dump(mode="json"))` (what
`EventBusKafka.publish_envelope` sends in 0.38.76).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from uuid import UUID

import pytest

from tickui.common.timeutil import to_micros
from tickui.ticks.bus import MemoryBus, to_kafka
from tickui.ticks.wire import (
    DEFAULT_TOPIC,
    ENVELOPE_KEYS,
    EVENT_TYPE,
    HEADER_NAMES,
    TickHeaders,
    WireError,
    decode,
    encode,
    envelope,
    onex_time,
    tick_json,
)

ONEX_BARE = (
    b'{"now":"2026-12-03T15:04:01.003412Z","tick_id":"7d4c2a8e-1f3b-4c6d-9e0a-b1c2d3e4f506",'
    b'"sequence_number":7,"scheduled_at":"2026-12-03T15:04:01Z",'
    b'"correlation_id":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","scheduler_id":"onex-0.38.76",'
    b'"tick_interval_ms":200}'
)
ONEX_ENVELOPE = (
    b'{"payload": {"now": "2026-12-03T15:04:01.003412Z", "tick_id": '
    b'"7d4c2a8e-1f3b-4c6d-9e0a-b1c2d3e4f506", "sequence_number": 7, "scheduled_at": '
    b'"2026-12-03T15:04:01Z", "correlation_id": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", '
    b'"scheduler_id": "onex-0.38.76", "tick_interval_ms": 200}, "envelope_id": '
    b'"5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", "envelope_timestamp": '
    b'"2026-12-03T15:04:01.004120Z", "correlation_id": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", '
    b'"parent_envelope_id": null, "source_tool": "runtime-scheduler.onex-0.38.76", '
    b'"target_tool": null, "metadata": {"trace_id": null, "span_id": null, "parent_span_id": '
    b'null, "request_id": null, "headers": {}, "tags": {}}, "security_context": null, '
    b'"event_type": "platform.runtime-tick", "payload_type": null, "payload_schema_version": '
    b'null, "priority": 5, "timeout_seconds": null, "retry_count": 0, "request_id": null, '
    b'"trace_id": null, "span_id": null, "tenant_id": null, "producer": null, "onex_version": '
    b'{"major": 1, "minor": 0, "patch": 0, "prerelease": null, "build": null}, '
    b'"envelope_version": {"major": 2, "minor": 3, "patch": 0, "prerelease": null, "build": '
    b"null}}"
)
# The 0.38.76 envelope's keys, in its order (ONEX-NOTES 4), written out by hand.
KEYS_0_38_76 = [
    "payload", "envelope_id", "envelope_timestamp", "correlation_id", "parent_envelope_id",
    "source_tool", "target_tool", "metadata", "security_context", "event_type", "payload_type",
    "payload_schema_version", "priority", "timeout_seconds", "retry_count", "request_id",
    "trace_id", "span_id", "tenant_id", "producer", "onex_version", "envelope_version",
]  # fmt: skip
TEN = [
    "content_type", "correlation_id", "message_id", "timestamp", "source", "event_type",
    "schema_version", "priority", "retry_count", "max_retries",
]  # fmt: skip


@dataclass(frozen=True)
class Tick:  # tickui.ticks.ticker.Tick's fields; wire.encode reads only these attributes
    now: int
    tick_id: str
    sequence_number: int
    scheduled_at: int
    correlation_id: str
    scheduler_id: str
    tick_interval_ms: int


def _at(*parts: int) -> int:
    return to_micros(datetime(*parts, tzinfo=UTC))


def _tick(**changes) -> Tick:
    values = {
        "now": _at(2026, 12, 3, 15, 4, 1, 3412),
        "tick_id": "7d4c2a8e-1f3b-4c6d-9e0a-b1c2d3e4f506",
        "sequence_number": 7,
        "scheduled_at": _at(2026, 12, 3, 15, 4, 1),
        "correlation_id": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        "scheduler_id": "onex-0.38.76",
        "tick_interval_ms": 200,
    }
    return Tick(**{**values, **changes})


def test_onex_time_is_pydantics_form():
    assert onex_time(_at(2026, 12, 3, 15, 4, 1)) == "2026-12-03T15:04:01Z"
    assert onex_time(_at(2026, 12, 3, 15, 4, 1, 200000)) == "2026-12-03T15:04:01.200000Z"
    assert onex_time(_at(2030, 1, 1, 0, 0, 0, 1)) == "2030-01-01T00:00:00.000001Z"


def test_bare_value_is_byte_for_byte_what_onex_publishes():
    key, value, _ = encode(_tick(), "bare")
    assert key == b"onex-0.38.76"
    assert value == ONEX_BARE
    assert list(tick_json(_tick())) == list(json.loads(ONEX_BARE))


def test_envelope_body_is_byte_for_byte_what_onex_publishes():
    body = envelope(
        _tick(), "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9", _at(2026, 12, 3, 15, 4, 1, 4120)
    )
    assert json.dumps(body).encode() == ONEX_ENVELOPE


def test_envelope_from_encode_has_exactly_the_0_38_76_keys_and_values():
    tick = _tick(scheduler_id="alpha")
    key, value, _ = encode(tick, "envelope")
    body = json.loads(value)
    assert list(body) == KEYS_0_38_76 == list(ENVELOPE_KEYS)
    assert body["payload"] == tick_json(tick)
    assert body["event_type"] == EVENT_TYPE == "platform.runtime-tick"
    assert body["source_tool"] == "runtime-scheduler.alpha"
    assert body["correlation_id"] == tick.correlation_id
    assert body["priority"] == 5 and body["retry_count"] == 0
    assert body["onex_version"]["major"] == 1 and body["envelope_version"]["minor"] == 3
    assert body["envelope_timestamp"] == "2026-12-03T15:04:01.003412Z"
    assert UUID(body["envelope_id"]) and body["envelope_id"] != tick.tick_id
    assert body["envelope_id"] != json.loads(encode(tick, "envelope")[1])["envelope_id"]
    assert key == b"alpha"


def test_bare_headers_are_onex_0_38_6s_ten_in_order():
    tick = _tick(scheduler_id="alpha")
    _, _, headers = encode(tick, "bare")
    assert isinstance(headers, TickHeaders)
    sent = headers.kafka()
    assert [name for name, _ in sent] == TEN == list(HEADER_NAMES)
    assert all(isinstance(v, bytes) for _, v in sent)
    assert dict(sent) == {
        "content_type": b"application/json",
        "correlation_id": tick.correlation_id.encode(),
        "message_id": tick.tick_id.encode(),
        "timestamp": b"2026-12-03T15:04:01.003412+00:00",  # datetime.isoformat(), as ONEX
        "source": b"runtime-scheduler.alpha",
        "event_type": b"runtime.tick.v1",
        "schema_version": b"1.0.0",
        "priority": b"normal",
        "retry_count": b"0",
        "max_retries": b"3",
    }


def test_envelope_headers_are_onex_0_38_76s():
    tick = _tick(scheduler_id="alpha")
    _, value, headers = encode(tick, "envelope")
    sent = dict(headers.kafka())
    assert list(dict(headers.kafka())) == TEN
    assert sent["message_id"] == json.loads(value)["envelope_id"].encode()
    assert sent["event_type"] == DEFAULT_TOPIC["envelope"].encode()
    assert sent["source"] == b"runtime-scheduler.alpha"
    assert sent["correlation_id"] == tick.correlation_id.encode()
    _, _, custom = encode(tick, "envelope", topic="onex.intent.mine.runtime-tick.v1")
    assert custom.event_type == "onex.intent.mine.runtime-tick.v1"


def test_headers_carry_modeleventheaders_attributes_and_optional_ones_when_set():
    _, _, headers = encode(_tick(), "bare")
    assert isinstance(headers.correlation_id, UUID) and isinstance(headers.message_id, UUID)
    assert headers.timestamp == datetime(2026, 12, 3, 15, 4, 1, 3412, tzinfo=UTC)
    for name in ("destination", "trace_id", "span_id", "parent_span_id", "parent_message_id",
                 "operation_name", "routing_key", "partition_key", "idempotency_key",
                 "ttl_seconds"):  # fmt: skip
        assert getattr(headers, name) is None
    traced = TickHeaders(**{**headers.__dict__, "trace_id": "t1", "ttl_seconds": 30})
    assert traced.kafka()[10:] == [("trace_id", b"t1"), ("ttl_seconds", b"30")]


def test_unknown_wire_is_refused():
    with pytest.raises(ValueError, match="wire"):
        encode(_tick(), "protobuf")


def test_decode_reads_onex_bare_and_envelope_bytes():
    bare = decode(ONEX_BARE)
    assert (bare.format, bare.scheduler_id, bare.sequence_number) == ("bare", "onex-0.38.76", 7)
    assert bare.now == "2026-12-03T15:04:01.003412Z" and bare.scheduled_at == "2026-12-03T15:04:01Z"
    env = decode(ONEX_ENVELOPE)
    assert (env.format, env.scheduler_id, env.sequence_number) == ("envelope", "onex-0.38.76", 7)
    assert env.tick == json.loads(ONEX_BARE)


def test_decode_reads_a_0_38_6_tick_with_offset_times_and_what_tickui_encodes():
    old = {
        "now": "2026-12-03T15:03:55.621354+00:00",
        "tick_id": "7d4c2a8e-1f3b-4c6d-9e0a-b1c2d3e4f506",
        "sequence_number": 4,
        "scheduled_at": "2026-12-03T15:03:55.621354+00:00",
        "correlation_id": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        "scheduler_id": "onex-0.38.6",
        "tick_interval_ms": 200,
    }
    got = decode(json.dumps(old).encode())
    assert (got.format, got.scheduler_id, got.sequence_number) == ("bare", "onex-0.38.6", 4)
    for wire in ("bare", "envelope"):
        tick = _tick(sequence_number=11)
        got = decode(encode(tick, wire)[1])
        assert (got.format, got.sequence_number, got.tick) == (wire, 11, tick_json(tick))


def test_decode_reads_an_envelope_without_envelope_id_as_onex_does():
    """ONEX's deserializer fills in a missing envelope_id (and the rest): `{"payload": tick}`
    is an envelope to a current ONEX consumer, so it is one to `tickui ticks` too."""
    tick = json.loads(ONEX_BARE)
    for body in ({"payload": tick}, {"payload": tick, "correlation_id": tick["correlation_id"]}):
        got = decode(json.dumps(body).encode())
        assert (got.format, got.sequence_number) == ("envelope", 7) and got.tick == tick
    # a bare tick that happens to carry a `payload` field stays a bare tick
    odd = dict(json.loads(ONEX_BARE), payload={"x": 1})
    assert decode(json.dumps(odd).encode()).format == "bare"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (None, "empty"),
        (b"[1, 2]", "list"),
        (b'{"scheduler_id": "a"}', "no sequence_number"),
        (b'{"sequence_number": true, "scheduler_id": "a"}', "bad sequence_number"),
        (b'{"sequence_number": -1, "scheduler_id": "a"}', "bad sequence_number"),
        (b'{"sequence_number": 3}', "no scheduler_id"),
        (b'{"payload": [], "envelope_id": "x"}', "payload is not an object"),
        (b'{"payload": {"sequence_number": 1}, "envelope_id": "x"}', "no scheduler_id"),
        (
            b'{"payload": {"sequence_number": 1, "scheduler_id": "a"}, "envelope_id": "x",'
            b' "event_type": "platform.other"}',
            "platform.other",
        ),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_decode_refuses_what_is_not_a_tick_in_one_line(raw, says):
    with pytest.raises(WireError) as caught:
        decode(raw)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_buses_turn_a_headers_object_or_old_tuples_into_kafka_headers():
    _, value, headers = encode(_tick(), "envelope")
    duck = SimpleNamespace(**headers.__dict__)  # any object with the attributes, as ONEX's
    assert to_kafka(headers) == to_kafka(duck) == headers.kafka()
    assert to_kafka([("a", b"1")]) == [("a", b"1")] and to_kafka(None) == []

    bus = MemoryBus()
    asyncio.run(bus.publish("t", b"k", value, duck))
    asyncio.run(bus.publish("t", b"k", value, [("old", b"x")]))
    assert bus.messages[0][3] == headers.kafka() and bus.messages[1][3] == [("old", b"x")]


def test_the_tickers_own_tick_encodes_as_the_stand_in_does():
    from tickui.ticks.ticker import (
        Tick as Real,  # imported here: the stand-in keeps this file alone
    )

    values = {f: getattr(_tick(), f) for f in Tick.__dataclass_fields__}
    real = Real(**values)
    assert encode(real, "bare")[:2] == encode(_tick(), "bare")[:2]
    assert json.loads(encode(real, "envelope")[1])["payload"] == tick_json(_tick())
