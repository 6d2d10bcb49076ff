"""`tickui ticks`: follow ticks on Kafka as an orchestrator would, flagging restarts and gaps."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from tickui.errors import TickuiError
from tickui.redact import redact, redact_data, safe_text


@dataclass(slots=True)
class SequenceWatch:
    """Per scheduler, what the last sequence number says about the next one. Pure."""

    last: dict[str, int] = field(default_factory=dict)

    def see(self, scheduler: str, sequence: int) -> tuple[str | None, int]:
        """('restart', 0) when the number went down or repeated, ('gap', missing) when some
        were skipped, (None, 0) otherwise."""
        previous = self.last.get(scheduler)
        self.last[scheduler] = sequence
        if previous is None:
            return None, 0
        if sequence <= previous:
            return "restart", 0
        if sequence > previous + 1:
            return "gap", sequence - previous - 1
        return None, 0


async def _partitions(consumer, topic: str, wait: float) -> list[Any]:
    from aiokafka import TopicPartition

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        await consumer.topics()  # refreshes metadata
        found = consumer.partitions_for_topic(topic)
        if found:
            return [TopicPartition(topic, p) for p in sorted(found)]
        if loop.time() > deadline:
            return []
        await asyncio.sleep(0.2)


def _line(tick: dict[str, Any], flag: str | None, missing: int, as_json: bool) -> str:
    """One output line. A tick comes from the network: redacted, control characters shown."""
    if as_json:
        return json.dumps(redact_data({"tick": tick, "flag": flag, "missing": missing}))
    text = safe_text(
        f"{tick.get('now')} seq={tick.get('sequence_number')} {tick.get('scheduler_id')}"
    )
    if flag == "restart":
        text += "  RESTART: the sequence went down (the scheduler restarted)"
    elif flag == "gap":
        text += f"  GAP: {missing} tick(s) missing"
    return text


async def tail(
    bootstrap: str,
    topic: str,
    as_json: bool,
    duration: float | None,
    count: int | None,
    from_beginning: bool,
) -> int:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=5000
    )
    try:
        await consumer.start()
    except Exception as exc:
        await _stop(consumer)
        raise TickuiError(redact(f"kafka {bootstrap} is not reachable: {exc}")) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if duration:
        loop.call_later(duration, stop.set)
    watch, seen = SequenceWatch(), 0
    try:
        parts = await _partitions(consumer, topic, duration or 30.0)
        if not parts:
            raise TickuiError(redact(f"topic {topic} does not exist on {bootstrap}"))
        consumer.assign(parts)
        if from_beginning:
            await consumer.seek_to_beginning(*parts)
        else:
            await consumer.seek_to_end(*parts)
        while not stop.is_set() and (count is None or seen < count):
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    tick = _decode(record.value)
                    if tick is None:
                        shown = safe_text(repr(record.value)[:80])
                        print(f"not a tick (offset {record.offset}): {shown}", flush=True)
                        continue
                    flag, missing = watch.see(
                        str(tick.get("scheduler_id")), tick["sequence_number"]
                    )
                    print(_line(tick, flag, missing, as_json), flush=True)
                    seen += 1
                    if count is not None and seen >= count:
                        break
    finally:
        await _stop(consumer)
    return 0


def _decode(value: Any) -> dict[str, Any] | None:
    """A tick message, or None when it is not one (a topic is anyone's to write to)."""
    try:
        tick = json.loads(value)
    except (ValueError, TypeError, RecursionError):
        return None
    if not isinstance(tick, dict):
        return None
    sequence = tick.get("sequence_number", 0)
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        return None
    tick["sequence_number"] = sequence
    return tick


async def _stop(consumer) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(consumer.stop(), 5)


def main_sync(*args: Any) -> int:
    try:
        return asyncio.run(tail(*args))
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
