"""What the metrics count, from a real engine's changes on a real database (manual clock):
misfires, skips, retries, outcomes and lateness, each once; a gone engine's runs not at all.
The endpoint over HTTP is tested in test_metrics.py."""

from __future__ import annotations

import asyncio

from helpers import T0, rig, wait_for
from tickui.common.timeutil import MICROS
from tickui.engine import EngineChange
from tickui.runtime.assembly import build_ticker_for
from tickui.runtime.metrics import Families, MetricsObserver
from tickui.ticks.config import TickerConfig


def observe(r) -> MetricsObserver:
    ticker = build_ticker_for(r.store, r.clock, TickerConfig(), in_process_bus=True)
    return MetricsObserver(Families(), r.store, r.clock, r.engine, ticker, None, 10 * MICROS)


def sample(observer: MetricsObserver, name: str, **labels: str) -> float:
    return observer.families.registry.get_sample_value(name, labels) or 0.0


async def test_a_misfire_counts_its_missed_slots_its_skip_and_its_late_run_once(tmp_path):
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("m", every="10s", misfire="skip", command=["true"])
        await r.engine.start()
        await r.settle()
    # Down for 62 s: the slots at +10 .. +50 are missed (one skipped row), +60 runs late.
    async with rig(db, start=T0 + 62 * MICROS) as r:
        seen = observe(r)
        await r.engine.start()
        await r.settle()
        await seen.flush()
        await seen.flush()  # a change told twice is counted once
        assert sample(seen, "tickui_slots_missed_total", task="m") == 5
        assert sample(seen, "tickui_slots_skipped_total", task="m") == 1
        assert sample(seen, "tickui_runs_total", task="m", outcome="succeeded") == 1
        assert sample(seen, "tickui_run_start_lateness_seconds_count") == 1
        assert sample(seen, "tickui_run_start_lateness_seconds_sum") >= 2  # its slot was +60
        assert sample(seen, "tickui_retries_total", task="m") == 0
        await seen.sample()
        assert sample(seen, "tickui_lease_held") == 1
        assert sample(seen, "tickui_runs_active") == 0
        await seen.close()


async def test_retries_are_counted_as_they_start_and_each_attempt_as_it_ends(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        seen = observe(r)
        await r.add("r", every="1h", retries=2, retry_delay="1s", command=["false"])
        await r.engine.start()
        await r.settle()
        await seen.flush()
        assert sample(seen, "tickui_runs_total", task="r", outcome="failed") == 1
        await seen.sample()
        assert sample(seen, "tickui_runs_queued") == 1  # the retry waits for its delay
        for _ in range(10):  # the retries' delays: 1 s, then 2 s
            await r.tick(1)
            await r.settle()
            if len(await r.history("r")) == 3 and not await r.store.queued_of():
                break
        await seen.flush()
        assert sample(seen, "tickui_retries_total", task="r") == 2
        assert sample(seen, "tickui_runs_total", task="r", outcome="failed") == 3
        # retries are late by design: the lateness is the first attempts'
        assert sample(seen, "tickui_run_start_lateness_seconds_count") == 1
        await seen.sample()
        assert sample(seen, "tickui_runs_queued") == 0
        await seen.close()


async def test_runs_of_a_vanished_engine_are_not_this_engines_to_count(tmp_path):
    """As tests/engine's recovery test: an engine "crashes" with a run going; the next one
    ends that run INTERRUPTED, and counts it not as a run of its own."""
    db = tmp_path / "t.db"
    async with rig(db) as a:
        await a.add("slow", every="1h", command=["sleep", "60"])
        await a.engine.start()
        await wait_for(
            lambda: a.store.active_occurrences(), what="slow running"
        )  # claimed (and starting)
        orphan = (await a.history("slow"))[0]
        a.engine._running = False  # a "crash": nothing is stopped or released
        a.engine.dispatcher._runs.clear()
    async with rig(db, start=T0 + 31 * MICROS) as b:
        seen = observe(b)
        await b.engine.start()
        await b.settle()
        await seen.flush()
        recovered = await b.store.get_occurrence(orphan.id)
        assert recovered.state == "failed" and recovered.error_code == "INTERRUPTED"
        assert sample(seen, "tickui_runs_total", task="slow", outcome="failed") == 0
        assert seen.families.registry.get_sample_value("tickui_lease_held") == 1
        await seen.close()


async def test_failed_ticks_and_the_breaker_opening_are_seen(tmp_path):
    """Simulated publish failures (the dashboard's `f`) on the in-process bus: each failed
    tick counts, and the breaker's state follows it as it opens."""
    async with rig(tmp_path / "t.db") as r:
        seen = observe(r)
        state = "tickui_tick_breaker_state"
        assert sample(seen, state, **{state: "closed"}) == 1
        seen.ticker.simulate_failures = True
        for _ in range(TickerConfig().breaker_threshold):
            await seen.ticker.emit_tick_at()
        await seen.sample()
        assert sample(seen, state, **{state: "open"}) == 1
        assert sample(seen, state, **{state: "closed"}) == 0
        failed = sample(seen, "tickui_ticks_failed_total")
        assert failed == TickerConfig().breaker_threshold
        await seen.ticker.emit_tick_at()  # refused by the open breaker: failed as well
        await seen.sample()
        assert sample(seen, "tickui_ticks_failed_total") == failed + 1
        assert sample(seen, "tickui_ticks_emitted_total") == 0
        await seen.close()


async def test_a_flush_returns_once_a_flush_under_way_has_counted(tmp_path, monkeypatch):
    """The observer's own task took the changed runs and is reading them when another
    flush comes (a scrape's, a test's): that one returns only once they are counted."""
    async with rig(tmp_path / "t.db") as r:
        await r.add("f", every="1h", command=["false"])
        await r.engine.start()
        await r.settle()
        [run] = await r.history("f")
        seen = observe(r)  # it saw nothing of the run so far
        read, reading, go_on = r.store.occurrences_by_id, asyncio.Event(), asyncio.Event()

        async def held(ids):
            reading.set()
            await go_on.wait()
            return await read(ids)

        monkeypatch.setattr(r.store, "occurrences_by_id", held)
        seen._on_change(EngineChange(occurrences=frozenset({run.id})))  # as the engine calls it
        await asyncio.wait_for(reading.wait(), 10)
        flushing = asyncio.create_task(seen.flush())
        await asyncio.sleep(0)  # the second flush begins while the first reads
        go_on.set()
        await asyncio.wait_for(flushing, 10)
        assert sample(seen, "tickui_runs_total", task="f", outcome="failed") == 1
        await seen.close()
