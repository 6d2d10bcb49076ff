"""Tick sequence numbers in a real Redis: kill and restart, continuity, secrets."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid

import services
from helpers import cli
from tickui.common.clock import SystemClock
from tickui.ticks.config import TickerConfig
from tickui.ticks.sequence import SequenceAllocator, ValkeySequenceStore
from tickui.ticks.ticker import RuntimeScheduler


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _stored(url: str, key: str) -> int:
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_timeout=1)
    try:
        return int(await client.get(key) or 0)
    finally:
        await client.aclose()


async def test_redis_killed_and_restarted_ticking_never_stops_nor_repeats():
    with services.private_redis() as redis:
        key = f"seq:{uuid.uuid4().hex[:6]}"
        store = ValkeySequenceStore(redis.url, timeout=0.3)
        ticker = RuntimeScheduler(
            TickerConfig(interval_ms=50, scheduler_id="valkey-test"),
            SystemClock(),
            None,
            SequenceAllocator(store, key, 10),
            align=False,
        )
        numbers: list[int] = []

        async def record(tick) -> None:
            numbers.append(tick.sequence_number)

        ticker.subscribe(record)
        await ticker.start()
        await _until(lambda: len(numbers) >= 10, 10, "first ticks")
        assert ticker.metrics().sequence_state == "ok"
        redis.kill()
        await _until(lambda: ticker.metrics().sequence_state == "unreachable", 10, "outage")
        during = len(numbers)
        await _until(lambda: len(numbers) >= during + 10, 10, "ticks while Redis is down")
        assert ticker.metrics().sequence_state == "unreachable"  # still down: ticking went on
        redis.restart()  # comes back empty: no persistence in tests
        await _until(lambda: ticker.metrics().sequence_state == "ok", 40, "reconnection")
        await _until(lambda: len(numbers) >= during + 40, 10, "more ticks")
        # a block is reserved ahead of the numbers handed out; its write may be on its way
        deadline = time.monotonic() + 10
        while await _stored(redis.url, key) < ticker.current_sequence_number:
            assert time.monotonic() < deadline, "persistence did not resume"
            await asyncio.sleep(0.05)
        await ticker.stop()
    assert numbers == sorted(set(numbers)), "a sequence number repeated"


def test_tickui_run_with_valkey_continues_the_sequence(tmp_path, redis_url):
    key = f"tickui:test:{uuid.uuid4().hex[:6]}"
    finals = []
    for _ in range(2):
        run = cli(
            "run",
            "--for",
            "1.5",
            "--valkey",
            redis_url,
            "--tick-interval",
            "100ms",
            db=tmp_path / "t.db",
            env={"TICKUI_SEQUENCE_KEY": key},
        )
        assert run.returncode == 0, run.stderr
        finals.append(json.loads(run.stderr.strip().splitlines()[-1])["ticker"])
    first, second = finals
    assert first["sequence_store"] == "valkey" and first["sequence_state"] == "ok"
    assert second["current_sequence"] > first["current_sequence"] >= 5
    stored = asyncio.run(_stored(redis_url, key))
    assert stored == second["current_sequence"]  # a clean stop gives the rest of the block back


async def test_a_password_in_the_url_never_shows(caplog):
    url = f"redis://user:s3cretpw@127.0.0.1:{services.free_port()}/0"
    alloc = SequenceAllocator(ValkeySequenceStore(url, timeout=0.2), "k", 10)
    with caplog.at_level(logging.DEBUG, logger="tickui"):
        await alloc.start(0.0)
    assert alloc.state == "unreachable"
    assert "s3cretpw" not in (alloc.error or "") and "***" in (alloc.error or "")
    assert "s3cretpw" not in caplog.text
    await alloc.close()


async def test_a_reservation_never_stores_below_its_floor(redis_url):
    """Redis lost or lowered the value (restart without persistence, a hand edit): the very
    next reservation must go on from the floor the ticker passes, not from what is stored."""
    from redis.asyncio import Redis

    key = f"tickui:test:floor:{uuid.uuid4().hex[:6]}"
    store = ValkeySequenceStore(redis_url, timeout=1)
    client = Redis.from_url(redis_url, socket_timeout=1)
    try:
        assert await store.reserve(key, 0, 10) == 10
        await client.delete(key)  # emptied
        assert await store.reserve(key, 25, 10) == 35
        assert await _stored(redis_url, key) == 35
        await client.set(key, 3)  # lowered
        assert await store.reserve(key, 50, 10) == 60
        await client.set(key, 100)  # ahead of the floor: the stored value wins
        assert await store.reserve(key, 50, 10) == 110
    finally:
        await client.delete(key)
        await client.aclose()
        await store.close()


async def test_after_the_value_is_lost_the_next_block_is_above_every_number_handed_out(
    redis_url,
):
    from redis.asyncio import Redis

    key = f"tickui:test:floor:{uuid.uuid4().hex[:6]}"
    alloc = SequenceAllocator(ValkeySequenceStore(redis_url, timeout=1), key, 10)
    client = Redis.from_url(redis_url, socket_timeout=1)
    try:
        await alloc.start(0.0)
        handed = [alloc.next(0.0) for _ in range(4)]  # 1..4: no refill due yet
        assert alloc.reserved == 10 and alloc._refill is None
        await client.delete(key)
        handed += [alloc.next(0.0) for _ in range(2)]  # 6: half the block used, refill starts
        assert alloc._refill is not None
        await alloc._refill
        stored = await _stored(redis_url, key)
        assert stored == 20, "the refill after the loss started from the stored 0, not from 10"
        assert alloc.reserved == 20 and alloc.next(0.0) == 7
    finally:
        await alloc.close()  # gives the unused numbers back: writes the key
        await client.delete(key)
        await client.aclose()
