"""A holder whose lease lapsed while no one else took it (a pause longer than the TTL,
a suspended laptop, a wall-clock step forward) takes it back under a new token. Its own
runs still going are its own: not orphans to kill and record INTERRUPTED."""

from __future__ import annotations

import asyncio

from helpers import T0, rig, wait_for
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.dispatch import SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.spec import build_spec
from tickui.store import Store


async def test_own_runs_survive_taking_a_lapsed_lease_back(store_target, tmp_path):
    go = tmp_path / "go"
    started = tmp_path / "started"
    command = ["sh", "-c", f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done"]
    async with rig(store_target, lease_ttl=30 * MICROS) as r:
        await r.add("long", every="1h", command=command)
        await r.engine.start()
        await wait_for(started.exists, 10, "the run to start")
        await r.engine.reconcile()
        (run,) = await r.history()
        token = (await r.store.lease()).token
        r.clock.advance(120)  # past the TTL: the lease lapsed, nobody took it
        await r.tick()
        assert r.engine.holds_lease and (await r.store.lease()).token > token
        (after,) = [o for o in await r.history() if o.id == run.id]
        assert after.state in ("accepted", "running"), (after.state, after.detail)
        go.touch()
        await r.settle()
        (done,) = [o for o in await r.history() if o.id == run.id]
        assert done.state == "succeeded", (done.state, done.error_code, done.detail)


async def test_a_gone_engines_runs_are_still_recovered(store_target, tmp_path):
    """The exception stays narrow: another owner's run under an older token is recovered."""
    async with rig(store_target, lease_ttl=30 * MICROS) as r:
        await r.add("t", every="1h", command=["true"])
        await r.store._conn.execute(
            "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
            " owner, lease_token) SELECT id, name, 'manual', 1, 'running', 1, 'gone:1:x', 0"
            " FROM tasks"
        )
        await r.store._conn.commit()
        await r.engine.start()
        (occ,) = [o for o in await r.history() if o.owner == "gone:1:x"]
        assert occ.state == "failed" and occ.error_code == "INTERRUPTED"


class FreezingDispatcher(SubprocessDispatcher):
    """The real dispatcher, frozen once between the lease check and the fork (as SIGSTOP
    between the two would): the lease lapses meanwhile, in engine and in real time."""

    frozen = False

    async def _spawn(self, job, gated=False):
        if not self.frozen:
            self.frozen = True
            self.clock.advance(40)
            await asyncio.sleep(0.2)
        return await super()._spawn(job, gated)


async def test_a_pause_between_the_check_and_the_fork_never_runs_the_command(
    store_target, tmp_path
):
    """The process is created behind a gate; the lease is asked again after the fork and,
    lost, the gate closes: the command never runs, and the run is recorded not started."""
    store = await Store.open(store_target)
    clock = ManualClock(T0)
    dispatcher = FreezingDispatcher(store, clock, kill_grace=1.0)
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(lease_ttl=30 * MICROS))
    pids = tmp_path / "pids"
    try:
        for i in range(3):
            command = ["sh", "-c", f"echo $$ >> {pids}; exec sleep 300"]
            spec = build_spec({"name": f"t{i}", "every": "1h", "command": command}, T0)
            await store.add_task(spec, T0)
        await engine.start()
        history = await store.history(limit=10)
        assert not [o for o in history if o.state in ("accepted", "running")], [
            (o.task, o.state, o.detail) for o in history
        ]
        assert sum(o.state == "skipped" for o in history) == 3, [
            (o.task, o.state, o.detail) for o in history
        ]
        assert not pids.exists(), "a command ran after the lease was lost"
    finally:
        await engine.stop(grace=0)
        await store.close()
