"""Sequence numbers reserved in blocks: never handed out twice, also across a crash."""

from __future__ import annotations

import asyncio

from tickui.sequence import SequenceAllocator, SequenceStoreError, SqliteSequenceStore
from tickui.store import Store


class FakeStore:
    name = "fake"

    def __init__(self) -> None:
        self.value: dict[str, int] = {}
        self.down = False
        self.calls = 0

    async def reserve(self, key: str, floor: int, block: int) -> int:
        self.calls += 1
        if self.down:
            raise SequenceStoreError("fake store is down")
        self.value[key] = max(self.value.get(key, 0), floor) + block
        return self.value[key]

    async def release(self, key: str, expected: int, value: int) -> None:
        if self.value.get(key) == expected:
            self.value[key] = value

    async def close(self) -> None:
        return None


async def _settle(alloc: SequenceAllocator) -> None:
    for _ in range(3):
        await asyncio.sleep(0)
        if alloc._refill is not None:
            await alloc._refill


async def _take(alloc: SequenceAllocator, n: int, mono: float = 0.0) -> list[int]:
    got = []
    for _ in range(n):
        got.append(alloc.next(mono))
        await _settle(alloc)
    return got


async def test_numbers_increase_and_are_always_covered_by_the_store():
    store = FakeStore()
    alloc = SequenceAllocator(store, "k", 10)
    await alloc.start(0.0)
    got = []
    for _ in range(55):
        got.append(alloc.next(0.0))
        await _settle(alloc)
        assert store.value["k"] >= got[-1]
    assert got == list(range(1, 56))
    assert store.calls <= 12  # blocks, not one write per number


async def test_a_crash_restarts_above_every_number_handed_out():
    store = FakeStore()
    first = SequenceAllocator(store, "k", 10)
    await first.start(0.0)
    before = await _take(first, 23)
    second = SequenceAllocator(store, "k", 10)  # the first one vanished without close()
    await second.start(0.0)
    after = await _take(second, 5)
    assert min(after) > max(before)


async def test_a_clean_stop_gives_back_the_unused_block():
    store = FakeStore()
    alloc = SequenceAllocator(store, "k", 100)
    await alloc.start(0.0)
    await _take(alloc, 7)
    await alloc.close()
    assert store.value["k"] == 7
    again = SequenceAllocator(store, "k", 100)
    await again.start(0.0)
    assert again.next(0.0) == 8


async def test_a_dead_store_means_counting_in_memory_with_backoff_then_resuming():
    store = FakeStore()
    alloc = SequenceAllocator(store, "k", 4)
    await alloc.start(0.0)
    await _take(alloc, 2)
    store.down = True
    store.value.clear()  # and it comes back empty, like a Redis without persistence
    numbers = await _take(alloc, 10, mono=0.0)
    assert numbers == list(range(3, 13))
    assert alloc.state == "unreachable" and "down" in alloc.error
    calls = store.calls
    await _take(alloc, 5, mono=0.1)  # within the backoff: no new attempt
    assert store.calls == calls
    store.down = False
    more = await _take(alloc, 3, mono=100.0)
    assert alloc.state == "ok"
    assert more[0] == 18 and more == sorted(set(more))
    assert store.value["k"] >= max(more)


async def test_the_sqlite_store_survives_a_crash(tmp_path):
    db = await Store.open(tmp_path / "t.db")
    try:
        first = SequenceAllocator(SqliteSequenceStore(db), "ticks", 10)
        await first.start(0.0)
        before = await _take(first, 15)
        second = SequenceAllocator(SqliteSequenceStore(db), "ticks", 10)
        await second.start(0.0)
        after = await _take(second, 3)
        assert min(after) > max(before)
        stored = (await db._one("SELECT value FROM sequences WHERE key = 'ticks'"))[0]
        assert stored >= max(after)
    finally:
        await db.close()
