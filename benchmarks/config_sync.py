"""How long a tickui.toml of 10,000 [[task]] entries takes to reach the database, against
Python's own TOML parser reading the same file and sqlite3 inserting as many rows.

Generated file: N tasks (default 10,000), about half cron (shared expressions such as
`*/5 * * * *` and `@daily`, and distinct ones such as `17 4 * * *`; 30% in a time zone;
10% with jitter), the rest intervals (20% with jitter), some with a timeout, retries or
disabled. Each round runs three child processes, as three `tickui run` starts would:

- new: `settings.load` (read, parse, build every TaskSpec) then `Store.sync_tasks` into a
  new database;
- same: the same file synced again into that database (nothing changed);
- changed: a file with 10% of the commands changed synced into a copy of it.

Each child also times, in the same process, the baselines: `tomllib.loads` of the file's
text, and `sqlite3` `executemany` of N prepared rows into the tasks table of a new
database in one transaction. A 5 ms sleep loop measures the event loop's lag during the
sync (the dashboard's loop runs it).

    .venv/bin/python benchmarks/config_sync.py                 # 10,000 tasks, 5 rounds
    .venv/bin/python benchmarks/config_sync.py --tasks 2000 --rounds 3
    .venv/bin/python benchmarks/config_sync.py --source DIR    # tickui from another checkout

Last line: one JSON object (medians in ms, ratios).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_800_000_000_000_000  # 2027-01-15, microseconds
CRONS = ("*/5 * * * *", "0 * * * *", "0 9 * * 1-5", "30 2 * * 0", "@hourly", "@daily")
CRONS += ("0 0 1 * *", "*/15 8-18 * * 1-5", "0 */2 * * *", "0 4 L * *", "*/10 * * * * *")
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney")
EVERY = ("30s", "1m", "5m", "90s", "1h", "10m")
PHASES = ("new", "same", "changed")


def config_text(count: int, changed: bool = False, seed: int = 1) -> str:
    rnd = random.Random(seed)
    tables = []
    for i in range(count):
        lines = ["[[task]]", f'name = "job-{i:05d}"']
        if rnd.random() < 0.5:
            shared = rnd.random() < 0.5
            cron = rnd.choice(CRONS) if shared else f"{rnd.randrange(60)} {rnd.randrange(24)} * * *"
            lines.append(f'cron = "{cron}"')
            if rnd.random() < 0.3:
                lines.append(f'tz = "{rnd.choice(ZONES)}"')
            if rnd.random() < 0.1 and not cron.startswith("*/10 "):
                lines.append('jitter = "1s"')
        else:
            lines.append(f'every = "{rnd.choice(EVERY)}"')
            if rnd.random() < 0.2:
                lines.append('jitter = "5s"')
        suffix = " changed" if changed and i % 10 == 0 else ""
        lines.append(f'command = ["echo", "job {i}{suffix}"]')
        if rnd.random() < 0.2:
            lines.append('timeout = "5m"')
        if rnd.random() < 0.1:
            lines.append("retries = 2")
        if rnd.random() < 0.05:
            lines.append("disabled = true")
        tables.append("\n".join(lines))
    return "\n\n".join(tables) + "\n"


# ---- one child: one sync, and the baselines beside it ---------------------------------


async def _lag_probe(lags: list[float], stop) -> None:
    import asyncio

    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.005)
        lags.append(time.perf_counter() - start - 0.005)


async def _child(config: Path, db: Path, now: int) -> dict:
    import asyncio

    from tickui.runtime import settings as config_mod
    from tickui.store import Store

    started = time.perf_counter()
    settings = config_mod.load(config, now, env={})
    loaded = time.perf_counter()
    store = await Store.open(db)
    try:
        opened = time.perf_counter()
        lags: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.create_task(_lag_probe(lags, stop))
        await asyncio.sleep(0)
        begun = time.perf_counter()
        report = await store.sync_tasks(settings.tasks, now)
        synced = time.perf_counter()
        stop.set()
        await probe
    finally:
        await store.close()
    return {
        "load_ms": (loaded - started) * 1000,
        "sync_ms": (synced - begun) * 1000,
        "open_ms": (opened - loaded) * 1000,
        "total_ms": (loaded - started + synced - begun) * 1000,
        "lag_max_ms": max(lags, default=0.0) * 1000,
        "added": len(report.added),
        "updated": len(report.updated),
        "removed": len(report.removed),
    }


def _toml_ms(config: Path) -> float:
    import tomllib

    started = time.perf_counter()
    tomllib.loads(config.read_text("utf-8"))
    return (time.perf_counter() - started) * 1000


def _executemany_ms(scratch: Path, count: int) -> float:
    """N rows like the sync's, into the tasks table of a new database of the same schema
    (made by the store), in one transaction."""
    import asyncio
    import sqlite3

    from tickui.store import Store

    db = scratch / "baseline.db"

    async def schema() -> None:
        await (await Store.open(db)).close()

    asyncio.run(schema())
    spec = '{"command": ["echo", "job"], "expr": "300000000", "kind": "interval"}'
    rows = [
        (f"job-{i:05d}", spec, f"{i:016x}", "config", 1, NOW, NOW, NOW, NOW + 1, NOW + 1)
        for i in range(count)
    ]
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO tasks (name, spec, definition_hash, source, enabled, created_at,"
            " updated_at, anchor, next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        conn.execute("COMMIT")
        return (time.perf_counter() - started) * 1000
    finally:
        conn.close()


def child_main(args: argparse.Namespace) -> None:
    import asyncio

    config, db = Path(args.config), Path(args.db)
    result = asyncio.run(_child(config, db, args.now))
    result["toml_ms"] = _toml_ms(config)
    if args.baseline_rows:
        result["executemany_ms"] = _executemany_ms(db.parent, args.baseline_rows)
    print(json.dumps(result))


# ---- the parent: files, rounds, medians ------------------------------------------------


def _run_child(source: Path, config: Path, db: Path, now: int, rows: int = 0) -> dict:
    command = [sys.executable, __file__, "--child", "--config", str(config), "--db", str(db)]
    command += ["--now", str(now), "--source", str(source), "--baseline-rows", str(rows)]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(source: Path, scratch: Path, same: Path, changed: Path, count: int) -> dict:
    db = scratch / "tickui.db"
    for leftover in scratch.glob("*.db*"):
        leftover.unlink()
    result = {"new": _run_child(source, same, db, NOW, rows=count)}
    result["same"] = _run_child(source, same, db, NOW + 60_000_000)
    result["changed"] = _run_child(source, changed, db, NOW + 120_000_000)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--source", default=str(ROOT), help="import tickui from this checkout")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--now", type=int, default=NOW, help=argparse.SUPPRESS)
    parser.add_argument("--baseline-rows", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.source).resolve()))
    if args.child:
        child_main(args)
        return
    source = Path(args.source).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="tickui-config-sync-"))
    try:
        same, changed = scratch / "tickui.toml", scratch / "changed.toml"
        same.write_text(config_text(args.tasks), "utf-8")
        changed.write_text(config_text(args.tasks, changed=True), "utf-8")
        rounds = []
        for number in range(1, args.rounds + 1):
            result = one_round(source, scratch, same, changed, args.tasks)
            rounds.append(result)
            shown = ", ".join(
                f"{phase} {result[phase]['total_ms']:.0f} ms"
                f" (load {result[phase]['load_ms']:.0f} + sync {result[phase]['sync_ms']:.0f})"
                for phase in PHASES
            )
            print(f"round {number}: {shown}; tomllib {result['new']['toml_ms']:.0f} ms")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = summarise(rounds, args.tasks)
    print_table(summary)
    print(json.dumps(summary))


def summarise(rounds: list[dict], count: int) -> dict:
    def median(phase: str, key: str) -> float:
        return round(statistics.median(r[phase][key] for r in rounds), 1)

    toml = median("new", "toml_ms")
    summary: dict = {"tasks": count, "rounds": len(rounds), "tomllib_ms": toml}
    summary["executemany_ms"] = median("new", "executemany_ms")
    for phase in PHASES:
        totals = [r[phase]["total_ms"] / r["new"]["toml_ms"] for r in rounds]
        summary[phase] = {
            key: median(phase, key)
            for key in ("total_ms", "load_ms", "sync_ms", "open_ms", "lag_max_ms")
        }
        summary[phase]["counts"] = {
            k: rounds[-1][phase][k] for k in ("added", "updated", "removed")
        }
        summary[phase]["ratio_to_tomllib"] = round(statistics.median(totals), 2)
    return summary


def print_table(summary: dict) -> None:
    print(f"\n{summary['tasks']} tasks, medians of {summary['rounds']} rounds (ms)")
    print(f"baseline: tomllib.loads {summary['tomllib_ms']:.0f},"
          f" sqlite3 executemany of as many rows {summary['executemany_ms']:.0f}")  # fmt: skip
    print(f"{'':8} {'total':>7} {'load':>7} {'sync':>7} {'x tomllib':>10} {'lag max':>8}")
    for phase in PHASES:
        row = summary[phase]
        print(
            f"{phase:8} {row['total_ms']:7.0f} {row['load_ms']:7.0f} {row['sync_ms']:7.0f}"
            f" {row['ratio_to_tomllib']:10.2f} {row['lag_max_ms']:8.1f}"
        )


if __name__ == "__main__":
    main()
