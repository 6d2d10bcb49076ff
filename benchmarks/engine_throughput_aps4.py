"""engine_throughput.py's APScheduler 4 side on PostgreSQL, run with the python of a venv that
holds APScheduler 4 (engine_throughput_pg.aps4_python makes it): no tickui import here.

    python engine_throughput_aps4.py postgresql://user@host:port/bench_x 10000

An `AsyncScheduler` (its defaults: 100 concurrent jobs, the async executor) with a
`SQLAlchemyDataStore` over asyncpg on the given (fresh) database; N tasks, each a no-op
coroutine with a one-off schedule (DateTrigger at now), are added while the scheduler is not
running, then it is started and timed until all N jobs have run. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version

from apscheduler import AsyncScheduler
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.triggers.date import DateTrigger
from lagprobe import LagProbe  # benchmarks/lagprobe.py: the same probe as tickui's side
from sqlalchemy.ext.asyncio import create_async_engine

ran = 0


async def noop() -> None:
    global ran
    ran += 1


async def main(url: str, tasks: int) -> dict:
    engine = create_async_engine("postgresql+asyncpg://" + url.split("://", 1)[1])
    store = SQLAlchemyDataStore(engine)
    async with AsyncScheduler(store) as scheduler:
        now = datetime.now(UTC)
        added = time.perf_counter()
        for i in range(tasks):
            # A task per schedule, as tickui's 10,000 tasks: one task shared by all counts
            # its running jobs in one row that every acquire and release locks (3x slower).
            await scheduler.configure_task(f"job-{i:05d}", func=noop)
            await scheduler.add_schedule(f"job-{i:05d}", DateTrigger(now), id=f"job-{i:05d}")
        adding = time.perf_counter() - added
        probe = LagProbe()
        probe.start()
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        await scheduler.start_in_background()
        while ran < tasks:
            await asyncio.sleep(0.001)
        elapsed = time.perf_counter() - start
        await probe.stop()
        await scheduler.stop()
        await scheduler.wait_until_stopped()
    await engine.dispose()
    return {
        "jobs_per_s": tasks / elapsed,
        "seconds": elapsed,
        "adding_seconds": adding,
        "loop_lag_p99_ms": probe.p99(),
        "loop_lag_max_ms": max(probe.lags, default=0.0),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "apscheduler": version("apscheduler"),
        "sqlalchemy": version("sqlalchemy"),
        "asyncpg": version("asyncpg"),
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))))
