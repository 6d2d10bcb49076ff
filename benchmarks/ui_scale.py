"""The dashboard at scale: first paint, one-row updates and loop lag, headless (Textual Pilot).

Real SQLite files (WAL) in a temp dir: 10,000 interval tasks with 100,000 settled
occurrences (10 a task), and for the ratio 100 tasks with 1,000. One task is made through
`Store.add_task`; the rest are copies of its row with their own names and definitions,
and the history is one `executemany`, so seeding takes a few seconds.

1. First paint: from entering `app.run_test(size=(200, 60))` until `app.ready` is set and
   one `pilot.pause()` has run (every task with its stats and the newest 500 occurrences
   are loaded by then). Fresh app each round; engine and ticker not started.
2. One occurrence change, in the same apps, rounds alternating 10,000-task and 100-task
   databases: the newest occurrence is changed through the app's store
   (`fail_occurrences`), then `app.live.mark(...)`, `await app.live.drain()` and a repaint are
   timed. The repaint is `pilot.pause(0)` (pending messages, then the compositor update);
   `pilot.pause()` also waits for the process to look idle, at least one 20 ms sleep,
   which would hide the work, so it is timed separately and reported alongside.
   update_ratio = median(10,000 tasks) / median(100 tasks).
3. Loop lag with the engine settling about 100 runs a second: a fresh database with 100
   tasks `every 1s`, SystemClock, the real ticker (1 s ticks into the in-memory bus) and
   the engine started, the UI on the same loop. Runs are not processes: a dispatcher in
   this file writes the events SubprocessDispatcher writes (a `control.run_transition`
   to running per batch, then one `run.completed` per run from its watcher, 100 to
   280 ms later). A 10 ms sleep loop records how late it wakes for `--lag-seconds`.
4. Peak RSS of this process (ru_maxrss) at the end: the 10,000-task app is the largest.
5. The Tasks pane's history grid, in rounds of their own beside the table's (same apps'
   kind, same databases, alternating): first paint is the table's, then `v` and until
   every row on screen holds its runs (one `recent_runs` query) and a `pilot.pause()`
   ran; "switch" is from v's action until those runs are held and `pause(0)` repainted
   (that first one, then 5 more: back to the table and to the grid again, which reads
   the rows on screen again).
   One change is the table's change, made to the newest run of the grid's first row,
   timed until the grid holds the changed run (the drain's own read of it) and `pause(0)`.
   Reported against the table's medians of the same run.

    .venv/bin/python benchmarks/ui_scale.py                 # about 60 s
    .venv/bin/python benchmarks/ui_scale.py --rounds 5 --lag-seconds 20
    .venv/bin/python benchmarks/ui_scale.py --profile       # also cProfile one first paint

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import io
import json
import pstats
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tickui.common.clock import Clock, SystemClock
from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import Dispatcher, DispatchFailure, Fence, Job, Receipt
from tickui.dispatch.base import wait_until_done
from tickui.model.occurrence import RUN_CANCELED, RUN_COMPLETED, RUN_TRANSITION, TERMINAL
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import Settings
from tickui.store import NewEvent, Store
from tickui.ui.app import TickuiApp

SIZE = (200, 60)
BIG, SMALL, PER_TASK = 10_000, 100, 10
BUSY = 100  # tasks every 1 s: about 100 runs a second
HOUR = 3600 * MICROS
SWITCHES = 5  # table and back to the grid, timed, after the grid's first paint
GRID_ROWS, GRID_SLOTS = 30, 67  # about the grid's rows and cells on screen at 200x60
TARGETS = {"first_paint_s": 1.5, "update_ratio": 2.0, "loop_lag_p99_ms": 50.0, "peak_rss_mb": 250}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p99(values: Sequence[float]) -> float:
    if len(values) < 2:
        return max(values, default=0.0)
    return statistics.quantiles(values, n=100, method="inclusive")[98]


# ---- the databases ----------------------------------------------------------------------

_COPY_TASK = (
    "INSERT INTO tasks (name, spec, definition_hash, source, enabled, note, generation,"
    " created_at, updated_at, anchor, next_run_at, due_at)"
    " SELECT ?, ?, ?, source, enabled, note, generation, created_at, updated_at, anchor,"
    " next_run_at, due_at FROM tasks WHERE id = ?"
)
_INSERT_HISTORY = (
    "INSERT INTO occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at,"
    " accepted_at, started_at, finished_at, exit_code, error_code, detail, command_id, run_id,"
    " owner, lease_token, generation) VALUES (?,?,?,'scheduled',?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


async def add_tasks(db: Path, prefix: str, count: int, every: str, anchor: int | None) -> None:
    """One task through the store, then `count - 1` copies of its row, each its own."""
    now = SystemClock().now()
    fields = {"every": every, "command": ["true"]}
    if anchor is not None:
        fields["anchor"] = iso(anchor)

    def spec(i: int):
        return build_spec({"name": f"{prefix}-{i:05d}", **fields}, now)

    store = await Store.open(db)
    try:
        template = await store.add_task(spec(0), now)
    finally:
        await store.close()
    conn = sqlite3.connect(db)
    try:
        rows = (
            (s.name, s.to_json(), s.definition_hash(), template.id)
            for s in (spec(i) for i in range(1, count))
        )
        with conn:
            conn.executemany(_COPY_TASK, rows)
    finally:
        conn.close()


def add_history(db: Path, per_task: int) -> int:
    """`per_task` settled occurrences a task, on its hourly grid before now, ids in time
    order (so the newest window holds the latest slots); about one in ten failed."""
    conn = sqlite3.connect(db)
    try:
        query = "SELECT id, name, anchor, generation FROM tasks ORDER BY id"
        tasks = conn.execute(query).fetchall()
        first = conn.execute("SELECT coalesce(max(id), 0) FROM occurrences").fetchone()[0] + 1

        def rows():
            occ_id = first
            for k in range(per_task):
                for task_id, name, anchor, generation in tasks:
                    slot = anchor - (per_task - k + 1) * HOUR
                    started = slot + 5_000
                    finished = started + 200_000 + (task_id % 50) * 10_000
                    failed = (task_id + k) % 10 == 3
                    yield (
                        occ_id, task_id, name, slot, "failed" if failed else "succeeded",
                        slot, slot + 1_000, started, finished, 1 if failed else 0,
                        "EXIT_NONZERO" if failed else None, "exit 1: bench" if failed else None,
                        f"cmd-{occ_id}", f"run-{occ_id}", "bench", 1, generation,
                    )  # fmt: skip
                    occ_id += 1

        with conn:
            conn.executemany(_INSERT_HISTORY, rows())
        return conn.execute("SELECT count(*) FROM occurrences").fetchone()[0]
    finally:
        conn.close()


async def build_db(db: Path, tasks: int, per_task: int) -> tuple[int, int]:
    """Hourly tasks on the hour, the first slot one to two hours ahead: nothing falls due
    while the benchmark runs, even with the engine started."""
    now = SystemClock().now()
    await add_tasks(db, "task", tasks, "1h", -(-now // HOUR) * HOUR + HOUR)
    occurrences = add_history(db, per_task)
    return tasks, occurrences


# ---- a dispatcher with no processes ------------------------------------------------------


@dataclass
class _FakeRun:
    occurrence_id: int
    command_id: str | None
    run_id: str
    seconds: float
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class InProcessDispatcher(Dispatcher):
    """What SubprocessDispatcher writes, with no process behind it: a batch of
    `control.run_transition` (running) events at dispatch, then per run, from its watcher,
    one `run.completed` (or `run.canceled` when cancelled) a fraction of a second later."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self._runs: dict[int, _FakeRun] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self.dispatched = 0

    def active(self) -> int:
        return len(self._runs)

    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure]:
        results: list[Receipt | DispatchFailure] = []
        started: list[NewEvent] = []
        runs: list[_FakeRun] = []
        for job in jobs:
            if may_start is not None and not await may_start():  # as the real one, per start
                raise AssertionError("the benchmark engine lost its lease")
            occ = job.occurrence
            seconds = 0.1 + (occ.id % 10) * 0.02
            run = _FakeRun(occ.id, occ.command_id, f"run-{uuid.uuid4().hex[:16]}", seconds)
            self._runs[occ.id] = run
            runs.append(run)
            # SubprocessDispatcher adds pid, pgid, pid_start and log_path: there is no process.
            started.append(
                NewEvent(self.clock.now(), RUN_TRANSITION, occ.command_id, run.run_id,
                         {"state": "running"})
            )  # fmt: skip
            results.append(Receipt(occ.command_id or ""))
        await self.store.append_events(started)
        for run in runs:
            watcher = asyncio.create_task(self._watch(run))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)
        self.dispatched += len(runs)
        return results

    async def _watch(self, run: _FakeRun) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.stop.wait(), run.seconds)
            if run.reason is None:
                kind, payload = RUN_COMPLETED, {"exit_code": 0}
            else:
                kind, payload = RUN_CANCELED, {"exit_code": -15, "detail": run.reason}
            await self.store.append_events(
                [NewEvent(self.clock.now(), kind, run.command_id, run.run_id, payload)]
            )
        finally:
            self._runs.pop(run.occurrence_id, None)
            run.done.set()

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        run = self._runs.get(occurrence_id)
        if run is None:
            return False
        run.reason = reason
        run.stop.set()
        await run.done.wait()
        return True

    async def shutdown(self, grace: float) -> None:
        await wait_until_done((run.done for run in self._runs.values()), grace)
        await asyncio.gather(*(self.cancel(i, "engine_stopped") for i in list(self._runs)))
        if self._watchers:
            await asyncio.gather(*list(self._watchers), return_exceptions=True)


# ---- the app --------------------------------------------------------------------------


def make_app(db: Path, *, busy: bool = False) -> TickuiApp:
    """The dashboard over `db`, built as `tickui` builds it (the store opened in the app's
    loop); busy: engine and ticker started, runs through InProcessDispatcher."""

    async def factory() -> Host:
        store = await Store.open(db)
        clock = SystemClock()
        host = build_host(store, clock, Settings(), start_engine=busy, start_ticker=busy)
        if busy:
            host.engine.dispatcher = InProcessDispatcher(store, clock)
        return host

    return TickuiApp(factory)


async def _change(app: TickuiApp, occ_id: int, detail: str) -> None:
    await app.host.store.fail_occurrences(
        [(occ_id, "BENCH", detail)], app.host.clock.now(), states=TERMINAL
    )


async def _applied(app: TickuiApp, occ_id: int, detail: str) -> None:
    """A drain already under way (the app's 50 ms timer) makes ours return at once; the
    change is then applied by the next drain. Wait for it, whoever applies it."""
    while app.board.occ_rows.by_id[occ_id].detail != detail:
        await asyncio.sleep(0)
        await app.live.drain()


async def _grid_painted(app: TickuiApp) -> None:
    """Until every row of the grid on screen holds its runs (read in one query)."""
    grid = app.board.grid
    while not grid.runs or grid.reading:
        await asyncio.sleep(0)


async def _grid_applied(app: TickuiApp, task_id: int, detail: str) -> None:
    """Until the grid holds the changed run: a drain marks its task, the grid asks."""
    grid = app.board.grid
    while (runs := grid.runs.get(task_id)) is None or runs[0].detail != detail:
        await asyncio.sleep(0)
        if not grid.reading:  # not asked yet: the drain that marks it has not run
            await app.live.drain()


async def grid_round(db: Path, tasks: int, updates: int) -> dict:
    """One fresh app shown as the history grid: first paint (the table's, then v until its
    rows on screen hold their runs), then `updates` one-occurrence changes, each timed
    until the grid holds it and one repaint."""
    gc.collect()
    app = make_app(db)
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await app.ready.wait()
        await pilot.pause()
        switched = time.perf_counter()
        app.screen.action_cycle_view()  # what v does
        await _grid_painted(app)
        await pilot.pause(0)
        switches = [(time.perf_counter() - switched) * 1000]
        await pilot.pause()
        first_paint = time.perf_counter() - start
        for _ in range(SWITCHES):  # back to the table, then the grid again (read again)
            app.screen.action_cycle_view()
            await pilot.pause(0)
            switched = time.perf_counter()
            app.screen.action_cycle_view()
            await _grid_painted(app)
            await pilot.pause(0)
            switches.append((time.perf_counter() - switched) * 1000)
        grid = app.board.grid
        assert grid.display and len(grid.runs) > 20, len(grid.runs)
        task_id = grid.selected_key
        occ_id = grid.runs[task_id][0].id
        work = []
        for i in range(updates):
            detail = f"grid change {i}"
            await _change(app, occ_id, detail)
            began = time.perf_counter()
            app.live.mark(tasks=[], occurrences=[occ_id])
            await app.live.drain()
            await _grid_applied(app, task_id, detail)
            await pilot.pause(0)
            work.append((time.perf_counter() - began) * 1000)
        assert grid.runs[task_id][0].error_code == "BENCH"
    return {"first_paint_s": first_paint, "switch_ms": switches, "update_ms": work}


async def ui_round(db: Path, tasks: int, updates: int) -> dict:
    """One fresh app: its first paint, then `updates` timed one-occurrence changes of
    each kind (repaint by pause(0), and by pause() with its idle wait)."""
    gc.collect()
    app = make_app(db)
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        await app.ready.wait()
        await pilot.pause()
        first_paint = time.perf_counter() - start
        rss_after_paint = rss_mb()
        assert len(app.board.task_rows) == tasks, (len(app.board.task_rows), tasks)
        assert len(app.board.occ_rows) == app.board.occ_rows.window
        occ_id = app.board.occ_rows.at(0).id
        work, idle = [], []
        for i in range(2 * updates):
            detail = f"bench change {i}"
            await _change(app, occ_id, detail)
            began = time.perf_counter()
            app.live.mark(tasks=[], occurrences=[occ_id])
            await app.live.drain()
            await _applied(app, occ_id, detail)
            if i % 2 == 0:
                await pilot.pause(0)
                work.append((time.perf_counter() - began) * 1000)
            else:
                await pilot.pause()
                idle.append((time.perf_counter() - began) * 1000)
        shown = app.board.occ_rows.at(0)
        assert shown.id == occ_id and shown.state == "failed" and shown.error_code == "BENCH"
    return {"first_paint_s": first_paint, "update_ms": work, "update_idle_ms": idle,
            "rss_after_paint_mb": rss_after_paint}  # fmt: skip


async def store_steps(db: Path, rounds: int, repeats: int = 10) -> dict[str, float]:
    """The store calls behind first paint (load_all) and behind one drain, timed outside
    the app on a fresh connection: median ms."""
    steps: dict[str, list[float]] = {}

    def lap(name: str, began: float) -> float:
        now = time.perf_counter()
        steps.setdefault(name, []).append((now - began) * 1000)
        return now

    for _ in range(rounds):
        t = time.perf_counter()
        store = await Store.open(db)
        t = lap("Store.open", t)
        await store.list_tasks(with_stats=False)
        t = lap("list_tasks(with_stats=False): rows, specs parsed", t)
        await store.task_stats()
        t = lap("task_stats(): every task", t)
        newest = await store.newest_occurrences(500)
        t = lap("newest_occurrences(500)", t)
        shown = [task.id for task in (await store.list_tasks(with_stats=False))[:GRID_ROWS]]
        t = time.perf_counter()
        await store.recent_runs(shown, GRID_SLOTS)
        t = lap(f"grid: recent_runs({GRID_ROWS} tasks, {GRID_SLOTS} a task)", t)
        occ = newest[0]
        for _ in range(repeats):
            t = time.perf_counter()
            await store.occurrences_by_id([occ.id])
            t = lap("drain: occurrences_by_id([1 id])", t)
            await store.tasks_by_id([occ.task_id])
            t = lap("drain: tasks_by_id([1 id])", t)
            await store.task_stats([occ.task_id])
            t = lap("drain: task_stats([1 id])", t)
        await store.close()
    return {name: med(values) for name, values in steps.items()}


async def profile_first_paint(db: Path) -> str:
    """cProfile of one first paint (main thread only: SQLite runs in aiosqlite's thread)."""
    profiler = cProfile.Profile()
    gc.collect()
    app = make_app(db)
    profiler.enable()
    async with app.run_test(size=SIZE) as pilot:
        await app.ready.wait()
        await pilot.pause()
        profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(15)
    return out.getvalue()


# ---- loop lag under load ---------------------------------------------------------------


class GcWatch:
    """Full (generation 2) collections and how long each stopped the loop."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._began = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.pauses.append((time.perf_counter() - self._began) * 1000)

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


async def busy_round(db: Path, seconds: float, warmup: float) -> dict:
    gc.collect()
    app = make_app(db, busy=True)
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await app.ready.wait()
        await pilot.pause()
        await asyncio.sleep(warmup)  # past the catch-up of slots missed before the start
        store = app.host.store
        before = await store.state_counts()
        dispatched = app.host.engine.dispatcher.dispatched
        began = loop.time()
        with GcWatch() as gcs:
            while loop.time() - began < seconds:
                t = loop.time()
                await asyncio.sleep(0.01)
                lags.append(max(0.0, loop.time() - t - 0.01) * 1000)
        elapsed = loop.time() - began
        after = await store.state_counts()
        dispatched = app.host.engine.dispatcher.dispatched - dispatched
        status = app.host.engine.status()
        ticker = app.host.ticker.metrics()
    settled = sum(after.get(s, 0) - before.get(s, 0) for s in TERMINAL)
    return {
        "seconds": elapsed,
        "lag_p50_ms": med(lags),
        "lag_p99_ms": p99(lags),
        "lag_max_ms": max(lags, default=0.0),
        "samples": len(lags),
        "full_gcs": len(gcs.pauses),
        "full_gc_max_ms": max(gcs.pauses, default=0.0),
        "settled_per_s": settled / elapsed,
        "succeeded_per_s": (after.get("succeeded", 0) - before.get("succeeded", 0)) / elapsed,
        "dispatched_per_s": dispatched / elapsed,
        "skipped": after.get("skipped", 0) - before.get("skipped", 0),
        "engine_result": status.result,
        "coalesced_scans": status.coalesced,
        "ticks_emitted": ticker.ticks_emitted,
        "ticks_missed": ticker.ticks_missed,
    }


# ---- main --------------------------------------------------------------------------------


def _mark(key: str, value: float) -> str:
    return "met" if value < TARGETS[key] else "MISSED"


def _print_lag(what: str, lag: dict) -> None:
    print(
        f"  {what}: lag p50 {lag['lag_p50_ms']:.2f} ms, p99 {lag['lag_p99_ms']:.1f} ms,"
        f" max {lag['lag_max_ms']:.1f} ms ({lag['samples']} sleeps of 10 ms);"
        f" settled {lag['settled_per_s']:.1f} runs/s"
    )
    print(
        f"    succeeded {lag['succeeded_per_s']:.1f}/s, dispatched {lag['dispatched_per_s']:.1f}/s,"
        f" skipped {lag['skipped']}; engine {lag['engine_result']}, coalesced scans"
        f" {lag['coalesced_scans']}; ticks {lag['ticks_emitted']} emitted,"
        f" {lag['ticks_missed']} missed; {lag['full_gcs']} full GCs, longest"
        f" {lag['full_gc_max_ms']:.0f} ms"
    )


async def run(args: argparse.Namespace, tmp: Path) -> dict:
    big, small, busy = tmp / "big.db", tmp / "small.db", tmp / "busy.db"
    t = time.perf_counter()
    big_counts = await build_db(big, BIG, PER_TASK)
    small_counts = await build_db(small, SMALL, PER_TASK)
    await add_tasks(busy, "busy", BUSY, "1s", None)
    print(
        f"seeded in {time.perf_counter() - t:.1f} s: {big_counts[0]:,} tasks /"
        f" {big_counts[1]:,} occurrences, {small_counts[0]:,} / {small_counts[1]:,},"
        f" and a fresh database of {BUSY} tasks every 1s for the loop-lag run"
    )

    # First, while the process is small: 100 runs/s on the fresh database.
    print(
        f"loop lag, {args.lag_seconds:g} s after {args.warmup:g} s warm-up: {BUSY} tasks every 1s,"
        " SystemClock, the ticker (1 s ticks), engine and UI on one loop"
    )
    fresh = await busy_round(busy, args.lag_seconds, args.warmup)
    _print_lag(f"fresh database, {BUSY} tasks", fresh)

    results: dict[int, list[dict]] = {BIG: [], SMALL: []}
    grids: dict[int, list[dict]] = {BIG: [], SMALL: []}
    for round_no in range(args.rounds):
        for db, tasks in ((big, BIG), (small, SMALL)):
            r = await ui_round(db, tasks, args.updates)
            results[tasks].append(r)
            print(
                f"round {round_no + 1} {tasks:>6,} tasks: first paint {r['first_paint_s']:5.2f} s"
                f"  one change {med(r['update_ms']):6.2f} ms with pause(0),"
                f" {med(r['update_idle_ms']):6.2f} ms with pause()"
                f"  (RSS {r['rss_after_paint_mb']:.0f} MB)"
            )
            g = await grid_round(db, tasks, args.updates)
            grids[tasks].append(g)
            print(
                f"        grid: first paint {g['first_paint_s']:5.2f} s"
                f" (v to painted {med(g['switch_ms']):6.1f} ms)"
                f"  one change {med(g['update_ms']):6.2f} ms with pause(0)"
            )

    def all_of(tasks: int, key: str) -> list[float]:
        return [v for r in results[tasks] for v in r[key]]

    paint_big = [r["first_paint_s"] for r in results[BIG]]
    paint_small = [r["first_paint_s"] for r in results[SMALL]]
    upd_big, upd_small = med(all_of(BIG, "update_ms")), med(all_of(SMALL, "update_ms"))
    idle_big, idle_small = med(all_of(BIG, "update_idle_ms")), med(all_of(SMALL, "update_idle_ms"))
    per_round = [
        med(b["update_ms"]) / med(s["update_ms"])
        for b, s in zip(results[BIG], results[SMALL], strict=True)
    ]

    grid_paint_big = [g["first_paint_s"] for g in grids[BIG]]
    grid_upd_big = med([v for g in grids[BIG] for v in g["update_ms"]])
    grid_upd_small = med([v for g in grids[SMALL] for v in g["update_ms"]])

    steps_big, steps_small = await store_steps(big, 3), await store_steps(small, 3)
    print(f"store calls, median ms: {BIG:,} tasks / {big_counts[1]:,} occurrences vs {SMALL}:")
    for name, ms in steps_big.items():
        print(f"  {name:<50} {ms:8.2f} {steps_small[name]:8.2f}")

    if args.profile:
        print(f"cProfile of one first paint of {BIG:,} tasks, top 15 by own time:")
        print(await profile_first_paint(big))

    beside = None
    if not args.skip_big_lag:  # last: it adds the busy tasks to the big database
        await add_tasks(big, "busy", BUSY, "1s", None)
        beside = await busy_round(big, args.lag_seconds, args.warmup)
        _print_lag(f"the same {BUSY} tasks beside {BIG:,} / {big_counts[1]:,}", beside)

    summary = {
        "tasks": BIG,
        "occurrences": big_counts[1],
        "small_tasks": SMALL,
        "small_occurrences": small_counts[1],
        "rounds": args.rounds,
        "first_paint_s": round(med(paint_big), 3),
        "first_paint_s_runs": [round(v, 3) for v in paint_big],
        "first_paint_s_100": round(med(paint_small), 3),
        "update_ms_10k": round(upd_big, 2),
        "update_ms_100": round(upd_small, 2),
        "update_ratio": round(upd_big / upd_small, 2),
        "update_ratio_per_round": [round(v, 2) for v in per_round],
        "update_samples": len(all_of(BIG, "update_ms")),
        "update_idle_pause_ms_10k": round(idle_big, 2),
        "update_idle_pause_ms_100": round(idle_small, 2),
        "update_ratio_idle_pause": round(idle_big / idle_small, 2),
        "grid_first_paint_s": round(med(grid_paint_big), 3),
        "grid_first_paint_s_runs": [round(v, 3) for v in grid_paint_big],
        "grid_first_paint_s_100": round(med([g["first_paint_s"] for g in grids[SMALL]]), 3),
        "grid_switch_ms_10k": round(med([v for g in grids[BIG] for v in g["switch_ms"]]), 1),
        "grid_switch_ms_100": round(med([v for g in grids[SMALL] for v in g["switch_ms"]]), 1),
        "grid_update_ms_10k": round(grid_upd_big, 2),
        "grid_update_ms_100": round(grid_upd_small, 2),
        "grid_update_ratio": round(grid_upd_big / grid_upd_small, 2),
        "grid_vs_table_first_paint": round(med(grid_paint_big) / med(paint_big), 2),
        "grid_vs_table_update": round(grid_upd_big / upd_big, 2),
        "store_ms_10k": {k: round(v, 2) for k, v in steps_big.items()},
        "store_ms_100": {k: round(v, 2) for k, v in steps_small.items()},
        "loop_lag_p50_ms": round(fresh["lag_p50_ms"], 2),
        "loop_lag_p99_ms": round(fresh["lag_p99_ms"], 1),
        "loop_lag_max_ms": round(fresh["lag_max_ms"], 1),
        "full_gc_max_ms": round(fresh["full_gc_max_ms"], 1),
        "settled_runs_per_s": round(fresh["settled_per_s"], 1),
        "lag_seconds": round(fresh["seconds"], 1),
        "rss_after_first_paint_mb": round(results[BIG][0]["rss_after_paint_mb"], 1),
        "peak_rss_mb": round(rss_mb(), 1),
    }
    if beside is not None:
        summary["loop_lag_p50_ms_10k"] = round(beside["lag_p50_ms"], 2)
        summary["loop_lag_p99_ms_10k"] = round(beside["lag_p99_ms"], 1)
        summary["loop_lag_max_ms_10k"] = round(beside["lag_max_ms"], 1)
        summary["settled_runs_per_s_10k"] = round(beside["settled_per_s"], 1)
    return summary


def report(summary: dict) -> None:
    paint, ratio = summary["first_paint_s"], summary["update_ratio"]
    lag, rss = summary["loop_lag_p99_ms"], summary["peak_rss_mb"]
    print(
        f"first paint, {BIG:,} tasks: median {paint:.2f} s of {summary['first_paint_s_runs']}"
        f" (target < {TARGETS['first_paint_s']} s: {_mark('first_paint_s', paint)});"
        f" {SMALL} tasks: {summary['first_paint_s_100']:.2f} s"
    )
    print(
        f"one occurrence change, median of {summary['update_samples']}:"
        f" {summary['update_ms_10k']:.2f} ms vs {summary['update_ms_100']:.2f} ms,"
        f" ratio {ratio:.2f} (target < {TARGETS['update_ratio']:g}: {_mark('update_ratio', ratio)};"
        f" per round {summary['update_ratio_per_round']})"
    )
    print(
        f"  timed with pilot.pause() instead: {summary['update_idle_pause_ms_10k']:.1f} ms vs"
        f" {summary['update_idle_pause_ms_100']:.1f} ms, ratio"
        f" {summary['update_ratio_idle_pause']:.2f} (mostly its idle wait)"
    )
    print(
        f"history grid, {BIG:,} tasks: first paint {summary['grid_first_paint_s']:.2f} s"
        f" ({summary['grid_vs_table_first_paint']:.2f} x the table's; v to painted"
        f" {summary['grid_switch_ms_10k']:.1f} ms), one change {summary['grid_update_ms_10k']:.2f}"
        f" ms ({summary['grid_vs_table_update']:.2f} x the table's); vs {SMALL} tasks"
        f" {summary['grid_update_ms_100']:.2f} ms, ratio {summary['grid_update_ratio']:.2f}"
    )
    print(
        f"loop lag p99 at {summary['settled_runs_per_s']:.0f} runs/s: {lag} ms"
        f" (target < {TARGETS['loop_lag_p99_ms']:g} ms: {_mark('loop_lag_p99_ms', lag)})"
        + (
            f"; with {BIG:,} tasks beside them: {summary['loop_lag_p99_ms_10k']} ms"
            f" at {summary['settled_runs_per_s_10k']:.0f} runs/s"
            if "loop_lag_p99_ms_10k" in summary
            else ""
        )
    )
    print(
        f"peak RSS {rss:.0f} MB"
        f" (target < {TARGETS['peak_rss_mb']} MB: {_mark('peak_rss_mb', rss)});"
        f" {summary['rss_after_first_paint_mb']:.0f} MB after the first {BIG:,}-task paint"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3, help="fresh apps per database")
    parser.add_argument("--updates", type=int, default=10, help="timed changes per app, each way")
    parser.add_argument("--lag-seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--skip-big-lag", action="store_true", help="no second lag run beside 10,000 tasks"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile one 10,000-task paint")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tickui-ui-bench-") as tmp:
        summary = asyncio.run(run(args, Path(tmp)))
    report(summary)
    summary["total_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
