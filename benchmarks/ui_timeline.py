"""The timeline (tickui.ui.widgets.timeline.DayTimeline) with 10,000 tasks, headless.

Tasks are model objects (the timeline reads no store), in four mixes of 10,000, each
against 100 of the same mix as the baseline in the same run:

- intervals: every 1m, 5m, 15m, 1h or 6h, each with its own phase (10,000 distinct grids);
- shared crons: 100 expressions in 3 zones (300 distinct schedules), 33 tasks each;
- distinct daily crons: `m h * * *` in 7 zones, every one its own schedule;
- distinct crons run by real time: `s m */2 * * *` in 3 DST zones, every one its own
  schedule, 12 fires a day each (the slowest kind of fire time to work out).

Figures, each the median of `--rounds` fresh apps at 200x60 (24h span, 186 columns):

1. first paint: from entering `run_test` until the title, axis and visible task rows
   are drawn (past 2,000 tasks the density row says it is counting, and counts in
   slices between other work);
2. density: from entering `run_test` until the density row is drawn;
3. a second: the widget's once-a-second check when nothing changed (a fingerprint of
   every task's schedule and flag, the axis start), called directly;
4. a change: a task turned off, then the density recounted (the fire times are kept:
   only the sum is redone), called directly;
5. the axis moves a column: the clock moved one column on, the density recounted;
6. zoom to 7d: `-` pressed until the 7d density row is drawn;
7. loop lag: how late a 10 ms sleep wakes while the density is counted (2 and 6).

    .venv/bin/python benchmarks/ui_timeline.py             # about a minute
    .venv/bin/python benchmarks/ui_timeline.py --rounds 5 --mix shared

The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual.app import App, ComposeResult

from tickui.common.timeutil import MICROS, to_micros
from tickui.model.records import Task
from tickui.model.spec import build_spec
from tickui.ui.view.rows import TaskRows
from tickui.ui.widgets.timeline import DayTimeline

SIZE = (200, 60)
BIG, SMALL = 10_000, 100
NOW = to_micros(datetime(2027, 3, 27, 19, 40, tzinfo=UTC))  # London's clocks go forward
ZONES = ("Europe/London", "Europe/Berlin", "America/New_York")
DAILY_ZONES = (*ZONES, "Asia/Tokyo", "Australia/Sydney", "UTC", "America/Los_Angeles")


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _task(i: int, fields: dict) -> Task:
    spec = build_spec({"name": f"task-{i:05d}", "command": ["true"], **fields}, NOW)
    return Task(i, spec.name, spec, "cli", True, None, 1, NOW, NOW, NOW, NOW, NOW)


def intervals(n: int) -> list[Task]:
    pick = random.Random(1)
    everies = (60, 300, 900, 3600, 6 * 3600)
    tasks = []
    for i in range(n):
        every = everies[i % len(everies)]
        anchor = datetime.fromtimestamp(NOW / MICROS - pick.randrange(every * 10), UTC)
        tasks.append(_task(i, {"every": f"{every}s", "anchor": anchor.isoformat()}))
    return tasks


def shared(n: int) -> list[Task]:
    exprs = [f"{m} */{s} * * *" for m in range(0, 60, 6) for s in (1, 2, 3, 4, 6, 8, 12)]
    exprs += [f"{2 * h} {h} * * *" for h in range(24)]  # daily
    exprs += [f"30 9 * * {d}" for d in range(6)]  # weekly: 100 in all
    return [
        _task(i, {"cron": exprs[i % 100], "tz": ZONES[i // 100 % len(ZONES)]}) for i in range(n)
    ]


def daily(n: int) -> list[Task]:
    return [
        _task(i, {"cron": f"{i % 60} {i // 60 % 24} * * *", "tz": DAILY_ZONES[i // 1440]})
        for i in range(n)
    ]


def real_time(n: int) -> list[Task]:
    return [
        _task(i, {"cron": f"{i % 60} {i // 60 % 60} */2 * * *", "tz": ZONES[i // 3600]})
        for i in range(n)
    ]


MIXES: dict[str, Callable[[int], list[Task]]] = {
    "intervals": intervals,
    "shared": shared,
    "daily": daily,
    "real_time": real_time,
}


class Bench(App):
    def __init__(self, tasks: list[Task]) -> None:
        super().__init__()
        self.clock = NOW
        rows = TaskRows()
        rows.load(tasks)
        self.timeline = DayTimeline(rows, lambda: self.clock, zone_name="UTC")

    def compose(self) -> ComposeResult:
        yield self.timeline


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


async def until_counted(pilot, timeline: DayTimeline, lags: list[float]) -> None:
    """Let the app run until the density row of the axis now is drawn, noting how late a
    10 ms sleep wakes meanwhile (the loop's lag while it is counted in slices)."""
    loop = asyncio.get_running_loop()

    def counted() -> bool:
        axis = timeline._axis_now()
        key = (axis.start, axis.step, axis.cols, timeline._version)
        return timeline._density_for == key and timeline._head_for is not None

    while not counted():
        before = loop.time()
        await asyncio.sleep(0.01)
        lags.append((loop.time() - before - 0.01) * 1000)
    await pilot.pause()


async def one_round(tasks: list[Task]) -> dict[str, float]:
    app = Bench(tasks)
    lags: list[float] = []
    start = time.perf_counter()
    async with app.run_test(size=SIZE) as pilot:
        timeline = app.timeline
        while timeline._head_for is None:  # the heads drawn once (counted, or counting)
            await asyncio.sleep(0.005)
        paint = time.perf_counter() - start
        await until_counted(pilot, timeline, lags)
        counted = time.perf_counter() - start
        timeline._each_second()
        second = timed(timeline._each_second)
        axis = timeline._axis_now()
        task = tasks[len(tasks) // 2]
        timeline.rows.upsert(replace(task, enabled=not task.enabled))
        changed = timed(lambda: timeline._count(list(timeline._tasks()), axis))
        app.clock = NOW + axis.step
        moved = timed(lambda: timeline._count(list(timeline._tasks()), timeline._axis_now()))
        start = time.perf_counter()
        await pilot.press("minus")
        await pilot.pause()
        await until_counted(pilot, timeline, lags)
        zoom = time.perf_counter() - start
    return {
        "first_paint_s": paint,
        "density_s": counted,
        "second_ms": second * 1000,
        "change_ms": changed * 1000,
        "column_ms": moved * 1000,
        "zoom_7d_s": zoom,
        "lag_max_ms": max(lags, default=0.0),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mix", choices=sorted(MIXES), action="append")
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    for mix in args.mix or list(MIXES):
        big, small = MIXES[mix](BIG), MIXES[mix](SMALL)
        runs: dict[str, list[dict[str, float]]] = {"big": [], "small": []}
        for _ in range(args.rounds):  # alternating, so the machine's load hits both
            runs["big"].append(await one_round(big))
            runs["small"].append(await one_round(small))
        figures = {}
        for size, rounds in runs.items():
            for key in rounds[0]:
                figures[f"{size}_{key}"] = round(med([r[key] for r in rounds]), 4)
        ratio = figures["big_first_paint_s"] / figures["small_first_paint_s"]
        figures["paint_ratio"] = round(ratio, 2)
        results[mix] = figures
        print(mix, json.dumps(figures), flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main())
