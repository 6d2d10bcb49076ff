"""Fencing at the moment of starting: an engine that lost its lease starts nothing.

In process, a dispatcher that "pauses" between the claim and the start (as SIGSTOP, Ctrl-Z
or a closed laptop lid would) shows what happens to the claimed runs; across processes, a
real holder is frozen with SIGSTOP in the middle of a burst, the standby takes over, and
the holder, resumed, must start nothing more.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_procs import lease_owner, rows, wait_for

from helpers import T0, rig
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.dispatch import SubprocessDispatcher
from tickui.engine import NOT_STARTED, EngineConfig, SchedulerEngine
from tickui.model.spec import build_spec
from tickui.store import Store


class PausingDispatcher(SubprocessDispatcher):
    """The real dispatcher, but the first dispatch 'freezes' the process: the clock moves
    on by `pause` seconds (and `during` runs, e.g. a standby's tick) before it goes on."""

    def __init__(self, *args, pause: float, during=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pause, self.during, self.paused = pause, during, False

    async def dispatch(self, jobs, may_start=None):
        if not self.paused:
            self.paused = True
            self.clock.advance(self.pause)
            if self.during is not None:
                await self.during()
        return await super().dispatch(jobs, may_start)


def _marker_task(name: str, out: Path, **fields) -> dict:
    script = f'echo "$TICKUI_OCCURRENCE_ID $TICKUI_SCHEDULED_FOR" >> {out}'
    return {"name": name, "every": "10s", "command": ["sh", "-c", script], **fields}


async def test_a_paused_holder_starts_nothing_and_hands_the_slots_back(store_target, tmp_path):
    """Paused past its lease with nobody taking over: on resume the engine starts none of
    the claimed runs, records them skipped (never ran) and gives the slots back, so the
    misfire policy runs each task once, late, as it would after any outage."""
    out = tmp_path / "ran.txt"
    db = store_target
    store = await Store.open(db)
    clock = ManualClock(T0)
    dispatcher = PausingDispatcher(store, clock, kill_grace=1.0, pause=40)
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(lease_ttl=30 * MICROS))
    try:
        for i in range(5):
            spec = build_spec(_marker_task(f"t{i}", out), clock.now())
            await store.add_task(spec, clock.now())
        await engine.start()  # claims the five first slots, then "freezes" for 40 s
        assert not out.exists(), "a run started after the lease lapsed"
        history = await store.history(limit=100)
        assert len(history) == 5
        assert {o.state for o in history} == {"skipped"}
        assert {o.detail for o in history} == {NOT_STARTED}
        assert all(o.started_at is None and o.pid is None for o in history)
        for i in range(5):  # each slot is handed back to its task
            task = await store.get_task(f"t{i}")
            assert task.next_run_at == history[0].scheduled_for
        # The next tick takes the lease again and the misfire policy (run_once) decides:
        # the slots are 40 s late, so each task runs once now.
        await engine.tick(clock.now())
        deadline = asyncio.get_running_loop().time() + 10
        while not await _settled(store, 10) and asyncio.get_running_loop().time() < deadline:
            await engine.reconcile()
            await asyncio.sleep(0.02)
        lines = out.read_text().splitlines()
        assert len(lines) == 5, lines
        ran = {o.task: o for o in await store.history(limit=100) if o.state == "succeeded"}
        assert sorted(ran) == [f"t{i}" for i in range(5)]
        # run_once: one run at the newest due slot, covering the handed-back one and the
        # four that passed during the pause.
        slot = history[0].scheduled_for
        assert all(o.scheduled_for == slot + 40 * MICROS for o in ran.values())
        assert all(o.covers == 5 for o in ran.values()), [o.covers for o in ran.values()]
    finally:
        await engine.stop(grace=0)
        await store.close()


async def _settled(store: Store, count: int) -> bool:
    done = [o for o in await store.history(limit=1000) if not o.active]
    return len(done) >= count and not await store.active_occurrences()


async def test_a_paused_holder_whose_lease_was_taken_starts_nothing(store_target, tmp_path):
    """A standby takes over while the holder is frozen between its claim and the start."""
    out = tmp_path / "ran.txt"
    db = store_target
    store_a, store_b = await Store.open(db), await Store.open(db)
    clock_a, clock_b = ManualClock(T0), ManualClock(T0)
    config = EngineConfig(lease_ttl=30 * MICROS, owner="standby-b")
    engine_b = SchedulerEngine(
        store_b, SubprocessDispatcher(store_b, clock_b, kill_grace=1.0), clock_b, config
    )

    async def standby_takes_over() -> None:
        clock_b.advance(40)
        await engine_b.start()

    dispatcher = PausingDispatcher(
        store_a, clock_a, kill_grace=1.0, pause=40, during=standby_takes_over
    )
    engine_a = SchedulerEngine(
        store_a, dispatcher, clock_a, EngineConfig(lease_ttl=30 * MICROS, owner="holder-a")
    )
    try:
        for i in range(3):
            spec = build_spec(_marker_task(f"t{i}", out), clock_a.now())
            await store_a.add_task(spec, clock_a.now())
        await engine_a.start()
        assert engine_b.holds_lease
        assert not engine_a.holds_lease
        owners = {o.id: o.owner for o in await store_a.history(limit=100)}
        ran_by_a = []
        if out.exists():
            ran_by_a = [
                line for line in out.read_text().splitlines()
                if owners[int(line.split()[0])] == "holder-a"
            ]  # fmt: skip
        assert ran_by_a == [], "the old holder started runs after the takeover"
        for occ in await store_a.history(limit=100):
            if occ.owner == "holder-a":
                assert occ.started_at is None and occ.pid is None
                assert occ.state in ("failed", "skipped"), occ
    finally:
        await engine_a.stop(grace=0)
        await engine_b.stop(grace=0)
        await store_a.close()
        await store_b.close()


async def test_without_a_pause_runs_start_as_before(store_target, tmp_path):
    """The fence costs nothing in the usual case: every claimed run starts."""
    out = tmp_path / "ran.txt"
    async with rig(store_target) as r:
        for i in range(20):
            await r.store.add_task(
                build_spec(_marker_task(f"t{i}", out), r.clock.now()), r.clock.now()
            )
        await r.engine.start()
        await r.settle()
        assert len(out.read_text().splitlines()) == 20
        assert {o.state for o in await r.history()} == {"succeeded"}


async def test_may_start_checks_the_store_after_a_pause_longer_than_the_renew_interval(
    store_target,
    tmp_path,
):
    async with rig(store_target, lease_ttl=30 * MICROS) as r:
        await r.engine.start()
        assert await r.engine.may_start()
        r.clock.advance(16)  # past half the TTL, within the TTL: the store must confirm
        # Another process takes the lease meanwhile (as if ours had lapsed and been taken).
        await r.store._conn.execute("UPDATE lease SET owner = 'someone-else', token = token + 1")
        assert not await r.engine.may_start()
        assert not r.engine.holds_lease


# ---- real processes: SIGSTOP the holder in the middle of a burst ----------------------------

BURST = 300


def _spawn(db: Path, config: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    handle = open(log, "w")  # noqa: SIM115 - closed by the process ending
    return subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), "--config", str(config), "run"],
        stdout=handle,
        stderr=subprocess.STDOUT,
        env=env,
    )


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.slow
def test_sigstopped_holder_starts_nothing_after_the_standby_took_over(store_target, tmp_path):
    db, out, config = store_target, tmp_path / "ran.txt", tmp_path / "tickui.toml"
    config.write_text('[engine]\nlease_ttl = "2s"\n')
    script = (
        f'echo "$TICKUI_OCCURRENCE_ID $TICKUI_TASK@$TICKUI_SCHEDULED_FOR $(date +%s%N)" >> {out}'
    )

    async def seed(now: float, anchor: int) -> None:
        store = await Store.open(db)
        try:
            for i in range(BURST):
                raw = {
                    "name": f"b{i:03d}",
                    "every": "10s",
                    "anchor": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(anchor)),
                    "command": ["sh", "-c", script],
                }
                spec = build_spec(raw, int(now * MICROS))
                await store.add_task(spec, int(now * MICROS))
        finally:
            await store.close()

    first = _spawn(db, config, tmp_path / "a.log")
    try:
        wait_for(lambda: "running on" in (tmp_path / "a.log").read_text(), 20, "the holder")
        second = _spawn(db, config, tmp_path / "b.log")
        try:
            wait_for(lambda: "standby" in (tmp_path / "b.log").read_text(), 20, "the standby")
            # Both up (each reads the tasks on every scan): a common slot 3 s ahead.
            now = time.time()
            asyncio.run(seed(now, int(now) + 3))
            # Freeze the holder as soon as its burst has begun: the engine that claimed the
            # first run to start (on a loaded host the lease may have passed to the second
            # engine before the burst; then that one is the holder to freeze).
            started = wait_for(lambda: len(_lines(out)), 30, "the burst", step=0.005)
            first_id = int(_lines(out)[0].split()[0])
            claimer = rows(db, f"SELECT owner FROM occurrences WHERE id = {first_id}")
            seconds = f":{second.pid}:" in claimer[0]["owner"]
            holder, standby = (second, first) if seconds else (first, second)
            os.kill(holder.pid, signal.SIGSTOP)
            at_stop = len(_lines(out))
            assert at_stop < BURST, f"the burst ended ({at_stop}) before SIGSTOP; too fast"
            # the 2 s lease lapses and the standby takes over
            wait_for(
                lambda: f":{standby.pid}:" in (lease_owner(db) or ""), 20, "the standby's lease"
            )
            resumed_ns = time.time_ns()
            os.kill(holder.pid, signal.SIGCONT)
            time.sleep(3)
        finally:
            # both told at once: the holder does not take the lease back and run the next
            # slot's burst while the standby winds down (a stopped holder gets it on SIGCONT)
            for engine in (first, second):
                os.kill(engine.pid, signal.SIGCONT)
                engine.send_signal(signal.SIGTERM)
            second.wait(30)
    finally:
        os.kill(first.pid, signal.SIGCONT)
        first.send_signal(signal.SIGTERM)
        first.wait(30)

    holder_log = (tmp_path / ("b.log" if seconds else "a.log")).read_text()
    assert "lease" in holder_log
    late = [line for line in _lines(out) if int(line.split()[2]) >= resumed_ns]

    async def claims() -> dict[int, tuple[str, int]]:
        store = await Store.open(db)
        try:
            return {
                o.id: (o.owner or "", o.lease_token or 0) for o in await store.history(limit=10_000)
            }
        finally:
            await store.close()

    by_id = asyncio.run(claims())
    holder_owner = f":{holder.pid}:"
    # runs the holder claimed under the lease it was frozen with (once the standby stops,
    # the holder may take the lease again and run later slots under a new token)
    frozen_with = min(token for owner, token in by_id.values() if holder_owner in owner)

    def frozen_holders(line: str) -> bool:
        owner, token = by_id[int(line.split()[0])]
        return holder_owner in owner and token == frozen_with

    late_by_holder = [line for line in late if frozen_holders(line)]
    assert late_by_holder == [], f"{len(late_by_holder)} run(s) started by the holder after resume"
    slots = [line.split()[1] for line in _lines(out)]
    assert len(set(slots)) == len(slots), "a slot ran twice"
    assert started >= 1


async def _pause_moving_one_clock(tmp_path, moved: str) -> list:
    """An engine claims five runs, then 'freezes' for 40 s (lease TTL 30 s) on one clock
    only: `monotonic` (the wall clock set back to where it was: NTP stepped it back during
    the pause) or `wall` (the wall clock jumps on, monotonic time stands). Returns the
    claimed runs; the marker file says whether any ran."""
    out = tmp_path / "ran.txt"
    store = await Store.open(tmp_path / "t.db")
    clock = ManualClock(T0)

    async def move_one_clock() -> None:
        if moved == "monotonic":
            clock.set(T0)  # the pause moved both 40 s on: the wall clock goes back
        else:
            clock.set(clock.now() + 40 * MICROS)  # no pause: the wall clock alone jumps

    pause = 40 if moved == "monotonic" else 0
    dispatcher = PausingDispatcher(store, clock, kill_grace=1.0, pause=pause, during=move_one_clock)
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(lease_ttl=30 * MICROS))
    try:
        for i in range(5):
            await store.add_task(build_spec(_marker_task(f"t{i}", out), T0), T0)
        await engine.start()
        assert not out.exists(), f"a run started after {moved} time passed the lease"
        return await store.history(limit=100)
    finally:
        await engine.stop(grace=0)
        await store.close()


async def test_the_lease_deadline_on_the_monotonic_clock_alone_stops_every_start(tmp_path):
    """README: the lease's deadline is kept on the monotonic clock. 40 s pass on it while
    the wall clock (stepped back) still shows the lease valid: nothing may start."""
    history = await _pause_moving_one_clock(tmp_path, "monotonic")
    assert len(history) == 5 and {o.state for o in history} == {"skipped"}
    assert {o.detail for o in history} == {NOT_STARTED}


async def test_the_lease_is_checked_with_the_wall_clock_too(tmp_path):
    """README: ... and checked with the wall clock: 40 s on the wall clock past a 30 s
    lease while monotonic time stands still: nothing may start either."""
    history = await _pause_moving_one_clock(tmp_path, "wall")
    assert len(history) == 5 and {o.state for o in history} == {"skipped"}
    assert {o.detail for o in history} == {NOT_STARTED}
