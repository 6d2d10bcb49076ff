"""How responsive an event loop stays: standard library only, so that a benchmark side
running in another venv (APScheduler 4's) measures it the same way."""

from __future__ import annotations

import asyncio
import contextlib
import statistics


class LagProbe:
    """Measures how late a 5 ms sleep wakes up: the event loop's responsiveness."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(self.period)
            self.lags.append(max(0.0, loop.time() - start - self.period) * 1000)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def worst(self) -> float:
        return max(self.lags, default=0.0)

    def p99(self) -> float:
        if len(self.lags) < 2:
            return max(self.lags, default=0.0)
        return statistics.quantiles(self.lags, n=100, method="inclusive")[98]
