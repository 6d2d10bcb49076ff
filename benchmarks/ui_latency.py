"""How soon the dashboard shows what happened: a run's exit, another process's change.

Headless (Pilot), a real SQLite file, the real subprocess dispatcher and ticker.

1. Exit to row: a task whose command prints `time.time()` as its very last act; the time
   from that print until the dashboard's occurrence row reads `succeeded` (target 250 ms).
2. Other process to row: `tickui task disable` run as a separate process; from its exit
   until the dashboard's task row shows it disabled (target 1 s).

Baseline in the same run: the same exit-to-row wait for the store itself (polling the
database every 1 ms for the settled state), so the ratio shows what the UI adds.

    .venv/bin/python benchmarks/ui_latency.py [--runs 15]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tickui.common.clock import SystemClock
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import Settings
from tickui.store import Store
from tickui.ui.app import TickuiApp

STAMP = [sys.executable, "-c", "import time; print(repr(time.time()), flush=True)"]


def _stamp_of(log_path: str) -> float:
    return float(Path(log_path).read_text().split()[-1])


async def exit_to_row(app: TickuiApp, pilot, runs: int) -> tuple[list[float], list[float]]:
    ui, store_only = [], []
    store = app.host.store
    for _ in range(runs):
        occ = await app.host.engine.run_now("stamp")
        seen_store = None
        while True:
            row = app.board.occ_rows.by_id.get(occ.id)
            if seen_store is None and (await store.get_occurrence(occ.id)).state == "succeeded":
                seen_store = time.time()
            if row is not None and row.state == "succeeded":
                seen_ui = time.time()
                break
            await asyncio.sleep(0.001)
        if seen_store is None:
            seen_store = seen_ui
        settled = await store.get_occurrence(occ.id)
        stamp = _stamp_of(settled.log_path)
        ui.append(seen_ui - stamp)
        store_only.append(seen_store - stamp)
        await pilot.pause(0.05)
    return ui, store_only


async def other_process_to_row(app: TickuiApp, db: Path, runs: int) -> list[float]:
    times = []
    enabled = True
    for _ in range(runs):
        action = "disable" if enabled else "enable"
        cmd = [sys.executable, "-m", "tickui", "--db", str(db), "task", action, "target"]
        await asyncio.to_thread(subprocess.run, cmd, check=True, capture_output=True)
        done = time.time()
        task_id = next(t.id for t in app.board.task_rows.by_id.values() if t.name == "target")
        while app.board.task_rows.by_id[task_id].enabled == enabled:
            await asyncio.sleep(0.002)
        times.append(time.time() - done)
        enabled = not enabled
    return times


async def main(runs: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="tickui-bench-"))
    db = scratch / "latency.db"
    clock = SystemClock()

    async def factory() -> Host:
        store = await Store.open(db)
        now = clock.now()
        for name, command in (("stamp", STAMP), ("target", ["true"])):
            spec = build_spec({"name": name, "cron": "0 0 1 1 *", "command": command}, now)
            await store.add_task(spec, now)
        return build_host(store, clock, Settings())

    app = TickuiApp(factory)
    async with app.run_test(size=(160, 48)) as pilot:
        await app.ready.wait()
        ui, store_only = await exit_to_row(app, pilot, runs)
        other = await other_process_to_row(app, db, max(5, runs // 2))
    med_ui, med_store = statistics.median(ui), statistics.median(store_only)
    result = {
        "exit_to_row_ms_median": round(med_ui * 1000, 1),
        "exit_to_row_ms_max": round(max(ui) * 1000, 1),
        "exit_to_store_ms_median": round(med_store * 1000, 1),
        "ui_over_store_ratio": round(med_ui / med_store, 2) if med_store > 0 else None,
        "other_process_to_row_ms_median": round(statistics.median(other) * 1000, 1),
        "other_process_to_row_ms_max": round(max(other) * 1000, 1),
        "runs": runs,
    }
    print(
        f"run exit -> dashboard row: median {result['exit_to_row_ms_median']} ms,"
        f" max {result['exit_to_row_ms_max']} ms (target 250 ms)"
    )
    print(
        f"run exit -> settled in the store (baseline): median"
        f" {result['exit_to_store_ms_median']} ms; ratio {result['ui_over_store_ratio']}"
    )
    print(
        f"other process -> dashboard row: median {result['other_process_to_row_ms_median']}"
        f" ms, max {result['other_process_to_row_ms_max']} ms (target 1000 ms)"
    )
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    print(json.dumps(asyncio.run(main(parser.parse_args().runs))))
