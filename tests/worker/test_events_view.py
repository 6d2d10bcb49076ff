"""A worker's view of the events topic (tickui/worker/events_view.py) against the shared
Tansu: at rest it is not fetched at all, yet a start still reads it to its end, so a
command another worker started meanwhile is known before this one would start it."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tickui.common.kafka import KafkaAccess, create_topics
from tickui.dispatch import messages as m
from tickui.dispatch.signing import Keyring
from tickui.model.occurrence import RUN_TRANSITION
from tickui.worker.events_view import EventsView


def transition(command_id: str, worker: str) -> m.RunEvent:
    return m.RunEvent(
        event_id=uuid.uuid4().hex,
        type=RUN_TRANSITION,
        command_id=command_id,
        run_id="r1",
        worker=worker,
        at=time.time_ns() // 1000,
        payload={"state": "running", "record": "0:7"},
    )


async def test_a_resting_view_is_not_fetched_and_is_read_to_its_end_for_a_start(
    kafka_bootstrap,
):
    await create_topics(KafkaAccess.of(kafka_bootstrap), {m.EVENTS_TOPIC: 12}, 3000)
    common = {"bootstrap_servers": kafka_bootstrap, "enable_auto_commit": False}
    consumer = AIOKafkaConsumer(**common, auto_offset_reset="earliest", fetch_max_wait_ms=10)
    probe = AIOKafkaConsumer(**common)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    for client in (consumer, probe, producer):
        await client.start()
    view = EventsView(consumer, probe, lambda: None, Keyring())
    reader: asyncio.Task[None] | None = None
    try:
        await view.start()
        reader = asyncio.create_task(view.read())
        assert await view.read_to_end()

        view.rest(True)
        assert consumer.paused() == set(view.tps)  # nothing of the topic is fetched
        first, second = f"ev-{uuid.uuid4().hex[:12]}", f"ev-{uuid.uuid4().hex[:12]}"
        await producer.send_and_wait(m.EVENTS_TOPIC, transition(first, "other").encode(),
                                     key=first.encode())  # fmt: skip

        assert await view.read_to_end()  # a start catches the resting view up
        assert view.started_by.get(first) == "other"
        assert view.origin.get(first) == "0:7"
        assert consumer.paused() == set(view.tps)  # and it rests again after

        view.rest(False)
        assert not consumer.paused()
        await producer.send_and_wait(m.EVENTS_TOPIC, transition(second, "third").encode(),
                                     key=second.encode())  # fmt: skip
        assert await view.read_to_end()
        assert view.started_by.get(second) == "third"
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        for client in (consumer, probe, producer):
            await client.stop()
