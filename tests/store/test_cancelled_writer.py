"""A writer cancelled while its statements are on the connection's thread (a stopping
engine cancels its tasks) leaves no transaction open for the next one."""

from __future__ import annotations

import asyncio

import pytest

from tickui.store import Store


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
async def test_a_writer_cancelled_mid_way_leaves_the_next_write_working(tmp_path, steps):
    store = await Store.open(tmp_path / "t.db")
    try:
        writer = asyncio.create_task(store.release_lease("someone", 1, 0))
        for _ in range(steps):  # cancelled at its BEGIN, its UPDATE or its COMMIT
            await asyncio.sleep(0)
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        await store.release_lease("someone", 1, 0)  # "cannot start a transaction" before
        assert await store.data_version() is not None
    finally:
        await store.close()
