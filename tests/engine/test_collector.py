"""A scan with work runs with the cyclic collector paused, and leaves it as it found it."""

from __future__ import annotations

import gc

import pytest

from helpers import T0, AcceptingDispatcher
from tickui.common.clock import ManualClock
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.spec import build_spec
from tickui.store import Store


class Watching(AcceptingDispatcher):
    """Accepts every job and notes whether the collector was on while it was handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.collecting: list[bool] = []

    async def dispatch(self, jobs, may_start=None):
        self.collecting.append(gc.isenabled())
        return await super().dispatch(jobs, may_start)


@pytest.mark.parametrize("on_before", [True, False])
async def test_a_scan_pauses_the_collector_and_puts_it_back(tmp_path, on_before):
    store = await Store.open(tmp_path / "tickui.db")
    clock = ManualClock(T0)
    dispatcher = Watching()
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(batch=2))
    was_on = gc.isenabled()
    try:
        for name in ("a", "b", "c"):
            spec = build_spec({"name": name, "every": "1h", "command": ["true"]}, T0)
            await store.add_task(spec, T0)
        (gc.enable if on_before else gc.disable)()
        await engine.start()  # its first scan finds all three due: two pages
        assert gc.isenabled() is on_before  # as it was before the scan
        assert dispatcher.collecting == [False, False]  # off while each page went out
        assert len([o for o in await store.history() if o.state == "accepted"]) == 3
    finally:
        (gc.enable if was_on else gc.disable)()
        await engine.stop(grace=0)
        await store.close()
