"""A reconcile that runs while a dispatch is under way (a run-now's beside a scan's, a
cancel's) must not settle the runs being dispatched before their receipts are in hand."""

from __future__ import annotations

import pytest

from helpers import T0, AcceptingDispatcher
from tickui.common.clock import ManualClock
from tickui.dispatch import Receipt
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.occurrence import RUN_COMPLETED
from tickui.model.spec import build_spec
from tickui.store import NewEvent, Store


class EndsAtOnce(AcceptingDispatcher):
    """A runtime that reports a run's end (no transition before it) while the dispatch is
    still under way, and lets another reconcile run before the receipt is returned."""

    def __init__(self, store: Store, clock: ManualClock, interleave: bool) -> None:
        super().__init__()
        self.store, self.clock, self.interleave = store, clock, interleave
        self.engine: SchedulerEngine | None = None
        self.inner: list[list[int]] = []

    async def dispatch(self, jobs, may_start=None):
        await self.store.append_events(
            [
                NewEvent(self.clock.now(), RUN_COMPLETED, job.occurrence.command_id,
                         f"run-{job.occurrence.id}", {"exit_code": 0})
                for job in jobs
            ]
        )  # fmt: skip
        if self.interleave:
            assert self.engine is not None
            self.inner.append(await self.engine.reconcile())
        return [Receipt(job.occurrence.command_id or "") for job in jobs]


@pytest.mark.parametrize("interleave", [False, True])
async def test_a_run_that_ends_during_its_dispatch_settles_succeeded(
    store_target, tmp_path, interleave
):
    store = await Store.open(store_target)
    clock = ManualClock(T0)
    dispatcher = EndsAtOnce(store, clock, interleave)
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig())
    dispatcher.engine = engine
    try:
        await store.add_task(build_spec({"name": "a", "every": "1h", "command": ["true"]}, T0), T0)
        await engine.start()
        occ = await engine.run_now("a")
        assert occ.state == "succeeded", occ
        assert occ.exit_code == 0
        assert not await store.active_occurrences()
        if interleave:  # the reconcile inside each dispatch ran and left its runs alone
            assert dispatcher.inner and all(changed == [] for changed in dispatcher.inner)
        states = [o.state for o in await store.history("a")]
        assert states and set(states) == {"succeeded"}, states
    finally:
        await engine.stop(grace=0)
        await store.close()
