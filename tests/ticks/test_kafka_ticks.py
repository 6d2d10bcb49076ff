"""Ticks on a real Kafka-compatible broker (Tansu): the contract, an outage, kill -9."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import services
from helpers import cli
from tickui.common.clock import SystemClock
from tickui.common.kafka import KafkaAccess, create_topics
from tickui.common.timeutil import MICROS
from tickui.dispatch import SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.ticks.bus import KafkaBus
from tickui.ticks.config import TickerConfig
from tickui.ticks.sequence import SequenceAllocator
from tickui.ticks.ticker import RuntimeScheduler
from tickui.ticks.wire import DEFAULT_TOPIC, ENVELOPE_KEYS, HEADER_NAMES


async def _consume(bootstrap: str, topic: str, want: int, timeout: float = 15.0) -> list:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=5000,
        # a topic made after the start shows only on a refresh (by default every 5 min)
        metadata_max_age_ms=500,
    )
    await consumer.start()
    records = []
    try:
        deadline = time.monotonic() + timeout
        found = None
        while not found and time.monotonic() < deadline:
            await consumer.topics()
            found = consumer.partitions_for_topic(topic)
            if not found:
                await asyncio.sleep(0.2)
        # After a broker restart the topic may have been auto-created with more partitions.
        parts = [TopicPartition(topic, p) for p in sorted(found or [0])]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        while len(records) < want and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                records.extend(batch)
    finally:
        await asyncio.wait_for(consumer.stop(), 5)
    return records


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _ticker(bootstrap: str, topic: str) -> tuple[RuntimeScheduler, KafkaBus]:
    config = TickerConfig(
        interval_ms=100,
        breaker_threshold=3,
        breaker_reset_s=2,
        publish_timeout_s=0.5,
        topic=topic,
        scheduler_id="kafka-test",
    )
    bus = KafkaBus(bootstrap, request_timeout=0.5)
    ticker = RuntimeScheduler(
        config, SystemClock(), bus, SequenceAllocator(None, "k", 10), align=False
    )
    return ticker, bus


async def test_ticks_arrive_with_json_key_and_headers(kafka_bootstrap):
    topic = f"ticks.{uuid.uuid4().hex[:8]}"
    ticker, _ = _ticker(kafka_bootstrap, topic)
    await ticker.start()
    await _until(lambda: ticker.metrics().ticks_published >= 10, 15, "10 published ticks")
    await ticker.stop()
    records = await _consume(kafka_bootstrap, topic, 10)
    assert len(records) >= 10
    bodies = [json.loads(r.value) for r in records]
    assert all(r.key == b"kafka-test" for r in records)
    assert set(bodies[0]) == {
        "now",
        "tick_id",
        "sequence_number",
        "scheduled_at",
        "correlation_id",
        "scheduler_id",
        "tick_interval_ms",
    }
    assert [name for name, _ in records[0].headers] == list(HEADER_NAMES)  # ONEX's ten, in order
    headers = dict(records[0].headers)
    assert headers["event_type"] == b"runtime.tick.v1"
    assert headers["message_id"] == bodies[0]["tick_id"].encode()
    assert headers["correlation_id"] == bodies[0]["correlation_id"].encode()
    assert headers["source"] == b"runtime-scheduler.kafka-test" and headers["timestamp"]
    assert headers["content_type"] == b"application/json" and headers["max_retries"] == b"3"
    assert bodies[0]["now"].endswith("Z") and bodies[0]["scheduled_at"].endswith("Z")
    numbers = [b["sequence_number"] for b in bodies]
    assert numbers == sorted(set(numbers)), "sequence not strictly increasing"


async def test_broker_outage_breaker_cycle_while_the_engine_stays_on_time(tmp_path):
    store = await Store.open(tmp_path / "t.db")
    clock = SystemClock()
    engine = SchedulerEngine(
        store, SubprocessDispatcher(store, clock), clock, EngineConfig(tick_period=100_000)
    )
    spec = build_spec({"name": "beat", "every": "1s", "command": ["true"]}, clock.now())
    await store.add_task(spec, clock.now())
    topic = "ticks.outage"
    with services.private_tansu() as broker:
        ticker, bus = _ticker(broker.bootstrap, topic)

        async def scan(tick) -> None:
            await engine.tick(tick.now)

        ticker.subscribe(scan)
        await engine.start()
        await ticker.start()
        began = clock.now()
        try:
            await _until(lambda: ticker.metrics().ticks_published >= 5, 15, "first publishes")
            broker.kill()
            await _until(lambda: ticker.breaker.state == "OPEN", 15, "the breaker to open")
            attempts = bus.attempts
            # up to 1 s of the open breaker, ending before it may try again (it opened a
            # little before this test saw it, by however busy the machine is)
            retry_in = ticker.metrics().breaker_retry_in_s or 0.0
            await asyncio.sleep(max(0.0, min(1.0, retry_in - 0.3)))
            assert ticker.breaker.state == "OPEN"
            assert bus.attempts == attempts, "a publish was attempted while the breaker was open"
            broker.restart()
            await _until(lambda: ticker.breaker.state == "CLOSED", 20, "the breaker to close")
            published = ticker.metrics().ticks_published
            await _until(
                lambda: ticker.metrics().ticks_published >= published + 5,
                10,
                "publishing to resume",
            )
        finally:
            await ticker.stop()
            elapsed_s = (clock.now() - began) // MICROS
            await engine.stop(grace=2)
            runs = await store.history("beat", limit=100)
            await store.close()  # an open store's thread would keep pytest from exiting
        moves = [(t["from"], t["to"]) for t in ticker.metrics().transitions]
        assert ("CLOSED", "OPEN") in moves and ("OPEN", "HALF_OPEN") in moves
        assert moves[-1] == ("HALF_OPEN", "CLOSED")
        assert len(await _consume(broker.bootstrap, topic, 5)) >= 5, "nothing after the restart"
    # Every whole second of the outage cycle had its run, none skipped (the cycle itself
    # takes 3 to 6 s, depending on how soon the broker answers again).
    slots = sorted(o.scheduled_for for o in runs)
    assert len(runs) >= max(2, elapsed_s - 1), (len(runs), elapsed_s)
    assert all(b - a == MICROS for a, b in itertools.pairwise(slots)), slots
    assert {o.state for o in runs} == {"succeeded"}
    assert all(o.missed == 0 for o in runs)
    assert all(o.started_at - o.scheduled_for < 1.5 * MICROS for o in runs)


def _spawn_run(db, bootstrap, topic, *extra) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tickui",
            "--db",
            str(db),
            "run",
            "--kafka",
            bootstrap,
            "--topic",
            topic,
            "--tick-interval",
            "100ms",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_kill_9_restart_never_repeats_and_tickui_ticks_flags_the_gap(tmp_path, kafka_bootstrap):
    db = tmp_path / "t.db"
    topic = f"ticks.{uuid.uuid4().hex[:8]}"
    first = _spawn_run(db, kafka_bootstrap, topic)
    try:  # killed once it has published (on a loaded machine its start can take seconds)
        before = asyncio.run(_consume(kafka_bootstrap, topic, 15, timeout=30))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert len(before) >= 15, f"the first engine published {len(before)} ticks in 30 s"
    second = _spawn_run(db, kafka_bootstrap, topic, "--for", "2")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    final = json.loads(err.strip().splitlines()[-1])["ticker"]
    assert final["sequence_store"] == "sqlite" and final["ticks_failed"] == 0
    records = asyncio.run(_consume(kafka_bootstrap, topic, 30))
    numbers = [json.loads(r.value)["sequence_number"] for r in records]
    assert len(numbers) >= 30
    assert numbers == sorted(set(numbers)), "a number repeated or went down after kill -9"

    tail = cli(
        "ticks",
        "--kafka",
        kafka_bootstrap,
        "--topic",
        topic,
        "--json",
        "--from-beginning",
        "--count",
        str(len(numbers)),
        "--for",
        "20",
    )
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [x["tick"]["sequence_number"] for x in lines] == numbers
    assert [x["flag"] for x in lines].count("gap") == 1  # the reserved block lost in the crash
    assert "restart" not in [x["flag"] for x in lines]


def test_tickui_ticks_flags_a_sequence_that_goes_down(kafka_bootstrap):
    from aiokafka import AIOKafkaProducer

    topic = f"ticks.{uuid.uuid4().hex[:8]}"

    async def produce() -> None:
        await create_topics(KafkaAccess.of(kafka_bootstrap), {topic: 1}, 3000)
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
        )
        await producer.start()
        try:
            for seq in (5, 6, 7, 2, 3):
                body = {
                    "now": "2026-12-02T00:00:00+00:00",
                    "sequence_number": seq,
                    "scheduler_id": "other",
                }
                await producer.send_and_wait(topic, json.dumps(body).encode(), key=b"other")
        finally:
            await producer.stop()

    asyncio.run(produce())
    tail = cli(
        "ticks",
        "--kafka",
        kafka_bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--count",
        "5",
        "--for",
        "20",
    )
    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    assert len(lines) == 5
    assert "RESTART" in lines[3] and "RESTART" not in "".join(lines[:3] + lines[4:])


def test_tickui_ticks_with_a_dead_broker_is_one_line_and_exit_1():
    port = services.free_port()
    result = cli("ticks", "--kafka", f"127.0.0.1:{port}", "--for", "2", timeout=60)
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "not reachable" in result.stderr


# ---- wire formats ------------------------------------------------------------------


def test_run_with_envelope_wire_publishes_onex_envelopes_that_tickui_ticks_reads(
    tmp_path, kafka_bootstrap
):
    scheduler = f"env-{uuid.uuid4().hex[:8]}"
    run = cli(
        "run", "--kafka", kafka_bootstrap, "--wire", "envelope", "--tick-interval", "100ms",
        "--for", "1.5", db=tmp_path / "t.db", cwd=tmp_path, env={"TICKUI_SCHEDULER_ID": scheduler},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    final = json.loads(run.stderr.strip().splitlines()[-1])["ticker"]
    published = final.get("ticks_published", final.get("ticks_emitted"))
    topic = DEFAULT_TOPIC["envelope"]  # no --topic: the wire's default
    records = asyncio.run(_consume(kafka_bootstrap, topic, published))
    mine = [r for r in records if r.key == scheduler.encode()]
    assert len(mine) >= 5, (len(records), run.stderr)
    for record in mine:
        body = json.loads(record.value)
        assert list(body) == list(ENVELOPE_KEYS)
        assert body["event_type"] == "platform.runtime-tick"
        assert body["source_tool"] == f"runtime-scheduler.{scheduler}"
        assert body["payload"]["scheduler_id"] == scheduler
        assert body["payload"]["tick_interval_ms"] == 100
        headers = dict(record.headers)
        assert [name for name, _ in record.headers] == list(HEADER_NAMES)
        assert headers["message_id"] == body["envelope_id"].encode()
        assert headers["event_type"] == topic.encode()
        assert headers["source"] == f"runtime-scheduler.{scheduler}".encode()
    numbers = [json.loads(r.value)["payload"]["sequence_number"] for r in mine]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))

    for as_json in (True, False):
        tail = cli(
            "ticks", "--kafka", kafka_bootstrap, "--wire", "envelope", "--from-beginning",
            "--count", str(len(records)), "--for", "20", *(["--json"] if as_json else []),
        )  # fmt: skip
        assert tail.returncode == 0, tail.stderr
        lines = tail.stdout.splitlines()
        if as_json:
            seen = [json.loads(line) for line in lines]
            seen = [x for x in seen if x["tick"]["scheduler_id"] == scheduler]
            assert [x["tick"]["sequence_number"] for x in seen] == numbers
            assert {x["format"] for x in seen} == {"envelope"}
            assert {x["flag"] for x in seen} == {None}
        else:
            seen = [line for line in lines if f" {scheduler} " in line]
            assert len(seen) == len(numbers)
            assert all("format=envelope" in line for line in seen)
            assert not any("RESTART" in line or "GAP" in line for line in seen)
            assert f"seq={numbers[0]} " in seen[0]


def _bare(scheduler: str, seq: int) -> bytes:
    """A bare tick as ONEX 0.38.6 publishes it (compact pydantic JSON, Z times)."""
    return json.dumps(
        {
            "now": f"2026-12-03T15:03:5{seq % 10}.621354Z",
            "tick_id": str(uuid.uuid4()),
            "sequence_number": seq,
            "scheduled_at": f"2026-12-03T15:03:5{seq % 10}.621354Z",
            "correlation_id": str(uuid.uuid4()),
            "scheduler_id": scheduler,
            "tick_interval_ms": 200,
        },
        separators=(",", ":"),
    ).encode()


def _envelope(scheduler: str, seq: int) -> bytes:
    """An envelope as ONEX 0.38.76 publishes it: its whole key set, json.dumps spacing."""
    payload = json.loads(_bare(scheduler, seq))
    body = dict.fromkeys(ENVELOPE_KEYS)
    body.update(
        payload=payload,
        envelope_id=str(uuid.uuid4()),
        envelope_timestamp=payload["now"],
        correlation_id=payload["correlation_id"],
        source_tool=f"runtime-scheduler.{scheduler}",
        metadata={"headers": {}, "tags": {}},
        event_type="platform.runtime-tick",
        priority=5,
        retry_count=0,
        onex_version={"major": 1, "minor": 0, "patch": 0, "prerelease": None, "build": None},
        envelope_version={"major": 2, "minor": 3, "patch": 0, "prerelease": None, "build": None},
    )
    return json.dumps(body).encode()


def test_tickui_ticks_on_a_topic_with_both_formats_and_junk(kafka_bootstrap):
    from aiokafka import AIOKafkaProducer

    topic = f"ticks.{uuid.uuid4().hex[:8]}"
    messages = [
        _bare("a", 1),
        _bare("a", 2),
        _envelope("a", 3),  # the same scheduler switching format: no restart
        b"\xff not json",
        _envelope("a", 5),  # GAP 1
        b'{"payload": {"hello": 1}, "envelope_id": "x"}',  # an envelope, not of a tick
        _envelope("b", 1),  # another scheduler: its own numbering
        _bare("a", 1),  # RESTART
    ]

    async def produce() -> None:
        await create_topics(KafkaAccess.of(kafka_bootstrap), {topic: 1}, 3000)
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=False
        )
        await producer.start()
        try:
            for value in messages:
                await producer.send_and_wait(topic, value, key=b"k")
        finally:
            await producer.stop()

    asyncio.run(produce())
    args = ("ticks", "--kafka", kafka_bootstrap, "--topic", topic, "--from-beginning")
    text = cli(*args, "--count", "6", "--for", "20")
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == 8, text.stdout
    formats = [line.split("format=")[1].split()[0] for line in lines if "format=" in line]
    assert formats == ["bare", "bare", "envelope", "envelope", "envelope", "bare"]
    assert lines[3].startswith("not a tick (partition 0 offset 3): not JSON")
    assert lines[5].startswith("not a tick (partition 0 offset 5): an envelope whose payload")
    assert "GAP: 1 tick(s) missing" in lines[4]
    assert "RESTART" in lines[7] and "RESTART" not in "".join(lines[:7])
    assert "seq=1 b format=envelope" in lines[6]

    as_json = cli(*args, "--count", "6", "--for", "20", "--json")
    assert as_json.returncode == 0, as_json.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [r.get("format") for r in rows] == [
        "bare", "bare", "envelope", None, "envelope", None, "envelope", "bare"
    ]  # fmt: skip
    assert [r.get("flag") for r in rows] == [None, None, None, None, "gap", None, None, "restart"]
    assert rows[3]["error"].startswith("not a tick: not JSON")


def test_tickui_ticks_lines_stay_fast_and_short_for_a_huge_message():
    """Kafka takes 1 MB messages: a tick whose fields are huge (or carry a huge extra field)
    is shown bounded, in milliseconds, never redacted whole (that took hours)."""
    from tickui.ticks.tail import FIELD_MAX, _line
    from tickui.ticks.wire import decode

    huge = "x" * 900_000
    raw = json.dumps(
        {"now": huge, "sequence_number": 3, "scheduler_id": "s" + huge, "pad": huge}
    ).encode()
    tick = decode(raw)
    started = time.monotonic()
    text = _line(tick, None, 0, False)
    row = json.loads(_line(tick, "gap", 2, True))
    assert time.monotonic() - started < 2
    assert len(text) < 3 * FIELD_MAX and "seq=3" in text
    assert set(row["tick"]) == {"now", "sequence_number", "scheduler_id"}  # no `pad`
    assert len(row["tick"]["scheduler_id"]) == FIELD_MAX and row["tick"]["sequence_number"] == 3
    assert (row["flag"], row["missing"]) == ("gap", 2)


def test_tickui_ticks_json_cuts_each_field_to_256_characters():
    """README: in `tickui ticks --json`, each of the tick's fields is cut to 256
    characters (the 256th is the `…` that says so); a field of 256 is shown whole."""
    from tickui.ticks.tail import _line
    from tickui.ticks.wire import decode

    raw = json.dumps({"now": "n" * 256, "sequence_number": 3, "scheduler_id": "s" * 257}).encode()
    row = json.loads(_line(decode(raw), None, 0, True))
    assert row["tick"]["now"] == "n" * 256
    assert row["tick"]["scheduler_id"] == "s" * 255 + "…"
