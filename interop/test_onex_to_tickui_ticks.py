"""(c) ONEX's own RuntimeScheduler publishes to Tansu through its own EventBusKafka (bare ticks
in 0.38.6, envelopes in 0.38.76), with a gap (one publish fails, its sequence number is lost)
and a restart (a new scheduler without Valkey starts at 1 again); `tickui ticks` follows it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from conftest import (
    ONEX_VERSION,
    FlakyBus,
    create_topic,
    deserialize_envelope,
    onex_bus,
    onex_topic,
    read_all,
    tickui_cli,
)
from omnibase_infra.runtime.models import ModelRuntimeSchedulerConfig, ModelRuntimeTick
from omnibase_infra.runtime.runtime_scheduler import RuntimeScheduler

# 0.38.6 publishes the bare tick; 0.38.76 a ModelEventEnvelope (publish_envelope).
FORMAT = "bare" if ONEX_VERSION == "0.38.6" else "envelope"


async def onex_publishes(boot: str, topic: str, t0: datetime) -> list[int | None]:
    """Sequence numbers 1, 2, (3 fails), 4, 5, then a restart: 1, 2. None = the failed one."""
    await create_topic(boot, topic)
    bus = onex_bus(boot)
    await bus.start()
    try:
        config = ModelRuntimeSchedulerConfig(
            scheduler_id=f"onex-{ONEX_VERSION}",
            tick_topic=topic,
            tick_interval_ms=1000,
            persist_sequence_number=False,
            valkey_host="localhost",
        )
        first = RuntimeScheduler(config=config, event_bus=FlakyBus(bus, {3: ConnectionError("x")}))
        sent: list[int | None] = []
        for i in range(5):
            try:
                await first.emit_tick(now=t0 + timedelta(seconds=i))
                sent.append(first.current_sequence_number)
            except Exception as exc:
                assert type(exc).__name__ == "InfraConnectionError", exc
                sent.append(None)
        second = RuntimeScheduler(config=config, event_bus=bus)  # no Valkey: starts at 1 again
        for i in range(2):
            await second.emit_tick(now=t0 + timedelta(seconds=10 + i))
            sent.append(second.current_sequence_number)
        return sent
    finally:
        await bus.close()


def test_tickui_ticks_follows_onex_with_gap_and_restart(boot, tmp_path):
    topic = onex_topic()
    t0 = datetime(2030, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)
    sent = asyncio.run(onex_publishes(boot, topic, t0))
    assert sent == [1, 2, None, 4, 5, 1, 2], sent

    # The raw records, decoded by ONEX itself: the reference tickui must agree with.
    records = asyncio.run(read_all(boot, topic))
    expected = []
    for record in records:
        if FORMAT == "bare":
            expected.append(ModelRuntimeTick.model_validate_json(record.value))
        else:
            envelope = deserialize_envelope(record.value, topic)
            expected.append(ModelRuntimeTick.model_validate(envelope.payload))
    assert [t.sequence_number for t in expected] == [1, 2, 4, 5, 1, 2]

    tail = tickui_cli(
        "ticks", "--kafka", boot, "--topic", topic, "--from-beginning", "--json",
        "--count", str(len(records)), "--for", "30",
        cwd=tmp_path,
    )  # fmt: skip
    assert tail.returncode == 0, tail.stderr[-2000:]
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert len(lines) == len(records), tail.stdout
    assert [x["format"] for x in lines] == [FORMAT] * len(records)
    assert [x["flag"] for x in lines] == [None, None, "gap", None, "restart", None]
    assert lines[2]["missing"] == 1
    for line, tick in zip(lines, expected, strict=True):
        # What tickui read is the tick ONEX sent, field for field.
        assert ModelRuntimeTick.model_validate(line["tick"]) == tick
        assert line["tick"]["scheduler_id"] == f"onex-{ONEX_VERSION}"

    # The text form names the format and flags the same two lines.
    text = tickui_cli(
        "ticks", "--kafka", boot, "--topic", topic, "--from-beginning",
        "--count", str(len(records)), "--for", "30",
        cwd=tmp_path,
    )  # fmt: skip
    assert text.returncode == 0, text.stderr[-2000:]
    shown = text.stdout.splitlines()
    assert len(shown) == len(records)
    assert all(f"format={FORMAT}" in s and f"onex-{ONEX_VERSION}" in s for s in shown), shown
    assert "GAP: 1 tick(s) missing" in shown[2] and "RESTART" in shown[4]
    assert sum("GAP" in s or "RESTART" in s for s in shown) == 2
