"""Ticks on the wire, as ONEX writes and reads them.

Two formats: `bare`, the seed's (omnibase-infra 0.38.6): the tick itself as compact JSON on
`runtime.tick.v1`; and `envelope`, current ONEX's (0.38.76): the tick as the `payload` of a
`ModelEventEnvelope` with `event_type` `platform.runtime-tick`, on
`onex.intent.platform.runtime-tick.v1`. Both carry ONEX's ten Kafka headers with ONEX's
values. Times in the bodies are in pydantic's form (`...Z`, microseconds only when not zero).
Nothing here imports ONEX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tickui.common.timeutil import MICROS, from_micros
from tickui.ticks.topics import DEFAULT_TOPIC, WIRES

if TYPE_CHECKING:
    from uuid import UUID

    from tickui.ticks.tick import Tick

EVENT_TYPE = "platform.runtime-tick"  # the envelope's event_type
BARE_EVENT_TYPE = "runtime.tick.v1"  # the bare tick's event_type header (0.38.6)
TICK_KEYS = (
    "now",
    "tick_id",
    "sequence_number",
    "scheduled_at",
    "correlation_id",
    "scheduler_id",
    "tick_interval_ms",
)
# ModelEventEnvelope's keys in 0.38.76 (omnibase-core 0.47.57, extra="forbid"), in its order.
ENVELOPE_KEYS = (
    "payload",
    "envelope_id",
    "envelope_timestamp",
    "correlation_id",
    "parent_envelope_id",
    "source_tool",
    "target_tool",
    "metadata",
    "security_context",
    "event_type",
    "payload_type",
    "payload_schema_version",
    "priority",
    "timeout_seconds",
    "retry_count",
    "request_id",
    "trace_id",
    "span_id",
    "tenant_id",
    "producer",
    "onex_version",
    "envelope_version",
)
# ModelEventHeaders: the ten always sent, then the optional ones (sent only when set).
HEADER_NAMES = (
    "content_type",
    "correlation_id",
    "message_id",
    "timestamp",
    "source",
    "event_type",
    "schema_version",
    "priority",
    "retry_count",
    "max_retries",
)
OPTIONAL_HEADER_NAMES = (
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
)


class WireError(ValueError):
    """A message that is not a tick in either format; the text says why, in one line."""


@dataclass(frozen=True)
class TickHeaders:
    """ONEX's `ModelEventHeaders`, field for field, so ONEX's own bus can take it as is."""

    content_type: str
    correlation_id: UUID
    message_id: UUID
    timestamp: datetime
    source: str
    event_type: str
    schema_version: str = "1.0.0"
    priority: str = "normal"
    retry_count: int = 0
    max_retries: int = 3
    destination: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    parent_message_id: UUID | None = None
    operation_name: str | None = None
    routing_key: str | None = None
    partition_key: str | None = None
    idempotency_key: str | None = None
    ttl_seconds: int | None = None

    def kafka(self) -> list[tuple[str, bytes]]:
        """The ten headers in ONEX's order (then any optional one that is set), UTF-8."""
        return kafka_headers(self)


def kafka_headers(headers: Any) -> list[tuple[str, bytes]]:
    """Kafka headers from any object with ModelEventHeaders' attributes, as ONEX's
    `EventBusKafka` makes them: `timestamp` by `isoformat()`, the rest by `str()`."""
    out: list[tuple[str, bytes]] = []
    for name in HEADER_NAMES:
        value = getattr(headers, name)
        text = value.isoformat() if name == "timestamp" else str(value)
        out.append((name, text.encode()))
    for name in OPTIONAL_HEADER_NAMES:
        value = getattr(headers, name, None)
        if value is not None:
            out.append((name, str(value).encode()))
    return out


def onex_time(micros: int) -> str:
    """UTC in pydantic's JSON form: `2026-12-03T15:04:01Z`, `...:01.200000Z`."""
    spec = "microseconds" if micros % MICROS else "seconds"
    return from_micros(micros).isoformat(timespec=spec).replace("+00:00", "Z")


def tick_json(tick: Tick) -> dict[str, Any]:
    """The bare tick (ModelRuntimeTick's fields, in its order) with ONEX's times."""
    return {
        "now": onex_time(tick.now),
        "tick_id": str(tick.tick_id),
        "sequence_number": tick.sequence_number,
        "scheduled_at": onex_time(tick.scheduled_at),
        "correlation_id": str(tick.correlation_id),
        "scheduler_id": tick.scheduler_id,
        "tick_interval_ms": tick.tick_interval_ms,
    }


def _version(major: int, minor: int, patch: int) -> dict[str, Any]:
    return {"major": major, "minor": minor, "patch": patch, "prerelease": None, "build": None}


def envelope(tick: Tick, envelope_id: str, timestamp: int) -> dict[str, Any]:
    """The tick in a ModelEventEnvelope, with 0.38.76's key set exactly and in its order."""
    body = {
        "payload": tick_json(tick),
        "envelope_id": envelope_id,
        "envelope_timestamp": onex_time(timestamp),
        "correlation_id": str(tick.correlation_id),
        "parent_envelope_id": None,
        "source_tool": f"runtime-scheduler.{tick.scheduler_id}",
        "target_tool": None,
        "metadata": {
            "trace_id": None,
            "span_id": None,
            "parent_span_id": None,
            "request_id": None,
            "headers": {},
            "tags": {},
        },
        "security_context": None,
        "event_type": EVENT_TYPE,
        "payload_type": None,
        "payload_schema_version": None,
        "priority": 5,
        "timeout_seconds": None,
        "retry_count": 0,
        "request_id": None,
        "trace_id": None,
        "span_id": None,
        "tenant_id": None,
        "producer": None,
        "onex_version": _version(1, 0, 0),
        "envelope_version": _version(2, 3, 0),
    }
    assert tuple(body) == ENVELOPE_KEYS
    return body


def encode(tick: Tick, wire: str, topic: str | None = None) -> tuple[bytes, bytes, TickHeaders]:
    """Kafka key, value and headers of `tick` in `wire` ("bare" or "envelope").

    `topic` only feeds the envelope's `event_type` header (ONEX 0.38.76 puts the topic
    there); it defaults to the wire's default topic. The envelope's timestamp is the
    tick's `now`: the moment the envelope is made, on the ticker's clock."""
    if wire not in WIRES:
        raise ValueError(f"wire {wire!r} is not one of {', '.join(WIRES)}")
    import uuid  # loads platform: the settings readers load this module, only a ticker encodes
    from uuid import UUID

    key = tick.scheduler_id.encode()
    source = f"runtime-scheduler.{tick.scheduler_id}"
    when = from_micros(tick.now)
    if wire == "bare":
        value = json.dumps(tick_json(tick), separators=(",", ":")).encode()
        headers = TickHeaders(
            content_type="application/json",
            correlation_id=UUID(str(tick.correlation_id)),
            message_id=UUID(str(tick.tick_id)),
            timestamp=when,
            source=source,
            event_type=BARE_EVENT_TYPE,
        )
        return key, value, headers
    envelope_id = str(uuid.uuid4())
    value = json.dumps(envelope(tick, envelope_id, tick.now)).encode()
    headers = TickHeaders(
        content_type="application/json",
        correlation_id=UUID(str(tick.correlation_id)),
        message_id=UUID(envelope_id),
        timestamp=when,
        source=source,
        event_type=topic or DEFAULT_TOPIC["envelope"],
    )
    return key, value, headers


@dataclass(frozen=True)
class DecodedTick:
    format: str  # "bare" or "envelope"
    scheduler_id: str
    sequence_number: int
    now: str | None
    scheduled_at: str | None
    tick: dict[str, Any]  # the tick's fields as they came (the envelope's payload)


def decode(value: bytes | str | None) -> DecodedTick:
    """A tick from a Kafka message value, either format, told apart per message: an object
    with a `payload` is an envelope unless it is a tick itself (has a `sequence_number`);
    ONEX's deserializer fills in a missing `envelope_id`, so `{"payload": {...}}` is one.
    Anything else raises WireError."""
    if value is None:
        raise WireError("empty message (no value)")
    try:
        data = json.loads(value)
    except (ValueError, TypeError, RecursionError):
        raise WireError("not JSON") from None
    if not isinstance(data, dict):
        raise WireError(f"JSON {type(data).__name__}, not an object")
    if "payload" in data and ("envelope_id" in data or "sequence_number" not in data):
        event_type = data.get("event_type")
        if event_type is not None and event_type != EVENT_TYPE:
            raise WireError(f"an envelope of event_type {str(event_type)[:60]!r}, not a tick event")
        payload = data["payload"]
        if not isinstance(payload, dict):
            raise WireError("an envelope whose payload is not an object")
        return _tick("envelope", payload, "an envelope whose payload has")
    return _tick("bare", data, "an object with")


def _tick(form: str, tick: dict[str, Any], what: str) -> DecodedTick:
    sequence = tick.get("sequence_number")
    if isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0:
        shown = "no sequence_number" if sequence is None else "a bad sequence_number"
        raise WireError(f"{what} {shown}")
    scheduler = tick.get("scheduler_id")
    if not isinstance(scheduler, str) or not scheduler:
        raise WireError(f"{what} no scheduler_id")
    now, scheduled = tick.get("now"), tick.get("scheduled_at")
    return DecodedTick(
        format=form,
        scheduler_id=scheduler,
        sequence_number=sequence,
        now=now if isinstance(now, str) else None,
        scheduled_at=scheduled if isinstance(scheduled, str) else None,
        tick=tick,
    )
