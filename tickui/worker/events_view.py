"""A worker's view of the events topic: which commands some worker started or finished.
Read from LOOKBACK_S ago with a group-less consumer, so "already started" holds across
workers: before a start the view is read up to the topic's end. While the worker rests
the view is not fetched at all (`rest`): a start catches it up then, and a fetch for
records already there is answered at once (Tansu holds a fetch for its wait only when
nothing is there to send)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tickui.dispatch import messages as m
from tickui.dispatch.bounded import Bounded
from tickui.dispatch.signing import Keyring
from tickui.model.occurrence import RUN_TRANSITION

log = logging.getLogger("tickui.worker")

# The events topic is read from this long ago at start: the longest start_timeout and a
# margin for clocks, so that a copy of any command still before its deadline finds the
# "running" event of the record it was first started from, whichever worker holds its
# partition now.
LOOKBACK_S = 65 * 60
CHECK_WAIT_S = 5.0  # how long a start waits for the events topic to be read to its end
OWN_SPAN = 64  # a lag of at most this many records, all this worker's own, is no lag


@dataclass
class Answers:
    """A partition's fetch answers seen since its end was listed: the leader then, the
    time of the last answer, how many came since; gone once the leader moved."""

    leader: Any
    stamp: int | None
    seen: int = 0
    gone: bool = False


class EventsView:
    """`consumer` reads the topic; `probe`, a client with nothing assigned, asks for its end
    offsets (asked on the reader's connection, they would queue behind its fetch wait)."""

    def __init__(
        self, consumer: Any, probe: Any, on_new: Callable[[], None], keyring: Keyring
    ) -> None:
        self.consumer = consumer
        self.keyring = keyring  # an event whose signature does not check is not believed
        self.probe = probe
        self.on_new = on_new  # called when the topic is found new (it calls topic_is_new)
        self.tps: list[Any] = []
        self.started_by: Bounded[str, str] = Bounded(200_000)
        self.finished: Bounded[str, None] = Bounded(200_000)
        # command id -> "partition:offset" of the command record its starter ran
        self.origin: Bounded[str, str] = Bounded(200_000)
        self._own: dict[int, set[int]] = {}  # partition -> offsets of events sent here
        self._progress = asyncio.Event()  # pulsed each time the reader moves on
        self._reset: dict[Any, float] = {}  # partition -> when it was last read from 0 again
        self._unserved: dict[Any, int] = {}  # partition -> an end listed that fetches stop short of
        self._resting = False  # the worker rests: nothing fetched but to catch up for a start
        self._catching_up = 0  # read_to_end calls under way
        self._live = asyncio.Event()  # fetched now (set: not resting, or catching up)
        self._live.set()

    async def start(self) -> None:
        from aiokafka import TopicPartition

        await self.consumer.topics()
        parts = self.consumer.partitions_for_topic(m.EVENTS_TOPIC) or range(m.DEFAULT_PARTITIONS)
        self.tps = [TopicPartition(m.EVENTS_TOPIC, p) for p in sorted(parts)]
        self.consumer.assign(self.tps)
        since = int((time.time() - LOOKBACK_S) * 1000)
        try:
            found = await self.consumer.offsets_for_times(dict.fromkeys(self.tps, since))
        except Exception:
            found = {}
        for tp in self.tps:
            hit = found.get(tp)
            if hit is not None and hit.timestamp >= 0:
                self.consumer.seek(tp, hit.offset)
            elif tp in found:  # nothing that recent (Tansu says timestamp -1): the end
                await self.consumer.seek_to_end(tp)
            else:  # times refused: all of it
                await self.consumer.seek_to_beginning(tp)

    def sent(self, partition: int, offset: int) -> None:
        """An event this worker sent: known here already, never worth waiting for."""
        self._own.setdefault(partition, set()).add(offset)

    def rest(self, resting: bool) -> None:
        """At rest (True) the view is not fetched, but while a start catches it up."""
        self._resting = resting
        self._follow()

    def _follow(self) -> None:
        live = not self._resting or self._catching_up > 0
        if live == self._live.is_set():
            return
        if live:
            self.consumer.resume(*self.tps)
            self._live.set()
        else:
            self._live.clear()
            self.consumer.pause(*self.tps)

    async def read(self) -> None:
        """Forever: note transitions and outcomes (malformed events are the engine's to log)."""
        while True:
            await self._live.wait()
            try:
                batch = await self.consumer.getmany(timeout_ms=500)
            except Exception as exc:
                log.debug("reading events failed: %s", exc)
                await asyncio.sleep(0.5)
                continue
            for tp, records in batch.items():
                for record in records:
                    if self.keyring.check(tp.topic, record.key, record.value, record.headers):
                        continue  # forged: the engine counts it, every worker ignores it
                    try:
                        event = m.RunEvent.decode(record.value)
                    except m.BadMessage:
                        continue
                    if event.type == RUN_TRANSITION:
                        if event.command_id not in self.started_by:
                            self.started_by.put(event.command_id, event.worker)
                            origin = event.payload.get("record")
                            if isinstance(origin, str):
                                self.origin.put(event.command_id, origin)
                    else:
                        self.finished.put(event.command_id, None)
                own = self._own.get(tp.partition)
                if own and records:
                    done = records[-1].offset
                    self._own[tp.partition] = {o for o in own if o > done}
            progress, self._progress = self._progress, asyncio.Event()
            progress.set()

    async def _behind(self, ends: dict[Any, int], answers: dict[Any, Answers]) -> str | None:
        """Where the reader is behind the given ends ("partition P at X of Y"), or None.
        Every partition is looked at each time, so that each one's fetch answers count."""
        behind = None
        past: dict[Any, int] = {}  # partition -> a position past its listed end
        for tp, end in ends.items():
            with contextlib.suppress(Exception):
                position = await self.consumer.position(tp)
                if position >= end:
                    if position > end:
                        past[tp] = position
                    continue
                if self._served_to(tp, answers[tp]) <= position:
                    self._unservable(tp, position, end)
                    continue
                own = self._own.get(tp.partition, set())
                if end - position > OWN_SPAN or any(o not in own for o in range(position, end)):
                    behind = behind or f"partition {tp.partition} at {position} of {end}"
        if past:
            with contextlib.suppress(Exception):
                return await self._shorter(past) or behind
        return behind

    def _answers_now(self, tp: Any) -> Answers:
        try:
            leader = self.consumer._client.cluster.leader_for_partition(tp)
            return Answers(leader, self.consumer.last_poll_timestamp(tp))
        except Exception:
            return Answers(None, None, gone=True)

    def _served_to(self, tp: Any, answers: Answers) -> int:
        """The end the broker's fetch answers give, once one asked for after the ends were
        listed has come (else a large number). The consumer has one fetch in flight per
        broker: the second answer seen since the ends came was asked for after the first
        had come. Not while the partition's leader moved since (two brokers' fetches)."""
        now = self._answers_now(tp)
        if now.gone or now.leader != answers.leader:
            answers.gone = True
        elif now.stamp != answers.stamp:
            answers.stamp = now.stamp
            answers.seen += 1
        served = self.consumer.highwater(tp)
        if answers.gone or answers.seen < 2 or served is None:
            return 1 << 62
        return served

    def _unservable(self, tp: Any, position: int, end: int) -> None:
        """Tansu lists in a partition's end the records sent to it while it did not exist
        (a producer's retry across a restart), and no fetch ever returns them: after the
        broker has said twice that nothing is past the reader, nothing more can be read."""
        if self._unserved.get(tp) != end:
            self._unserved[tp] = end
            where = f"{tp.topic}[{tp.partition}]"
            log.info("%s lists %d records no fetch returns past %d: read to its end", where,
                     end - position, position)  # fmt: skip

    def topic_is_new(self) -> None:
        """The broker restarted empty: read every partition from 0 again."""
        for tp in self.tps:
            with contextlib.suppress(Exception):
                self.consumer.seek(tp, 0)
            self._reset[tp] = time.monotonic()
        self._own.clear()

    async def _shorter(self, past: dict[Any, int]) -> str | None:
        """Read past the listed end (partition -> position): fine if the topic grew since,
        but an end below the position read before it means a new topic (the broker
        restarted empty): read it from 0. What was found, or None."""
        fresh = await self.probe.end_offsets(list(past))
        for tp, position in past.items():
            end = fresh[tp]
            # Tansu's end can stay one below what a fetch has returned: a gap of one is no sign
            if end + 1 >= position or time.monotonic() - self._reset.get(tp, -60.0) < 10:
                continue
            self._reset[tp] = time.monotonic()
            where = f"{tp.topic}[{tp.partition}]"
            log.info("%s is new (end %d < %d): read from 0", where, end, position)
            self.consumer.seek(tp, 0)
            self._own.pop(tp.partition, None)
            self.on_new()
            return f"partition {tp.partition} at {position} past its end {end}"
        return None

    async def read_to_end(self) -> bool:
        """Wait until the topic is read up to its end as of now; False if that is unknown."""
        self._catching_up += 1
        self._follow()
        try:
            return await self._read_to_end()
        finally:
            self._catching_up -= 1
            self._follow()

    async def _read_to_end(self) -> bool:
        try:
            ends = await asyncio.wait_for(self.probe.end_offsets(self.tps), 3)
        except Exception as exc:
            log.warning("cannot read the end of %s: %s", m.EVENTS_TOPIC, exc)
            return False
        answers = {tp: self._answers_now(tp) for tp in self.tps}
        deadline = time.monotonic() + CHECK_WAIT_S
        while True:
            progress = self._progress
            behind = await self._behind(ends, answers)
            if behind is None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "the events topic was not read to its end within %ss (%s)", CHECK_WAIT_S, behind
                )
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(progress.wait(), left)
