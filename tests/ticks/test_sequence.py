"""Sequence numbers reserved in blocks: never handed out twice, also across a crash."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tickui.store import Store
from tickui.ticks.sequence import SequenceAllocator, SequenceStoreError, SqliteSequenceStore


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


# ---- more: blocks, backoff, recovery, shutdown ------------------------------------------------


class CountingStore(FakeStore):
    """FakeStore that also records each reserve's mono-independent arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.reserves: list[tuple[int, int]] = []
        self.released: list[tuple[int, int]] = []
        self.closed = False

    async def reserve(self, key: str, floor: int, block: int) -> int:
        self.reserves.append((floor, block))
        return await super().reserve(key, floor, block)

    async def release(self, key: str, expected: int, value: int) -> None:
        self.released.append((expected, value))
        if self.down:
            raise SequenceStoreError("fake store is down")
        await super().release(key, expected, value)

    async def close(self) -> None:
        self.closed = True


async def test_start_reserves_a_whole_block_ahead():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 50)
    assert alloc.state == "starting"
    await alloc.start(0.0)
    assert store.value["k"] == 50 and alloc.reserved == 50
    assert alloc.state == "ok" and alloc.persisted
    assert store.reserves == [(0, 50)]
    # the first half of the block needs no store call at all
    got = [alloc.next(0.0) for _ in range(24)]
    await _settle(alloc)
    assert got == list(range(1, 25))
    assert len(store.reserves) == 1
    # running low (half a block left) reserves the next block in the background
    await _take(alloc, 1)
    assert len(store.reserves) == 2 and store.value["k"] == 100


async def test_numbers_strictly_increase_over_many_blocks():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 3)
    await alloc.start(0.0)
    got = []
    for _ in range(200):
        got.append(alloc.next(0.0))
        await _settle(alloc)
        assert store.value["k"] >= got[-1]  # every number handed out is covered
        assert alloc.persisted
    assert all(b == a + 1 for a, b in itertools.pairwise(got))


async def test_a_store_ahead_of_us_is_never_reused():
    store = CountingStore()
    store.value["k"] = 1000  # someone (a previous run) got that far
    alloc = SequenceAllocator(store, "k", 10)
    await alloc.start(0.0)
    assert alloc.next(0.0) == 1001


async def test_repeated_crashes_never_repeat_a_number():
    store = CountingStore()
    seen: list[int] = []
    for run in range(6):
        alloc = SequenceAllocator(store, "k", 8)
        await alloc.start(float(run))
        got = await _take(alloc, 3 + run * 5, mono=float(run))
        assert min(got) > max(seen, default=0)
        seen.extend(got)
        # no close(): the process was killed
    assert len(seen) == len(set(seen))


async def test_backoff_retries_only_when_due_and_doubles():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 2)
    await alloc.start(0.0)
    store.down = True
    calls = store.calls
    mono = 0.0
    attempts_at: list[float] = []
    while mono < 20.0:
        alloc.next(mono)
        await _settle(alloc)
        if store.calls != calls:
            attempts_at.append(mono)
            calls = store.calls
        mono = round(mono + 0.05, 2)
    assert alloc.state == "unreachable"
    assert "down" in (alloc.error or "")
    # first failure at 0.0, then retries after 0.5, 1, 2, 4, 8 s of backoff
    assert attempts_at == pytest.approx([0.0, 0.5, 1.5, 3.5, 7.5, 15.5])
    # counting never stopped
    assert alloc.current == 400  # one number per call, the whole time


async def test_backoff_is_capped_and_never_gives_up():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 2)
    await alloc.start(0.0)
    store.down = True
    calls = store.calls
    attempts_at: list[float] = []
    for mono in range(0, 400):  # one call a second for 400 s
        alloc.next(float(mono))
        await _settle(alloc)
        if store.calls != calls:
            attempts_at.append(float(mono))
            calls = store.calls
    gaps = [b - a for a, b in itertools.pairwise(attempts_at)]
    assert max(gaps) <= 30.0 + 1.0  # BACKOFF_MAX, plus the one-second call spacing
    assert attempts_at[-1] > 340  # still retrying at the end
    store.down = False
    later = await _take(alloc, 40, mono=500.0)
    assert alloc.state == "ok" and alloc.error is None
    assert store.value["k"] >= max(later)


async def test_a_dead_store_at_start_still_counts_from_one():
    store = CountingStore()
    store.down = True
    alloc = SequenceAllocator(store, "k", 10)
    await alloc.start(0.0)  # does not raise
    assert alloc.state == "unreachable"
    got = await _take(alloc, 5, mono=0.1)
    assert got == [1, 2, 3, 4, 5]
    assert not alloc.persisted  # handed out beyond any stored reservation


async def test_store_back_with_its_data_is_raised_above_the_current_number():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 10)
    await alloc.start(0.0)
    await _take(alloc, 3)
    assert store.value["k"] == 10
    store.down = True
    in_memory = await _take(alloc, 30, mono=0.0)
    assert in_memory == list(range(4, 34))
    assert store.value["k"] == 10  # behind what was handed out
    assert not alloc.persisted
    store.down = False
    after = await _take(alloc, 1, mono=10.0)
    assert after == [34]
    assert alloc.state == "ok" and alloc.persisted
    assert store.value["k"] > 34
    # and a crash now restarts above everything handed out
    fresh = SequenceAllocator(store, "k", 10)
    await fresh.start(11.0)
    assert fresh.next(11.0) > 34


async def test_store_back_empty_is_raised_above_the_current_number():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 10)
    await alloc.start(0.0)
    await _take(alloc, 3)
    store.down = True
    await _take(alloc, 20, mono=0.0)
    store.value.clear()  # came back without its data
    store.down = False
    current = alloc.current
    await _take(alloc, 1, mono=10.0)
    assert alloc.state == "ok"
    assert store.value["k"] >= current + 1 > 0
    assert store.value["k"] >= alloc.current
    fresh = SequenceAllocator(store, "k", 10)
    await fresh.start(11.0)
    assert fresh.next(11.0) > alloc.current


async def test_close_gives_back_the_unused_block_and_closes_the_store():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 100)
    await alloc.start(0.0)
    await _take(alloc, 12)
    await alloc.close()
    assert store.value["k"] == 12 == alloc.current
    assert store.released == [(100, 12)]
    assert store.closed
    again = SequenceAllocator(store, "k", 100)
    await again.start(1.0)
    assert await _take(again, 3, mono=1.0) == [13, 14, 15]


async def test_close_does_not_lower_a_value_someone_else_raised():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 100)
    await alloc.start(0.0)
    await _take(alloc, 5)
    store.value["k"] = 5000  # another instance reserved meanwhile
    await alloc.close()
    assert store.value["k"] == 5000


async def test_close_with_a_dead_store_does_not_raise_or_give_back():
    store = CountingStore()
    alloc = SequenceAllocator(store, "k", 100)
    await alloc.start(0.0)
    await _take(alloc, 5)
    store.down = True
    await _take(alloc, 50, mono=0.0)  # goes unreachable
    assert alloc.state == "unreachable"
    await alloc.close()
    assert store.value["k"] == 100  # nothing lowered: numbers above it were handed out
    assert store.closed


async def test_close_waits_for_a_reservation_in_flight():
    class SlowStore(CountingStore):
        async def reserve(self, key: str, floor: int, block: int) -> int:
            await asyncio.sleep(0.05)
            return await super().reserve(key, floor, block)

    store = SlowStore()
    alloc = SequenceAllocator(store, "k", 4)
    await alloc.start(0.0)
    alloc.next(0.0)
    alloc.next(0.0)  # low: a reservation starts in the background
    assert alloc._refill is not None and not alloc._refill.done()
    await alloc.close()
    assert alloc._refill.done()
    assert store.value["k"] == 2  # the refill landed, then the unused part was given back


async def test_without_a_store_it_just_counts():
    alloc = SequenceAllocator(None, "k", 10)
    assert alloc.state == "off"
    await alloc.start(0.0)
    assert [alloc.next(0.0) for _ in range(3)] == [1, 2, 3]
    assert alloc._refill is None and not alloc.persisted
    await alloc.close()


# ---- SQLite-backed store ---------------------------------------------------------------------


async def _stored(db: Store, key: str) -> int | None:
    row = await db._one("SELECT value FROM sequences WHERE key = ?", (key,))
    return None if row is None else row[0]


async def test_sqlite_reserve_and_release_semantics(tmp_path):
    db = await Store.open(tmp_path / "t.db")
    try:
        store = SqliteSequenceStore(db)
        assert await store.reserve("a", 0, 10) == 10
        assert await store.reserve("a", 0, 10) == 20  # max(stored, floor) + block
        assert await store.reserve("a", 100, 10) == 110  # the floor wins when higher
        assert await store.reserve("a", 5, 10) == 120  # the stored value wins when higher
        assert await store.reserve("b", 0, 3) == 3  # keys are independent
        await store.release("a", 999, 1)  # not the expected value: untouched
        assert await _stored(db, "a") == 120
        await store.release("a", 120, 101)
        assert await _stored(db, "a") == 101
    finally:
        await db.close()


async def test_sqlite_crash_restart_and_clean_stop_across_reopens(tmp_path):
    path = tmp_path / "t.db"
    handed: list[int] = []

    # run 1: killed (no close of the allocator; the file is simply reopened)
    db = await Store.open(path)
    first = SequenceAllocator(SqliteSequenceStore(db), "ticks", 10)
    await first.start(0.0)
    handed += await _take(first, 17)
    assert await _stored(db, "ticks") >= max(handed)
    await db.close()

    # run 2: starts above run 1, then stops cleanly
    db = await Store.open(path)
    second = SequenceAllocator(SqliteSequenceStore(db), "ticks", 10)
    await second.start(0.0)
    got = await _take(second, 4)
    assert min(got) > max(handed)
    handed += got
    await second.close()
    assert await _stored(db, "ticks") == second.current == max(handed)
    await db.close()

    # run 3: continues right after run 2
    db = await Store.open(path)
    try:
        third = SequenceAllocator(SqliteSequenceStore(db), "ticks", 10)
        await third.start(0.0)
        assert third.next(0.0) == max(handed) + 1
    finally:
        await db.close()


async def test_a_closed_sqlite_store_is_unreachable_not_a_crash(tmp_path):
    db = await Store.open(tmp_path / "t.db")
    alloc = SequenceAllocator(SqliteSequenceStore(db), "ticks", 4)
    await alloc.start(0.0)
    await db.close()
    got = await _take(alloc, 8, mono=0.0)
    assert got == list(range(1, 9))
    assert alloc.state == "unreachable" and (alloc.error or "").startswith("sqlite")
