"""A broker that comes back empty (Tansu keeps topics in memory) starts each topic's
offsets at 0 again. An engine's reader whose positions in the old topic have been overtaken
by the new one's records must still read the new topic from its start: the records below
its old position are the runs' events the workers sent again (a run's start, its end)."""

from __future__ import annotations

import asyncio
import threading
import uuid

from helpers import wait_for
from services import private_tansu
from tickui.common.kafka import KafkaAccess, create_topics, quietly_stop, start_producer
from tickui.dispatch import kafka_feeds
from tickui.dispatch.kafka_feeds import Feed

OLD, NEW = 20, 25  # records on a partition before and after the restart


class Collecting(Feed):
    """A feed of one topic that keeps what it reads, from the end on at its start."""

    def __init__(self, topic: str, bootstrap: str) -> None:
        super().__init__(bootstrap)
        self.topic = topic
        self.taken: set[bytes] = set()
        self.told = 0
        self.restarted = self._told

    def _told(self) -> None:
        self.told += 1

    async def handle(self, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        self.taken.update(value for _, value in messages if value is not None)


async def _send(bootstrap: str, topic: str, partition: int, texts: list[str]) -> None:
    producer = await start_producer(KafkaAccess.of(bootstrap), 3000)
    try:
        sent = [await producer.send(topic, t.encode(), partition=partition) for t in texts]
        await asyncio.gather(*sent)
    finally:
        await quietly_stop(producer)


async def _waited(condition, what: str) -> None:
    await wait_for(condition, 20, what)


async def _restarted_with_partition_0_overtaken(broker, topic: str, feed: Collecting) -> None:
    """Before the restart OLD records on each of two partitions, read; after it NEW on
    partition 0 (more than OLD: the reader's position there names a record again), sent
    while this loop (and so the reader) is held, so that it reads on only after them."""
    access = KafkaAccess.of(broker.bootstrap)
    await create_topics(access, {topic: 2}, 3000)
    feed.start()
    await asyncio.wait_for(feed.caught_up.wait(), 20)
    for part in (0, 1):
        await _send(broker.bootstrap, topic, part, [f"old-{part}-{i}" for i in range(OLD)])
    await _waited(lambda: len(feed.taken) == 2 * OLD, "the old records read")

    async def restart() -> None:
        broker.restart()
        await create_topics(access, {topic: 2}, 3000)
        await _send(broker.bootstrap, topic, 0, [f"new-0-{i}" for i in range(NEW)])

    held = threading.Thread(target=asyncio.run, args=(restart(),))
    held.start()
    held.join(60)  # blocks this loop: the reader reads on only after it
    assert not held.is_alive()


async def test_one_partition_behind_makes_the_whole_topic_read_anew(monkeypatch) -> None:
    """Partition 1 is behind (empty) after the restart, partition 0 overtaken before the
    reader looked: both are read from 0, and the restart is said."""
    topic = f"feed-{uuid.uuid4().hex[:8]}"
    with private_tansu() as broker:
        feed = Collecting(topic, broker.bootstrap)
        try:
            monkeypatch.setattr(kafka_feeds, "CHECK_EVERY_S", 3600.0)  # not looking yet
            await _restarted_with_partition_0_overtaken(broker, topic, feed)
            await _waited(lambda: b"new-0-24" in feed.taken, "the newest record")
            assert feed.told == 0
            monkeypatch.setattr(kafka_feeds, "CHECK_EVERY_S", 0.0)
            new = {f"new-0-{i}".encode() for i in range(NEW)}
            await _waited(lambda: new <= feed.taken, f"all {NEW} new records: {feed.taken - new}")
            assert feed.told >= 1
        finally:
            await feed.stop()


async def test_a_feed_told_of_the_restart_reads_every_partition_anew() -> None:
    """Another reader saw the restart (the engine's heartbeats, say): this one, whose only
    partition with records was overtaken, reads it from 0 when told."""
    topic = f"feed-{uuid.uuid4().hex[:8]}"
    with private_tansu() as broker:
        feed = Collecting(topic, broker.bootstrap)
        try:
            await _restarted_with_partition_0_overtaken(broker, topic, feed)
            await _send(broker.bootstrap, topic, 1, [f"new-1-{i}" for i in range(OLD + 5)])
            await _waited(lambda: b"new-0-24" in feed.taken, "the newest record")
            feed.read_anew()
            new = {f"new-0-{i}".encode() for i in range(NEW)}
            await _waited(lambda: new <= feed.taken, f"all {NEW} new records: {feed.taken - new}")
        finally:
            await feed.stop()
