"""How long a PostgreSQL store's read takes while writes are under way: on its read
connections, against the same reads made on the writer's connection (as when the store
had one connection), in the same run.

Another process's writer holds the write lock 50 ms a transaction, 10 ms apart (another
host's engine in a burst); this store's own writer loops on a one-row write, so it is
mostly waiting for that lock. Meanwhile `list_tasks()` (200 tasks) is timed, a read every
0 to 20 ms (at random: reads made back to back would mostly fall between the writes).
Idle: the same reads with no writer at all.

    PGPASSWORD=... .venv/bin/python benchmarks/pg_reads_during_writes.py \\
        --store postgresql://user@host:5432/postgres [--reads 100] [--rounds 3]

Without --store (nor TICKUI_STORE naming a server) it says it was skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_throughput_pg import fresh_database

from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.store.postgres import WRITE_LOCK

TASKS = 200
HELD_S, APART_S = 0.05, 0.01


async def _other_writer(url: str, stop: asyncio.Event) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
                await asyncio.sleep(HELD_S)
            await asyncio.sleep(APART_S)


async def _own_writer(store, stop: asyncio.Event) -> None:
    while not stop.is_set():
        async with store._write():
            await store._conn.execute("UPDATE tasks SET updated_at = updated_at WHERE id = 1")


async def _reads(store, count: int) -> list[float]:
    took = []
    pauses = random.Random(7)
    for _ in range(count):
        await asyncio.sleep(pauses.uniform(0, 0.02))
        started = time.perf_counter()
        await store.list_tasks()
        took.append((time.perf_counter() - started) * 1000)
    return took


async def _round(url: str, count: int) -> dict[str, list[float]]:
    store = await Store.open(url)
    try:
        if not await store.list_tasks():
            for n in range(TASKS):
                spec = build_spec({"name": f"t{n:03}", "every": "1m", "command": ["true"]}, 0)
                await store.add_task(spec, 0)
        pooled = store._readers.fetchall
        on_writer = store._conn.execute_fetchall  # every read on the one connection
        found: dict[str, list[float]] = {}
        for mode, reads in (("idle", pooled), ("pool", pooled), ("one connection", on_writer)):
            store._readers.fetchall = reads  # type: ignore[method-assign]
            stop = asyncio.Event()
            writers = []
            if mode != "idle":
                writers = [
                    asyncio.create_task(_other_writer(url, stop)),
                    asyncio.create_task(_own_writer(store, stop)),
                ]
                await asyncio.sleep(0.2)
            found[mode] = await _reads(store, count)
            stop.set()
            for task in writers:
                with contextlib.suppress(Exception):
                    await task
            store._readers.fetchall = pooled  # type: ignore[method-assign]
        return found
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        default=os.environ.get("TICKUI_STORE", ""),
        help="a postgresql:// URL, a database the benchmark's own is made beside",
    )
    parser.add_argument("--reads", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not args.store.startswith(("postgresql://", "postgres://")):
        print("skipped: it needs a PostgreSQL server (--store postgresql://... or TICKUI_STORE)")
        return
    medians: dict[str, list[float]] = {}
    with fresh_database(args.store) as url:
        for n in range(args.rounds):
            found = asyncio.run(_round(url, args.reads))
            said = []
            for mode, took in found.items():
                medians.setdefault(mode, []).append(statistics.median(took))
                p90 = statistics.quantiles(took, n=10)[8]
                said.append(f"{mode}: median {statistics.median(took):.1f} ms, p90 {p90:.1f} ms")
            print(f"round {n + 1}: " + "; ".join(said))
    pool, one = statistics.median(medians["pool"]), statistics.median(medians["one connection"])
    idle = statistics.median(medians["idle"])
    print(
        f"a read while writes are under way, median of the rounds' medians: {pool:.1f} ms on"
        f" the read connections, {one:.1f} ms on the writer's ({one / pool:.1f}x);"
        f" idle {idle:.1f} ms"
    )


if __name__ == "__main__":
    main()
