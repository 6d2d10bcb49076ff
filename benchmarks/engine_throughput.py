"""10,000 tasks due at once: tickui's engine against APScheduler 3.11 on SQLite (WAL), and
against the limit: the same claims and settlements by plain `sqlite3`, no engine.

Each side runs in its own child process (so peak RSS is its own), alternating over a
few rounds; the parent prints medians and their ratios (tickui / APScheduler, tickui /
limit). The last line is one JSON object.

    .venv/bin/python benchmarks/engine_throughput.py [--tasks 10000] [--rounds 3] [--retries 3]

`--retries N` gives every task `retries = N` (the figure must hold with retries
set on every task; the runs succeed, so no retry is queued, but each run's end is
followed up as a retrying task's would be).

`--store postgresql://...` measures on that PostgreSQL server instead, each side on a
database of its own made there per round and dropped after: tickui's engine, APScheduler 4
(in a venv of its own, see engine_throughput_aps4.py) and raw batched claims by plain SQL
(the floor); it prints their medians and the ratios tickui / APScheduler 4 and tickui / raw.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lagprobe import LagProbe

from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.dispatch import Dispatcher, Receipt
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.occurrence import RUN_COMPLETED
from tickui.model.spec import build_spec
from tickui.store import NewEvent, Store
from tickui.store.base import WAL_AUTOCHECKPOINT_PAGES

T0 = 1_800_000_000 * MICROS
HISTORY = 100_000


def _figures(tasks: int, elapsed: float, probe: LagProbe, cpu: float) -> dict:
    return {
        "jobs_per_s": tasks / elapsed,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "loop_lag_p99_ms": probe.p99(),
        "loop_lag_max_ms": probe.worst(),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


class InstantDispatcher(Dispatcher):
    """Accepts every job and records its start and completion at once, in one batch."""

    def __init__(self, store: Store, clock: ManualClock) -> None:
        self.store, self.clock = store, clock

    async def dispatch(self, jobs, may_start=None):
        now = self.clock.now()
        events = []
        for job in jobs:
            if may_start is not None and not await may_start():  # as the real one, per start
                raise AssertionError("the benchmark engine lost its lease")
            occ = job.occurrence
            run_id = f"run-{occ.id}"
            events.append(NewEvent(now, RUN_COMPLETED, occ.command_id, run_id, {"exit_code": 0}))
        await self.store.append_events(events)
        return [Receipt(job.occurrence.command_id or "") for job in jobs]

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        return False

    def active(self) -> int:
        return 0

    async def shutdown(self, grace: float) -> None:
        return None


def _seed(db: Path, tasks: int, retries: int = 0) -> None:
    """Tasks due at T0 and HISTORY settled occurrences, written directly for speed."""
    conn = sqlite3.connect(db)
    rows = []
    for i in range(tasks):
        raw = {"name": f"job-{i:05d}", "every": "1h", "command": ["true"]}
        if retries:
            raw["retries"] = retries
        spec = build_spec(raw, T0 - 1)
        assert spec.retries == retries
        rows.append((spec.name, spec.to_json(), spec.definition_hash(), T0, T0, T0, T0, T0))
    conn.executemany(
        "INSERT INTO tasks (name, spec, definition_hash, created_at, updated_at, anchor,"
        " next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?)",
        rows,
    )
    per_task = HISTORY // tasks
    history = [
        (i + 1, f"job-{i:05d}", T0 - (k + 1) * 3600 * MICROS, T0 - (k + 1) * 3600 * MICROS)
        for i in range(tasks)
        for k in range(per_task)
    ]
    conn.executemany(
        "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at)"
        " VALUES (?, ?, 'scheduled', ?, 'succeeded', ?)",
        history,
    )
    conn.commit()
    conn.close()


async def tickui_side(tasks: int, retries: int = 0, url: str | None = None) -> dict:
    """On a fresh SQLite file, or on the fresh PostgreSQL database at `url`."""
    with tempfile.TemporaryDirectory() as tmp:
        db: Path | str = url or Path(tmp) / "bench.db"
        store = await Store.open(db)
        await store.close()
        if url:
            import engine_throughput_pg  # psycopg only where PostgreSQL is measured

            engine_throughput_pg.seed(url, tasks, HISTORY, T0, retries)
        else:
            _seed(db, tasks, retries)
        store = await Store.open(db)
        clock = ManualClock(T0 - MICROS)
        engine = SchedulerEngine(store, InstantDispatcher(store, clock), clock, EngineConfig())
        await engine.start()  # running, holding the lease, nothing due yet
        probe = LagProbe()
        probe.start()
        await asyncio.sleep(0.05)
        clock.advance(0.001 + 1)  # every task falls due at once
        start, cpu = time.perf_counter(), time.process_time()
        await engine.tick(clock.now())
        while await store.active_occurrences():
            await engine.reconcile()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        await probe.stop()
        counts = await store.state_counts()
        await engine.stop()
        await store.close()
    assert counts.get("succeeded", 0) == HISTORY // tasks * tasks + tasks, counts
    return _figures(tasks, elapsed, probe, cpu)


# ---- the limit: raw batched claims with sqlite3, no engine ------------------------------

_LIMIT_CLAIM = (
    "INSERT INTO occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at, owner,"
    " lease_token, generation, command_id)"
    " SELECT :first + n, id, name, 'scheduled', next_run_at, 'claimed', :now, 'limit', 1,"
    " generation, 'cmd-' || (:first + n)"
    " FROM (SELECT id, name, next_run_at, generation,"
    " row_number() OVER (ORDER BY due_at, id) - 1 AS n FROM tasks"
    " WHERE enabled = 1 AND due_at IS NOT NULL AND due_at <= :now ORDER BY due_at, id LIMIT :page)"
)
_LIMIT_ADVANCE = (
    "UPDATE tasks SET next_run_at = next_run_at + :hour, due_at = due_at + :hour"
    " WHERE id IN (SELECT task_id FROM occurrences WHERE id BETWEEN :first AND :last)"
)
_LIMIT_SETTLE = (
    "UPDATE occurrences SET state = 'succeeded', accepted_at = :now, finished_at = :now,"
    " exit_code = 0, run_id = 'run-' || command_id WHERE id BETWEEN :first AND :last"
)


def limit_side(tasks: int, retries: int = 0) -> dict:
    """The same file (tickui's schema and indexes, the same seeded rows), claimed and settled
    a page at a time by plain sqlite3 on the calling thread, in set-based statements: per
    page, one transaction that inserts the occurrences of the page's due tasks and moves
    those tasks' next fire time, then one that marks the runs succeeded. What a minimal
    program must write for the same durable outcome; no event log, no lease, no loop."""
    page = EngineConfig().batch
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "limit.db"

        async def schema() -> None:
            await (await Store.open(db)).close()

        asyncio.run(schema())
        _seed(db, tasks, retries)
        conn = sqlite3.connect(db, isolation_level=None)
        for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "cache_size = -32000"):
            conn.execute(f"PRAGMA {pragma}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        done = 0
        start, cpu = time.perf_counter(), time.process_time()
        while True:
            conn.execute("BEGIN IMMEDIATE")
            first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM occurrences").fetchone()[0]
            params = {"first": first, "now": T0 + MICROS, "page": page, "hour": 3600 * MICROS}
            claimed = conn.execute(_LIMIT_CLAIM, params).rowcount
            if claimed:
                params["last"] = first + claimed - 1
                moved = conn.execute(_LIMIT_ADVANCE, params).rowcount
                assert moved == claimed, (moved, claimed)
            conn.execute("COMMIT")
            if not claimed:
                break
            conn.execute("BEGIN IMMEDIATE")
            settled = conn.execute(_LIMIT_SETTLE, params).rowcount
            conn.execute("COMMIT")
            assert settled == claimed, (settled, claimed)
            done += settled
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        succeeded = conn.execute(
            "SELECT count(*) FROM occurrences WHERE state = 'succeeded'"
        ).fetchone()[0]
        conn.close()
    assert done == tasks, (done, tasks)
    assert succeeded == HISTORY // tasks * tasks + tasks, succeeded
    return {
        "jobs_per_s": tasks / elapsed,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


ran = 0


def _noop() -> None:
    global ran
    ran += 1


async def apscheduler_side(tasks: int, retries: int = 0) -> dict:
    from datetime import UTC, datetime

    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from sqlalchemy import event

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "aps.db"
        with sqlite3.connect(path) as conn:  # WAL is a property of the file: set it first
            conn.execute("PRAGMA journal_mode=WAL")
        jobstore = SQLAlchemyJobStore(url=f"sqlite:///{path}")

        @event.listens_for(jobstore.engine, "connect")
        def _fast(dbapi_conn, _record):
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            dbapi_conn.execute("PRAGMA synchronous=NORMAL")

        scheduler = AsyncIOScheduler(jobstores={"default": jobstore}, timezone=UTC)
        scheduler.start(paused=True)
        now = datetime.now(UTC)
        for i in range(tasks):
            scheduler.add_job(_noop, "date", run_date=now, id=f"job-{i}", misfire_grace_time=3600)
        probe = LagProbe()
        probe.start()
        await asyncio.sleep(0.05)
        start, cpu = time.perf_counter(), time.process_time()
        scheduler.resume()
        while ran < tasks:
            await asyncio.sleep(0.001)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        await probe.stop()
        scheduler.shutdown(wait=False)
        with sqlite3.connect(path) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal", mode
    return _figures(tasks, elapsed, probe, cpu)


async def raw_side(tasks: int, retries: int, url: str) -> dict:
    """The same seeded tables, claimed and settled in batches by plain SQL: no engine."""
    import engine_throughput_pg

    store = await Store.open(url)
    await store.close()
    engine_throughput_pg.seed(url, tasks, HISTORY, T0, retries)
    elapsed, succeeded = engine_throughput_pg.raw_side(url, tasks, T0 + MICROS)
    assert succeeded == HISTORY // tasks * tasks + tasks, succeeded
    return {
        "jobs_per_s": tasks / elapsed,
        "seconds": elapsed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _child(side: str, tasks: int, retries: int, url: str | None = None) -> dict:
    command = [sys.executable, __file__, "--side", side, "--tasks", str(tasks)]
    command += ["--retries", str(retries)] + (["--db-url", url] if url else [])
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{side} side failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _line(round_no: int, side: str, figures: dict) -> str:
    line = f"round {round_no + 1} {side:>12}: {figures['jobs_per_s']:9.0f} jobs/s"
    line += f"  {figures['seconds']:6.2f} s"
    if "cpu_seconds" in figures:
        line += f" (CPU {figures['cpu_seconds']:5.2f} s)"
    if "loop_lag_p99_ms" in figures:
        line += f"  loop lag p99 {figures['loop_lag_p99_ms']:7.1f} ms"
        line += f" max {figures['loop_lag_max_ms']:7.1f} ms"
    return line + f"  peak RSS {figures['peak_rss_mb']:5.0f} MB"


def postgres_main(args: argparse.Namespace) -> None:
    """tickui, APScheduler 4 and raw batched claims, each on a fresh database per round."""
    import engine_throughput_pg

    python = engine_throughput_pg.aps4_python(Path(args.aps4_venv))
    sides = ("tickui", "apscheduler4", "raw")
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for round_no in range(args.rounds):
        for side in sides:
            with engine_throughput_pg.fresh_database(args.store) as url:
                if side == "apscheduler4":
                    figures = engine_throughput_pg.aps4_child(python, url, args.tasks)
                else:
                    figures = _child(side, args.tasks, args.retries, url)
            results[side].append(figures)
            print(_line(round_no, side, figures), flush=True)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    tickui, aps, raw = (med(side, "jobs_per_s") for side in sides)
    summary = {
        "store": "postgresql",
        "tasks": args.tasks,
        "retries": args.retries,
        "stored_occurrences": HISTORY,
        "rounds": args.rounds,
        "tickui_jobs_per_s": round(tickui),
        "apscheduler4_jobs_per_s": round(aps),
        "raw_jobs_per_s": round(raw),
        "ratio_apscheduler4": round(tickui / aps, 2),
        "ratio_raw": round(tickui / raw, 2),
        "loop_lag_p99_ms": round(med("tickui", "loop_lag_p99_ms"), 1),
        "loop_lag_max_ms": round(med("tickui", "loop_lag_max_ms"), 1),
        "peak_rss_mb": round(med("tickui", "peak_rss_mb"), 1),
        "apscheduler4_loop_lag_p99_ms": round(med("apscheduler4", "loop_lag_p99_ms"), 1),
        "apscheduler4_peak_rss_mb": round(med("apscheduler4", "peak_rss_mb"), 1),
        "apscheduler4_version": results["apscheduler4"][0]["apscheduler"],
    }
    print(
        f"median tickui {summary['tickui_jobs_per_s']} jobs/s, APScheduler 4"
        f" {summary['apscheduler4_jobs_per_s']} jobs/s, raw {summary['raw_jobs_per_s']}"
        f" jobs/s: tickui / apscheduler4 {summary['ratio_apscheduler4']} (goal >= 5),"
        f" tickui / raw {summary['ratio_raw']} (goal >= 0.33)"
    )
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--retries", type=int, default=0, help="retries set on every task")
    parser.add_argument(
        "--store", metavar="URL", help="a PostgreSQL server (postgresql://...) to measure on"
    )
    parser.add_argument(
        "--aps4-venv",
        default=str(Path(__file__).resolve().parent / ".venv-aps4"),
        help="where the venv holding APScheduler 4 is made (once) and reused",
    )
    parser.add_argument(
        "--side", choices=["tickui", "apscheduler", "raw", "limit"], help=argparse.SUPPRESS
    )
    parser.add_argument("--db-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        if args.side == "raw":
            figures = asyncio.run(raw_side(args.tasks, args.retries, args.db_url))
        elif args.side == "limit":
            figures = limit_side(args.tasks, args.retries)
        elif args.side == "tickui":
            figures = asyncio.run(tickui_side(args.tasks, args.retries, args.db_url))
        else:
            figures = asyncio.run(apscheduler_side(args.tasks, args.retries))
        print(json.dumps(figures))
        return
    if args.store:
        if args.store.split("://", 1)[0] not in ("postgresql", "postgres"):
            print("--store takes a postgresql:// URL", file=sys.stderr)
            sys.exit(2)
        import psycopg

        try:
            postgres_main(args)
        except psycopg.Error as exc:
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise SystemExit(f"PostgreSQL: {first}") from None
        return
    sides = ("tickui", "apscheduler", "limit")
    results: dict[str, list[dict]] = {side: [] for side in sides}
    for round_no in range(args.rounds):
        for side in sides:
            figures = _child(side, args.tasks, args.retries)
            results[side].append(figures)
            print(_line(round_no, side, figures), flush=True)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side])

    tickui, aps, limit = (med(side, "jobs_per_s") for side in sides)
    summary = {
        "tasks": args.tasks,
        "retries": args.retries,
        "stored_occurrences": HISTORY,
        "rounds": args.rounds,
        "tickui_jobs_per_s": round(tickui),
        "apscheduler_jobs_per_s": round(aps),
        "limit_jobs_per_s": round(limit),
        "ratio": round(tickui / aps, 2),
        "limit_ratio": round(tickui / limit, 2),
        "cpu_seconds": round(med("tickui", "cpu_seconds"), 3),
        "limit_cpu_seconds": round(med("limit", "cpu_seconds"), 3),
        "loop_lag_p99_ms": round(med("tickui", "loop_lag_p99_ms"), 1),
        "loop_lag_max_ms": round(med("tickui", "loop_lag_max_ms"), 1),
        "apscheduler_loop_lag_p99_ms": round(med("apscheduler", "loop_lag_p99_ms"), 1),
        "apscheduler_loop_lag_max_ms": round(med("apscheduler", "loop_lag_max_ms"), 1),
        "apscheduler_peak_rss_mb": round(med("apscheduler", "peak_rss_mb"), 1),
        "peak_rss_mb": round(med("tickui", "peak_rss_mb"), 1),
    }
    print(
        f"median tickui {summary['tickui_jobs_per_s']} jobs/s, APScheduler"
        f" {summary['apscheduler_jobs_per_s']} jobs/s, limit {summary['limit_jobs_per_s']}"
        f" jobs/s: tickui / APScheduler {summary['ratio']} (goal >= 5),"
        f" tickui / limit {summary['limit_ratio']} (goal >= 0.33)"
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
