"""tickui makes its topics itself, with their partitions: no tickui client's request for a
topic's metadata makes the broker create it with its own default (Tansu 4 partitions)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from aiokafka import AIOKafkaConsumer

from tickui.common.kafka import KafkaAccess, create_topics, quietly_stop, start_producer


async def test_asking_for_a_missing_topic_does_not_make_it(kafka_bootstrap):
    access = KafkaAccess.of(kafka_bootstrap)
    topic = f"tickui.test.{uuid.uuid4().hex[:12]}"
    producer = await start_producer(access, 1000)
    reader = AIOKafkaConsumer(**access.options(), enable_auto_commit=False)
    await reader.start()
    try:
        with contextlib.suppress(Exception):  # a producer waits for a topic that is not there
            await asyncio.wait_for(producer.partitions_for(topic), 2)
        await reader._client.force_metadata_update()
        assert topic not in await reader.topics()

        assert await create_topics(access, {topic: 12}, 3000) == {topic}
        await reader._client.force_metadata_update()
        assert reader.partitions_for_topic(topic) == set(range(12))
    finally:
        await quietly_stop(producer)
        await reader.stop()
