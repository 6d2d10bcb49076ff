"""What the engine reads from Kafka: workers' run events (into the event log, where
reconcile settles occurrences) and their heartbeats (into the workers table). Each is a
group-less consumer of its own; a malformed message is logged (redacted) and skipped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from tickui.dispatch.kafka_link import describe, quietly_stop
from tickui.dispatch.messages import (
    EVENTS_TOPIC,
    WORKERS_TOPIC,
    BadMessage,
    Heartbeat,
    RunEvent,
)
from tickui.store import NewEvent

log = logging.getLogger("tickui.dispatch.kafka")

LOOKBACK_S = 15 * 60  # an engine (re)starting reads the events of the last 15 minutes
RETRY_S = 1.0
CHECK_EVERY_S = 1.0  # how often a feed looks for a broker that restarted empty


def _cancelling() -> bool:
    """Whether this task was asked to stop (not a CancelledError aiokafka let out)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class Feed:
    """One topic read from its partitions' positions by a consumer without a group; on
    any failure the consumer is rebuilt after a pause (the broker may come back empty)."""

    topic = ""

    def __init__(self, bootstrap: str, request_timeout_ms: int = 3000) -> None:
        self.bootstrap = bootstrap
        self.prepare: Callable[[], Awaitable[None]] | None = None  # makes the topics
        self.restarted: Callable[[], None] | None = None  # the broker came back empty
        self.opened: Callable[[], None] | None = None  # reading (again) from now on
        self.request_timeout_ms = max(3000, request_timeout_ms)
        self._task: asyncio.Task[None] | None = None
        self._bad = 0  # malformed messages skipped
        self.error: str | None = None
        self.caught_up = asyncio.Event()  # the first read since (re)start is done

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"tickui-feed-{self.topic}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            consumer = None
            try:
                if self.prepare is not None:
                    await self.prepare()
                consumer = await self._open()
                self.error = None
                if self.opened is not None:
                    self.opened()
                checked = time.monotonic()
                while True:
                    batches = await consumer.getmany(timeout_ms=200, max_records=500)
                    messages = [m for batch in batches.values() for m in batch]
                    if messages:
                        await self.handle([m.value for m in messages])
                    self.caught_up.set()
                    if time.monotonic() - checked >= CHECK_EVERY_S:
                        checked = time.monotonic()
                        await self._check_restart(consumer)
            except asyncio.CancelledError as exc:
                if _cancelling():
                    raise
                self._failed(exc)  # aiokafka's own (a connection it closed), not ours
            except Exception as exc:
                self._failed(exc)
            finally:
                if consumer is not None:
                    await quietly_stop(consumer)
            await asyncio.sleep(RETRY_S)

    def _failed(self, exc: BaseException) -> None:
        text = describe(self.bootstrap, exc)
        if text != self.error:
            log.warning("reading %s: %s (trying again)", self.topic, text)
        self.error = text

    async def _open(self):
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a broker restarted empty: from its start
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=200,
            metadata_max_age_ms=5000,
        )
        try:
            await consumer.start()
            parts = await self._partitions(consumer)
            tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            await self._position(consumer, tps)
        except BaseException:
            await quietly_stop(consumer)
            raise
        return consumer

    async def _check_restart(self, consumer) -> None:
        """A broker restarted empty (Tansu keeps topics in memory) starts its offsets at
        0 again and does not say a position is out of range: it answers nothing until the
        new log reaches it. A partition whose end is behind where we are is read anew."""
        tps = list(consumer.assignment())
        ends = await consumer.end_offsets(tps)
        behind = [tp for tp in tps if ends.get(tp, 0) < await consumer.position(tp)]
        if behind:
            log.warning("%s: the broker was restarted empty; reading it from its start", self.topic)
            for tp in behind:
                consumer.seek(tp, 0)
            if self.restarted is not None:
                self.restarted()

    async def _partitions(self, consumer) -> set[int]:
        for _ in range(20):
            parts = consumer.partitions_for_topic(self.topic)
            if parts:
                return parts
            await consumer._client.force_metadata_update()
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topic {self.topic} does not exist yet")

    async def _position(self, consumer, tps) -> None:
        await consumer.seek_to_end(*tps)

    def skipped(self, exc: BadMessage) -> None:
        self._bad += 1
        if self._bad <= 20 or self._bad % 1000 == 0:
            log.warning(
                "%s: skipped a malformed message (%d so far): %s", self.topic, self._bad, exc
            )

    async def handle(self, values: list[bytes | None]) -> None:
        raise NotImplementedError


class EventFeed(Feed):
    """Run events of this engine's commands go to the event log (a repeated event_id is
    stored once); events of other engines' commands are left alone."""

    topic = EVENTS_TOPIC

    def __init__(
        self,
        bootstrap: str,
        ours: Callable[[list[str]], Awaitable[set[str]]],
        record: Callable[[list[NewEvent]], Awaitable[object]],
        request_timeout_ms: int = 3000,
    ) -> None:
        super().__init__(bootstrap, request_timeout_ms)
        self._ours = ours
        self._record = record

    async def _position(self, consumer, tps) -> None:
        """From the last LOOKBACK_S: what workers said while this engine was away."""
        since = int((time.time() - LOOKBACK_S) * 1000)
        try:
            found = await consumer.offsets_for_times({tp: since for tp in tps})
        except Exception:
            found = {}
        for tp in tps:
            offset = found.get(tp)
            if offset is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, offset.offset)

    async def handle(self, values: list[bytes | None]) -> None:
        events: list[RunEvent] = []
        for raw in values:
            try:
                events.append(RunEvent.decode(raw))
            except BadMessage as exc:
                self.skipped(exc)
        if not events:
            return
        ours = await self._ours(sorted({e.command_id for e in events}))
        stored = [
            NewEvent(
                at=e.at,
                type=e.type,
                command_id=e.command_id,
                run_id=e.run_id,
                payload={**e.payload, "worker": e.worker},
                event_id=e.event_id,
            )
            for e in events
            if e.command_id in ours
        ]
        if stored:
            await self._record(stored)


class HeartbeatFeed(Feed):
    """Heartbeats, from now on (workers send one every 2 s)."""

    topic = WORKERS_TOPIC

    def __init__(
        self,
        bootstrap: str,
        record: Callable[[list[Heartbeat]], Awaitable[object]],
        group: str | None = None,
        request_timeout_ms: int = 3000,
    ) -> None:
        super().__init__(bootstrap, request_timeout_ms)
        self._record = record
        self.group = group

    async def handle(self, values: list[bytes | None]) -> None:
        beats: list[Heartbeat] = []
        for raw in values:
            try:
                beat = Heartbeat.decode(raw)
            except BadMessage as exc:
                self.skipped(exc)
                continue
            if self.group is None or beat.group == self.group:
                beats.append(beat)
        if beats:
            await self._record(beats)
