"""What the engine reads from Kafka: workers' run events (into the event log, where
reconcile settles occurrences) and their heartbeats (into the workers table). Each is a
group-less consumer of its own; a malformed message is logged (redacted) and skipped, and
one whose signature does not check is refused (counted, logged, never believed)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from tickui.common.kafka import FETCHER_LOOK_MS, KafkaAccess, describe, quietly_stop
from tickui.dispatch.bounded import Bounded
from tickui.dispatch.messages import (
    EVENTS_TOPIC,
    WORKERS_TOPIC,
    BadMessage,
    Heartbeat,
    RunEvent,
)
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import Keyring
from tickui.model.occurrence import RUN_TRANSITION
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
    forged = ""  # the refusal kind of a message here whose signature does not check

    def __init__(
        self,
        access: str | KafkaAccess,
        request_timeout_ms: int = 3000,
        keyring: Keyring | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.access = KafkaAccess.of(access)
        self.bootstrap = self.access.bootstrap
        self.keyring = keyring or Keyring()
        self.refusals = refusals or Refusals(log)
        self.prepare: Callable[[], Awaitable[None]] | None = None  # makes the topics
        self.restarted: Callable[[], None] | None = None  # the broker came back empty
        self.opened: Callable[[], None] | None = None  # reading (again) from now on
        self.request_timeout_ms = max(3000, request_timeout_ms)
        self._task: asyncio.Task[None] | None = None
        self._bad = 0  # malformed messages skipped
        self.error: str | None = None
        self.caught_up = asyncio.Event()  # the first read since (re)start is done
        self._anew = False  # every partition is to be read from its start

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"tickui-feed-{self.topic}")

    def read_anew(self) -> None:
        """The broker came back empty (seen here or by another reader): the topic is a new
        one, and every partition is read from its start, as positions in the old one name
        nothing (records already taken are taken again: readers keep one of each)."""
        self._anew = True

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
                    # records wake it at once; at rest it comes back for the restart check
                    batches = await consumer.getmany(timeout_ms=FETCHER_LOOK_MS, max_records=500)
                    messages = [m for batch in batches.values() for m in batch]
                    if messages:
                        await self.handle(self._signed(messages))
                    self.caught_up.set()
                    if time.monotonic() - checked >= CHECK_EVERY_S:
                        checked = time.monotonic()
                        await self._check_restart(consumer)
                    if self._anew:
                        self._anew = False
                        await consumer.seek_to_beginning(*consumer.assignment())
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

    def _signed(self, records: list) -> list[tuple[bytes | None, bytes | None]]:
        """(key, value) of each record whose signature checks; the rest are refused."""
        kept = []
        for r in records:
            why = self.keyring.check(self.topic, r.key, r.value, r.headers)
            if why is None:
                kept.append((r.key, r.value))
            else:
                where = f"{self.topic}[{r.partition}]@{r.offset}"
                self.refusals.refuse(self.forged, f"{why}, {where}")
        return kept

    def _failed(self, exc: BaseException) -> None:
        text = self.access.refusal(exc) or describe(exc, self.bootstrap)
        if text != self.error:
            log.warning("reading %s: %s (trying again)", self.topic, text)
        self.error = text

    async def _open(self):
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            **self.access.options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a broker restarted empty: from its start
            request_timeout_ms=self.request_timeout_ms,
            retry_backoff_ms=200,
            metadata_max_age_ms=5000,
            consumer_timeout_ms=FETCHER_LOOK_MS,
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
        new log reaches it. One partition whose end is behind where we are means the whole
        topic is new: every partition is read anew (another may have grown past our position
        already), and the other readers are told. The end each fetch answer carries (its
        high watermark) is looked at first: the broker is asked only when one is behind, or
        not known yet."""
        tps = list(consumer.assignment())
        positions = {tp: await consumer.position(tp) for tp in tps}
        marks = {tp: consumer.highwater(tp) for tp in tps}
        if all(marks[tp] is not None and marks[tp] >= positions[tp] for tp in tps):
            return
        ends = await consumer.end_offsets(tps)
        if any(ends.get(tp, 0) < positions[tp] for tp in tps):
            log.warning("%s: the broker was restarted empty; reading it from its start", self.topic)
            self.read_anew()
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

    async def handle(self, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        raise NotImplementedError


class EventFeed(Feed):
    """Run events of this engine's commands go to the event log (a repeated event_id is
    stored once); events of other engines' commands are left alone. A run's events are
    believed only from the worker that reported starting it: `ours` maps each of this
    engine's command ids to that worker (None while none did)."""

    topic = EVENTS_TOPIC
    forged = "forged_event"

    def __init__(
        self,
        access: str | KafkaAccess,
        ours: Callable[[list[str]], Awaitable[dict[str, str | None]]],
        record: Callable[[list[NewEvent]], Awaitable[object]],
        request_timeout_ms: int = 3000,
        keyring: Keyring | None = None,
        refusals: Refusals | None = None,
        second_start: Callable[[str, str, str], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(access, request_timeout_ms, keyring, refusals)
        self._ours = ours
        self._record = record
        self._second_start = second_start  # (command id, worker, the starter): stop it
        self._starters: Bounded[str, str] = Bounded(100_000)  # command id -> its starter
        self._seconds: Bounded[tuple[str, str], None] = Bounded(10_000)  # stopped 2nd starts

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

    async def handle(self, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        events: list[RunEvent] = []
        for _key, raw in messages:
            try:
                events.append(RunEvent.decode(raw))
            except BadMessage as exc:
                self.skipped(exc)
        if not events:
            return
        ours = await self._ours(sorted({e.command_id for e in events}))
        stored = []
        for e in events:
            if e.command_id not in ours:
                continue
            starter = self._starters.get(e.command_id) or ours[e.command_id]
            if starter is not None and e.worker != starter:
                await self._from_another(e, starter)
                continue
            if e.type == RUN_TRANSITION:
                self._starters.put(e.command_id, e.worker)
            stored.append(
                NewEvent(
                    at=e.at,
                    type=e.type,
                    command_id=e.command_id,
                    run_id=e.run_id,
                    payload={**e.payload, "worker": e.worker},
                    event_id=e.event_id,
                )
            )
        if stored:
            await self._record(stored)

    async def _from_another(self, event: RunEvent, starter: str) -> None:
        """An event about a run from a worker other than the one that started it: a
        second start (a command replayed to another worker) is stopped at once; its events,
        and any other worker's word on the run, are never believed."""
        second = (event.command_id, event.worker)
        if second in self._seconds:
            return  # a second start already stopped: what it says of itself is not news
        if event.type == RUN_TRANSITION and self._second_start is not None:
            self._seconds.put(second, None)
            await self._second_start(event.command_id, event.worker, starter)
            return
        self.refusals.refuse(
            "foreign_event",
            f"{event.type} for {event.command_id} from worker {event.worker};"
            f" worker {starter} started it",
        )


class HeartbeatFeed(Feed):
    """Heartbeats, from now on (workers send one every 2 s)."""

    topic = WORKERS_TOPIC
    forged = "forged_heartbeat"

    def __init__(
        self,
        access: str | KafkaAccess,
        record: Callable[[list[Heartbeat]], Awaitable[object]],
        group: str | None = None,
        request_timeout_ms: int = 3000,
        keyring: Keyring | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        super().__init__(access, request_timeout_ms, keyring, refusals)
        self._record = record
        self.group = group

    async def handle(self, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        beats: list[Heartbeat] = []
        for _key, raw in messages:
            try:
                beat = Heartbeat.decode(raw)
            except BadMessage as exc:
                self.skipped(exc)
                continue
            if self.group is None or beat.group == self.group:
                beats.append(beat)
        if beats:
            await self._record(beats)
