"""Shared helpers for tests: run the real CLI, build an engine on a real SQLite file."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.dispatch import Dispatcher, Receipt, SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.planning import DueTask, Plan, Planned
from tickui.model.records import Occurrence
from tickui.model.spec import build_spec
from tickui.store import Store, schema

# A fixed, whole-minute instant for manual clocks: 2027-01-15T08:00:00Z.
T0 = 1_800_000_000 * MICROS


def cli(
    *args: str,
    db: Path | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `tickui ARGS` as a separate process, as a user would."""
    full_env = dict(os.environ)
    full_env.pop("TICKUI_DB", None)
    full_env.pop("TICKUI_STORE", None)
    if env:
        full_env.update(env)
    prefix = ["--db", str(db)] if db is not None else []
    return subprocess.run(
        [sys.executable, "-m", "tickui", *prefix, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
    )


def cli_json(*args: str, db: Path) -> list[dict]:
    result = cli(*args, "--json", db=db)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@dataclass
class Rig:
    store: Store
    clock: ManualClock
    engine: SchedulerEngine

    async def add(self, name: str, **fields) -> None:
        fields.setdefault("command", ["true"])
        await self.store.add_task(
            build_spec({"name": name, **fields}, self.clock.now()), self.clock.now()
        )

    async def tick(self, seconds: float = 0) -> None:
        if seconds:
            self.clock.advance(seconds)
        await self.engine.tick(self.clock.now())

    async def history(self, task: str | None = None) -> list[Occurrence]:
        return list(reversed(await self.store.history(task, limit=10_000)))

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait (in real time) until no occurrence is active, reconciling as events arrive."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            await self.engine.reconcile()
            if not await self.store.active_occurrences():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"occurrences still active after {timeout:.1f}s")


@asynccontextmanager
async def rig(db: Path, start: int = T0, **config) -> AsyncIterator[Rig]:
    """An engine with a manual clock and the real subprocess dispatcher on a real file."""
    store = await Store.open(db)
    clock = ManualClock(start)
    dispatcher = SubprocessDispatcher(store, clock, kill_grace=1.0)
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(**config))
    try:
        yield Rig(store, clock, engine)
    finally:
        await engine.stop(grace=0)
        await store.close()


async def wait_for(predicate, timeout: float = 10.0, what: str = "the condition"):
    """Poll `predicate()` (sync or async) in real time until it is true; return its value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what}")
        await asyncio.sleep(0.02)


def poll(predicate, timeout: float = 10.0, what: str = "the condition"):
    """Outside an event loop (real processes, tmux): check `predicate` every 0.1 s until it
    returns something true, and return that; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def write_schema_1_file(path) -> None:
    """A database file as the first tickui wrote it: task 'old' (every 1m), one run."""
    conn = sqlite3.connect(path)
    for statement in schema.MIGRATIONS[0]:
        conn.execute(statement)
    spec = build_spec({"name": "old", "every": "1m", "command": ["true"]}, T0)
    conn.execute(
        "INSERT INTO tasks (name, spec, definition_hash, created_at, updated_at, anchor,"
        " next_run_at, due_at) VALUES (?,?,?,?,?,?,?,?)",
        ("old", spec.to_json(), spec.definition_hash(), T0, T0, T0, T0, T0),
    )
    conn.execute(
        "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at)"
        " VALUES (1, 'old', 'scheduled', ?, 'succeeded', ?)",
        (T0, T0),
    )
    conn.execute("PRAGMA user_version = 1")
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.commit()
    conn.close()


class AcceptingDispatcher(Dispatcher):
    """Accepts every job and starts nothing: only the events a test appends settle it."""

    def __init__(self) -> None:
        self.accepted: list[int] = []

    async def dispatch(self, jobs, may_start=None) -> list[Receipt]:
        self.accepted.extend(job.occurrence.id for job in jobs)
        return [Receipt(job.occurrence.command_id or "") for job in jobs]

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        return False

    def active(self) -> int:
        return 0

    async def shutdown(self, grace: float) -> None:
        return None


LEASE_OWNER = "host:1:abc"


def one_slot_plan(task, slot: int) -> Plan:
    """A plan claiming `task`'s one slot at `slot` (run once, forbid), as the engine makes."""
    due = DueTask(task.id, task.name, task.schedule, slot, "run_once", "forbid", 0, task.generation)
    return Plan(due, slot + 60 * MICROS, [Planned(slot, "claimed")])


async def store_holding_lease(target, names):
    """A store whose lease LEASE_OWNER holds, with `names` as tasks every minute: the
    store, the lease's token and the tasks."""
    store = await Store.open(target)
    got = await store.acquire_lease(
        LEASE_OWNER, T0, 3600 * MICROS, ("host", 1, 1), lambda *_: False
    )
    for name in names:
        await store.add_task(build_spec({"name": name, "every": "1m", "command": ["true"]}, T0), T0)
    return store, got.lease.token, [await store.get_task(name) for name in names]
