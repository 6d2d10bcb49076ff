"""A claim whose COMMIT's answer is lost (the connection dropped under it): the store looks
the claim up on a new connection and returns it when it was committed, and fails when it
was not; either way no slot is claimed twice or left claimed and forgotten.

The server is real; the lost answer is made by closing the connection around COMMIT."""

from __future__ import annotations

import psycopg
import pytest

from helpers import T0, rig
from tickui.common.timeutil import MICROS
from tickui.model.planning import DueTask, Plan, Planned
from tickui.store.pgconn import CommitUnknown, lost


def _plan(task, slot: int) -> Plan:
    due = DueTask(task.id, task.name, task.schedule, slot, "run_once", "forbid", 0, task.generation)
    return Plan(due, slot + MICROS, [Planned(slot, "claimed")])


@pytest.mark.parametrize("committed", [True, False])
async def test_a_claim_whose_commit_answer_was_lost(pg_url, committed):
    async with rig(pg_url) as r:
        await r.add("job", every="1h", anchor="2027-01-15T08:00:00Z")
        got = await r.store.acquire_lease(
            r.engine.owner, r.clock.now(), 30 * MICROS, ("h", 1, 1), lambda *_: False
        )
        token = got.lease.token
        task = await r.store.get_task("job")
        conn = r.store._conn
        real_run = conn.run

        async def run(sql, params=None):
            if sql == "COMMIT":
                if committed:
                    await real_run(sql, params)
                await conn.raw.close()  # the answer (or the COMMIT itself) is lost
                try:
                    await conn.raw.execute("SELECT 1")  # as libpq says it: connection closed
                except psycopg.OperationalError as exc:
                    raise lost(exc) from None
            return await real_run(sql, params)

        conn.run = run
        try:
            if committed:
                claimed = await r.store.claim([_plan(task, T0)], r.engine.owner, token, T0)
                assert [o.scheduled_for for o in claimed] == [T0]
            else:
                with pytest.raises(CommitUnknown):
                    await r.store.claim([_plan(task, T0)], r.engine.owner, token, T0)
        finally:
            conn.run = real_run
        rows = [o for o in await r.store.history("job") if o.scheduled_for == T0]
        assert len(rows) == (1 if committed else 0)
