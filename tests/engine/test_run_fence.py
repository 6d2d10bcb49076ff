"""Runs are fenced by the engine's lease file: renewed with the store lease, they go on;
unrenewed (a frozen or cut-off engine), they end by themselves before the lease lapses.
Real processes; the engine's clock is manual, so renewals happen only when it ticks."""

from __future__ import annotations

import asyncio
import time

from helpers import rig
from tickui.common.timeutil import MICROS
from tickui.dispatch.journals import RENEWED_BY, fence_deadline, fence_fits
from tickui.supervisor.lease import read_lease
from tickui.supervisor.main import LEASE_CHECK

TTL = 4  # seconds: with the rig's kill grace of 1 s, runs are fenced 2.4 s after a renewal


def test_the_fence_ends_runs_before_the_lease_lapses_by_the_grace():
    asked = 100.0
    assert fence_deadline(asked, 30, 3.0) == asked + 30 - 3.0 - LEASE_CHECK - 1.0
    assert fence_fits(30, 3.0) and fence_fits(11, 3.0) and not fence_fits(10, 3.0)
    # a TTL too short for the grace: not before the next renewal, not a fence at once
    assert fence_deadline(asked, 2, 3.0) == asked + 2 * RENEWED_BY


async def test_an_unrenewed_lease_fences_the_run_and_says_so(store_target, tmp_path):
    async with rig(store_target, lease_ttl=TTL * MICROS) as r:
        await r.add("long", every="1h", command=["sleep", "60"])
        began = time.monotonic()
        await r.engine.start()
        lease = r.engine.dispatcher.runner.lease
        deadline = read_lease(str(lease))
        assert deadline is not None and began < deadline <= time.monotonic() + TTL * RENEWED_BY
        await r.settle(timeout=15)  # no tick: the engine renews nothing
        took = time.monotonic() - began
        (run,) = await r.history()
    assert run.state == "failed" and run.error_code == "INTERRUPTED", (run.state, run.detail)
    assert run.detail == "fenced: its lease ran out"
    assert run.exit_code == -15
    assert TTL * RENEWED_BY <= took < TTL, f"fenced after {took:.2f}s"
    assert not lease.exists(), "the lease file outlived its engine"


async def test_a_renewed_lease_keeps_the_run_going(store_target, tmp_path):
    async with rig(store_target, lease_ttl=TTL * MICROS) as r:
        await r.add("short", every="1h", command=["sh", "-c", "sleep 5; exit 4"])
        await r.engine.start()
        lease = r.engine.dispatcher.runner.lease
        first = read_lease(str(lease))
        end = time.monotonic() + 8
        while r.engine.dispatcher.active() and time.monotonic() < end:
            await r.tick(TTL / 2)  # each renewal moves the deadline on
            await asyncio.sleep(0.2)
        await r.settle()
        (run,) = [o for o in await r.history() if o.task == "short"][:1]
        assert read_lease(str(lease)) > first
    assert run.state == "failed" and run.exit_code == 4, (run.state, run.detail)
