"""A worker's producer: topics created when missing (again after any failure: a restarted
Tansu is empty) and an outbox for run events the broker cannot take now, sent in order
with backoff until they are taken."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from tickui.common.kafka import (
    KafkaAccess,
    create_topics,
    describe,
    quietly_stop,
    start_producer,
)
from tickui.dispatch import messages as m
from tickui.dispatch.signing import Keyring

log = logging.getLogger("tickui.worker")

SEND_TIMEOUT_S = 3.0


class Publisher:
    def __init__(
        self,
        access: str | KafkaAccess,
        keyring: Keyring,
        on_event_sent: Callable[[int, int], None],
        on_new_topics: Callable[[], None] = lambda: None,
    ) -> None:
        self.access = KafkaAccess.of(access)
        self.bootstrap = self.access.bootstrap
        self.keyring = keyring
        self.on_event_sent = on_event_sent  # (partition, offset) of each run event sent
        self.on_new_topics = on_new_topics  # the events topic had to be created again
        self._started = False
        self.producer: Any = None
        self.outbox: list[m.RunEvent] = []
        self.outage: str | None = None
        self.flusher: asyncio.Task[None] | None = None
        self._topics_ok = False
        self._gone = 0  # signs of an empty broker so far

    async def ensure_topics(self) -> None:
        """The four topics, made when missing (TimeoutError when no broker answers in 5 s)."""
        wanted = dict.fromkeys(m.TOPICS, m.DEFAULT_PARTITIONS)
        gone = self._gone
        made = await asyncio.wait_for(create_topics(self.access, wanted, 3000), 5)
        quiet = gone == self._gone  # else the broker came back empty again meanwhile
        if m.EVENTS_TOPIC in made and self._started:  # a broker that came back empty
            self.on_new_topics()  # (it lost events; the topics are there now)
        self._topics_ok = quiet
        self._started = True

    def topics_gone(self) -> None:
        """The broker came back empty: make the topics before the next send. A record sent
        to a topic that does not exist yet is kept by Tansu where fetches may never find it,
        while its end counts it."""
        self._topics_ok = False
        self._gone += 1

    async def start(self) -> None:
        # A send fails within a second of the broker going away: retried by aiokafka across
        # a restart, it would land before the topics are created again (Tansu then keeps it
        # where no consumer can read it); the outbox retries after creating them instead.
        self.producer = await start_producer(self.access, 1000)

    async def send(self, topic: str, key: str, value: bytes) -> Any:
        """Send, signed, and wait for the broker's acknowledgement (all replicas); raises on
        failure."""
        if not self._topics_ok:
            await self.ensure_topics()
        raw_key = key.encode()
        headers = self.keyring.seal(topic, raw_key, value) or None
        try:
            meta = await asyncio.wait_for(
                self.producer.send_and_wait(topic, value, key=raw_key, headers=headers),
                SEND_TIMEOUT_S,
            )
        except BaseException:
            self._topics_ok = False
            raise
        if topic == m.EVENTS_TOPIC:
            self.on_event_sent(meta.partition, meta.offset)
        return meta

    async def emit(self, event: m.RunEvent) -> None:
        """Publish a run event now, or keep it (in order) for the retrying sender."""
        if not self.outbox:
            try:
                await self.send(m.EVENTS_TOPIC, event.command_id, event.encode())
                return
            except Exception as exc:
                self.outage_began(exc)
        if event not in self.outbox:
            self.outbox.append(event)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.create_task(self._flush(), name="tickui-worker-outbox")

    def outage_began(self, exc: BaseException) -> None:
        if self.outage is None:
            self.outage = describe(exc)
            log.warning("cannot publish run events (%s); keeping them and retrying", self.outage)

    async def _flush(self) -> None:
        delay = 0.1
        while self.outbox:
            await asyncio.sleep(delay)
            event = self.outbox[0]
            try:
                await self.send(m.EVENTS_TOPIC, event.command_id, event.encode())
            except Exception as exc:
                self.outage_began(exc)
                delay = min(1.0, delay * 2)
                continue
            self.outbox.pop(0)
            delay = 0.0
        if self.outage is not None:
            log.warning("run events are published again")
            self.outage = None

    async def drain(self, grace: float) -> None:
        """Wait up to `grace` seconds for the outbox to be sent, then stop the producer."""
        if self.flusher is not None and not self.flusher.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.flusher), grace)
            except (TimeoutError, Exception):
                log.error(
                    "%d run event(s) could not be published (%s)", len(self.outbox), self.outage
                )

    async def stop(self) -> None:
        if self.flusher is not None:
            self.flusher.cancel()
        if self.producer is not None:
            await quietly_stop(self.producer)
