"""`tickui ticks`: follow ticks on Kafka as an orchestrator would, flagging restarts and gaps.

Both wire formats are read, told apart per message (tickui.ticks.wire.decode): the bare tick of
the seed and ONEX 0.38.6, and the envelope of ONEX 0.38.76; each line says which it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

from tickui.common.errors import TickuiError
from tickui.common.kafka import KafkaAccess, preflight
from tickui.common.procs import stop_on_signals
from tickui.common.redact import redact, redact_data, safe_text
from tickui.ticks.wire import TICK_KEYS, DecodedTick, WireError, decode


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


FIELD_MAX = 256  # characters of one field shown: a tick's own fields are far shorter


def _cut(value: Any) -> Any:
    """A field from the network, bounded before it is redacted (redacting costs more than
    linear time in the length): a string, or anything but a number/bool/None as its JSON
    text, cut to FIELD_MAX characters."""
    if value is None or isinstance(value, bool | int | float):
        return value
    text = value if isinstance(value, str) else json.dumps(value)[: FIELD_MAX + 1]
    return text if len(text) <= FIELD_MAX else text[: FIELD_MAX - 1] + "…"


def _line(tick: DecodedTick, flag: str | None, missing: int, as_json: bool) -> str:
    """One output line. A tick comes from the network: ModelRuntimeTick's fields only, each
    bounded, then redacted with control characters shown; so a huge message (Kafka allows
    1 MB) costs no more than a normal one."""
    if as_json:
        shown = {key: _cut(tick.tick[key]) for key in TICK_KEYS if key in tick.tick}
        data = {"tick": shown, "format": tick.format, "flag": flag, "missing": missing}
        return json.dumps(redact_data(data))
    text = safe_text(
        f"{_cut(tick.now)} seq={tick.sequence_number} {_cut(tick.scheduler_id)}"
        f" format={tick.format}"
    )
    if flag == "restart":
        text += "  RESTART: the sequence went down (the scheduler restarted)"
    elif flag == "gap":
        text += f"  GAP: {missing} tick(s) missing"
    return text


def _unreadable(record: Any, reason: str, as_json: bool) -> str:
    """One line for a message that is not a tick in either format (it is skipped)."""
    where = f"partition {record.partition} offset {record.offset}"
    if as_json:
        return json.dumps({"error": redact(f"not a tick: {reason}"), "at": where})
    shown = safe_text(repr(record.value)[:80])
    return safe_text(redact(f"not a tick ({where}): {reason}: ")) + shown


async def tail(
    access: str | KafkaAccess,
    topic: str,
    as_json: bool,
    duration: float | None,
    count: int | None,
    from_beginning: bool,
) -> int:
    from aiokafka import AIOKafkaConsumer

    access = KafkaAccess.of(access)
    bootstrap = access.bootstrap
    await preflight(access)
    consumer = AIOKafkaConsumer(
        **access.options(), enable_auto_commit=False, request_timeout_ms=5000
    )
    try:
        await consumer.start()
    except Exception as exc:
        await _stop(consumer)
        said = access.refusal(exc) or f"kafka {bootstrap} is not reachable: {exc}"
        raise TickuiError(redact(said)) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if duration:
        loop.call_later(duration, stop.set)
    with stop_on_signals(loop, stop.set, (signal.SIGINT, signal.SIGTERM)):
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
                        try:
                            tick = decode(record.value)
                        except WireError as exc:
                            print(_unreadable(record, str(exc), as_json), flush=True)
                            continue
                        flag, missing = watch.see(tick.scheduler_id, tick.sequence_number)
                        print(_line(tick, flag, missing, as_json), flush=True)
                        seen += 1
                        if count is not None and seen >= count:
                            break
        finally:
            await _stop(consumer)
    return 0


async def _stop(consumer) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(consumer.stop(), 5)


def main_sync(*args: Any) -> int:
    try:
        return asyncio.run(tail(*args))
    except KeyboardInterrupt:
        print("", file=sys.stderr)
        return 130
