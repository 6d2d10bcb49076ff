"""The engine's connection to Kafka: one producer, its topics made when missing (again
after any failure: a restarted Tansu is empty), and what went wrong since when."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tickui.common.kafka import (
    KafkaAccess,
    TopicError,
    create_topics,
    describe,
    quietly_stop,
    start_producer,
)
from tickui.dispatch.messages import DEFAULT_PARTITIONS, RUNS_TOPIC, TOPICS
from tickui.dispatch.signing import Keyring

log = logging.getLogger("tickui.dispatch.kafka")


class LinkDown(Exception):
    """Kafka did not take a message; the text is one redacted line."""


class KafkaLink:
    """A producer (acks all, no idempotence: Tansu refuses it) and the four topics; every
    message goes out signed with the keyring's signing key."""

    def __init__(
        self,
        access: str | KafkaAccess,
        partitions: int = DEFAULT_PARTITIONS,
        request_timeout: float = 2.0,
        keyring: Keyring | None = None,
    ) -> None:
        self.access = KafkaAccess.of(access)
        self.bootstrap = self.access.bootstrap
        self.keyring = keyring or Keyring()
        self.partitions = partitions
        self.request_timeout_ms = max(500, int(request_timeout * 1000))
        self._producer = None
        self._topics_ready = False
        self._run_partitions: list[int] = []  # of the runs topic, as the broker has it
        self._lock = asyncio.Lock()
        self.down_since: float | None = None  # wall clock of the first failure
        self.error: str | None = None
        # Called when topics made before had to be made again: the broker came back empty.
        self.on_new_topics: Callable[[], None] | None = None
        self._made_before = False

    @property
    def problem(self) -> str | None:
        if self.down_since is None:
            return None
        since = time.strftime("%H:%M:%S", time.localtime(self.down_since))
        why = (self.error or "").removeprefix(f"kafka {self.bootstrap}: ")
        return f"kafka {self.bootstrap}: broker down since {since} ({why})"

    def _failed(self, exc: BaseException) -> LinkDown:
        text = describe(exc, self.bootstrap)
        if self.down_since is None:
            self.down_since = time.time()
            log.warning("%s (runs wait until it answers)", text)
        self.error = text
        self._topics_ready = False
        return LinkDown(text)

    def _ok(self) -> None:
        if self.down_since is not None:
            log.warning("kafka %s answers again", self.bootstrap)
        self.down_since = self.error = None

    def forget_topics(self) -> None:
        """The broker came back empty: make the topics again before the next send."""
        self._topics_ready = False

    async def ready(self) -> None:
        """Connect and make the topics if not done yet; LinkDown when the broker is down."""
        if self._producer is not None and self._topics_ready:
            return
        async with self._lock:
            try:
                if self._producer is None:
                    await self._start_producer()
                if not self._topics_ready:
                    await self._make_topics()
                    self._topics_ready = True
                    self._ok()
            except LinkDown:
                raise
            except Exception as exc:
                raise self._failed(exc) from None

    async def _start_producer(self) -> None:
        self._producer = await start_producer(self.access, self.request_timeout_ms)

    async def _make_topics(self) -> None:
        wanted = {t: self.partitions if t == RUNS_TOPIC else DEFAULT_PARTITIONS for t in TOPICS}
        try:
            made = await create_topics(self.access, wanted, self.request_timeout_ms)
        except TopicError as exc:
            raise LinkDown(str(exc)) from None
        if made and self._made_before and self.on_new_topics is not None:
            log.warning("kafka %s came back without its topics: made again", self.bootstrap)
            self.on_new_topics()
        self._made_before = True
        assert self._producer is not None
        found = await self._producer.partitions_for(RUNS_TOPIC)
        if not found:
            raise LinkDown(f"kafka {self.bootstrap}: {RUNS_TOPIC} has no partitions yet")
        self._run_partitions = sorted(found)

    def _partition(self, topic: str, key: bytes) -> int | None:
        """A run command's partition, chosen here (as the default partitioner would) so
        that its signature can name it; the other topics' messages go where the producer
        puts them."""
        if topic != RUNS_TOPIC:
            return None
        from aiokafka.partitioner import DefaultPartitioner

        return DefaultPartitioner.__call__(key, self._run_partitions, self._run_partitions)

    def run_partition(self, key: bytes) -> int | None:
        """The runs topic's partition a command keyed `key` goes to; None until the
        topic's partitions are known."""
        return self._partition(RUNS_TOPIC, key) if self._run_partitions else None

    async def send_all(self, messages: list[tuple[str, bytes, bytes]]) -> list[str | None]:
        """Send (topic, key, value) messages at once and wait for each; per message None
        (taken, acks all) or why not. The broker down: every one fails with LinkDown."""
        if not messages:
            return []
        await self.ready()
        assert self._producer is not None
        try:
            futures = []
            for topic, key, value in messages:
                partition = self._partition(topic, key)
                headers = self.keyring.seal(topic, key, value, partition) or None
                futures.append(
                    await self._producer.send(
                        topic, value, key=key, partition=partition, headers=headers
                    )
                )
        except Exception as exc:
            raise self._failed(exc) from None
        results = await asyncio.gather(*futures, return_exceptions=True)
        errors = [
            describe(r, self.bootstrap) if isinstance(r, BaseException) else None for r in results
        ]
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            self._failed(failed[0])
        else:
            self._ok()
        return errors

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await quietly_stop(producer)
