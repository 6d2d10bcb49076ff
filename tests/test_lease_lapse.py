"""A holder whose lease lapsed while no one else took it (a pause longer than the TTL,
a suspended laptop, a wall-clock step forward) takes it back under a new token. Its own
runs still going are its own: not orphans to kill and record INTERRUPTED."""

from __future__ import annotations

from helpers import rig, wait_for
from tickui.timeutil import MICROS


async def test_own_runs_survive_taking_a_lapsed_lease_back(tmp_path):
    go = tmp_path / "go"
    started = tmp_path / "started"
    command = ["sh", "-c", f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done"]
    async with rig(tmp_path / "t.db", lease_ttl=30 * MICROS) as r:
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


async def test_a_gone_engines_runs_are_still_recovered(tmp_path):
    """The exception stays narrow: another owner's run under an older token is recovered."""
    async with rig(tmp_path / "t.db", lease_ttl=30 * MICROS) as r:
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
