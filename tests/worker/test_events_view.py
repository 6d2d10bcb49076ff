"""A worker's view of the events topic (tickui/worker/events_view.py) against Tansu: at
rest it is not fetched at all, yet a start still reads it to its end, so a
command another worker started meanwhile is known before this one would start it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from services import private_tansu
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
    async with _viewing(kafka_bootstrap) as (view, producer, _):
        consumer = view.consumer
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


async def test_a_partition_whose_listed_end_no_fetch_reaches_is_read_to_its_end(caplog):
    """Records sent while a restarted Tansu makes the topic again are acknowledged and
    counted in a partition's listed end, but never returned by a fetch (nor, at times,
    some sent to the same partition after it). The view trusts the end the fetches give,
    once two asked for after the ends were listed say so: a start is not held up for
    ever, and every record a reader can fetch is read."""
    with private_tansu() as broker:
        access = KafkaAccess.of(broker.bootstrap)
        async with _viewing(broker.bootstrap) as (view, producer, common):
            probe = view.probe
            broker.restart()  # empty; the producer still knows the topic's 12 partitions
            sent = [f"ev-{uuid.uuid4().hex[:12]}" for _ in range(24)]

            async def send(i: int, command_id: str) -> None:
                value = transition(command_id, "other").encode()
                with contextlib.suppress(Exception):  # some may be refused
                    await asyncio.wait_for(
                        producer.send_and_wait(m.EVENTS_TOPIC, value, partition=i % 12), 3
                    )

            # sent before the topic is made again (the producer goes by what it knew)
            await asyncio.gather(*(send(i, command_id) for i, command_id in enumerate(sent)))
            await create_topics(access, {m.EVENTS_TOPIC: 12}, 3000)
            # once it is made, more than those on partitions 0 to 3 (the rest: none)
            after = [f"ev-{uuid.uuid4().hex[:12]}" for _ in range(12)]
            await asyncio.gather(*(send(i % 4, command_id) for i, command_id in enumerate(after)))
            view.topic_is_new()
            await _answering(probe, view.tps)
            with caplog.at_level(logging.INFO, logger="tickui.worker"):
                assert await view.read_to_end()
            unserved = [r.getMessage() for r in caplog.records if "no fetch returns" in r.message]
            assert unserved, "every partition's listed end was reached: nothing was tested"
            readable = await _fetchable(common, sent + after)
            assert readable, "no record can be fetched: nothing was tested"
            missed = [c for c in readable if c not in view.started_by]
            assert missed == [], f"records a reader fetches that the view did not read: {missed}"


@contextlib.asynccontextmanager
async def _viewing(bootstrap: str):
    """A started view of a 12-partition events topic, reading, and a producer; with the
    options its clients share."""
    await create_topics(KafkaAccess.of(bootstrap), {m.EVENTS_TOPIC: 12}, 3000)
    common = {"bootstrap_servers": bootstrap, "enable_auto_commit": False,
              "request_timeout_ms": 3000}  # fmt: skip
    consumer = AIOKafkaConsumer(**common, auto_offset_reset="earliest", fetch_max_wait_ms=10)
    probe = AIOKafkaConsumer(**common)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=3000)
    for client in (consumer, probe, producer):
        await client.start()
    view = EventsView(consumer, probe, lambda: None, Keyring())
    reader: asyncio.Task[None] | None = None
    try:
        await view.start()
        reader = asyncio.create_task(view.read())
        assert await view.read_to_end()
        yield view, producer, common
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        for client in (consumer, probe, producer):
            await client.stop()


async def _answering(probe: AIOKafkaConsumer, tps: list) -> None:
    """Once the restarted broker lists the ends (the first ask may wait out a timeout)."""
    for _ in range(10):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(probe.end_offsets(tps), 3)
            return
    raise AssertionError("the restarted broker never listed the topic's ends")


async def _fetchable(common: dict, wanted: list[str]) -> set[str]:
    """The command ids of `wanted` a new reader fetches from the whole topic in 3 s."""
    reader = AIOKafkaConsumer(**common, auto_offset_reset="earliest")
    await reader.start()
    try:
        tps = [TopicPartition(m.EVENTS_TOPIC, p) for p in range(12)]
        reader.assign(tps)
        await reader.seek_to_beginning(*tps)
        found: set[str] = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            for records in (await reader.getmany(timeout_ms=200)).values():
                found.update(m.RunEvent.decode(r.value).command_id for r in records)
        return found & set(wanted)
    finally:
        await reader.stop()
