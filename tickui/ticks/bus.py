"""Where ticks go beyond this process: nowhere, an in-memory bus, or Kafka."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from tickui.common.kafka import (
    KafkaAccess,
    TopicError,
    create_topics,
    describe,
    quietly_stop,
    start_producer,
)
from tickui.ticks.wire import kafka_headers

log = logging.getLogger("tickui.bus")
# A TickHeaders (or any object with ONEX ModelEventHeaders' attributes), or, for old
# callers, Kafka header tuples; None sends no headers.
Headers = Any


def to_kafka(headers: Headers) -> list[tuple[str, bytes]]:
    """Kafka header tuples from a headers object, a list of tuples or None."""
    if headers is None:
        return []
    if isinstance(headers, Sequence) and not isinstance(headers, (str, bytes)):
        return [(str(name), bytes(value)) for name, value in headers]
    kafka = getattr(headers, "kafka", None)
    return kafka() if callable(kafka) else kafka_headers(headers)


class PublishError(Exception):
    """A publish that did not reach the bus; the message names the cause, redacted."""


class EventBus(Protocol):
    name: str
    attempts: int  # publishes that reached the network layer: a fail-fast breaker adds none

    async def start(self) -> None: ...

    async def publish(self, topic: str, key: bytes, value: bytes, headers: Headers) -> None: ...

    async def stop(self) -> None: ...


class MemoryBus:
    """Keeps what is published in a list (headers as Kafka tuples, as a broker would
    hand them back); can be slowed down or made to fail."""

    name = "memory"

    def __init__(self, delay: float = 0.0, keep: int | None = None) -> None:
        self.delay = delay
        self.fail_with: str | None = None
        self.messages: deque[tuple[str, bytes, bytes, list[tuple[str, bytes]]]]
        self.messages = deque(maxlen=keep)
        self.attempts = 0

    async def start(self) -> None:
        return None

    async def publish(self, topic: str, key: bytes, value: bytes, headers: Headers) -> None:
        self.attempts += 1
        tuples = to_kafka(headers)
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail_with:
            raise PublishError(self.fail_with)
        self.messages.append((topic, key, value, tuples))

    async def stop(self) -> None:
        return None


class KafkaBus:
    """aiokafka producer with acks=all, short request timeouts and the topic made on demand.

    After any failure the topic is (re)created before the next publish: a broker that
    kept topics in memory comes back without them, and auto-creation would race.
    """

    name = "kafka"

    def __init__(
        self, access: str | KafkaAccess, request_timeout: float = 1.0, partitions: int = 1
    ) -> None:
        self.access = KafkaAccess.of(access)
        self.bootstrap = self.access.bootstrap
        self.request_timeout_ms = max(100, int(request_timeout * 1000))
        self.partitions = partitions
        self.attempts = 0
        self._producer = None
        self._topics_ready: set[str] = set()

    async def start(self) -> None:
        """Connect if the broker answers; if not, the first publish tries again."""
        try:
            await self._ensure_producer()
        except PublishError as exc:
            log.warning("kafka not reachable yet: %s", exc)

    async def _ensure_producer(self) -> None:
        if self._producer is not None:
            return
        try:
            self._producer = await start_producer(self.access, self.request_timeout_ms)
        except Exception as exc:
            raise PublishError(describe(exc, self.bootstrap)) from None

    async def _ensure_topic(self, topic: str) -> None:
        if topic in self._topics_ready:
            return
        try:
            await create_topics(self.access, {topic: self.partitions}, self.request_timeout_ms)
        except Exception as exc:
            said = str(exc) if isinstance(exc, TopicError) else describe(exc, self.bootstrap)
            raise PublishError(said) from None
        self._topics_ready.add(topic)

    async def publish(self, topic: str, key: bytes, value: bytes, headers: Headers) -> None:
        self.attempts += 1
        delivered = False
        try:
            tuples = to_kafka(headers)
            await self._ensure_producer()
            await self._ensure_topic(topic)
            assert self._producer is not None
            await self._producer.send_and_wait(topic, value, key=key, headers=tuples)
            delivered = True
        except PublishError:
            raise
        except Exception as exc:
            raise PublishError(describe(exc, self.bootstrap)) from None
        finally:
            if not delivered:  # failed, or cancelled by the caller's timeout
                self._topics_ready.discard(topic)

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await quietly_stop(producer)
