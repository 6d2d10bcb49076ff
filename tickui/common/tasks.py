"""A background task a coroutine started and must not leave behind."""

from __future__ import annotations

import asyncio


async def outlive(task: asyncio.Task[object] | None) -> None:
    """Wait for `task` to end (a write under way ends before its starter does) and mark its
    error retrieved: its starter raised it already, or fails with an error of its own."""
    if task is None:
        return
    if not task.done():
        await asyncio.wait([task])
    if not task.cancelled():
        task.exception()
