"""The dashboard stays responsive with its broker or its Redis dead, and says so truthfully.

Real services of the test's own (tests/services.py), killed mid-run. A key's effect is
timed from the key press to the changed row; the figure asked for is 100 ms.
"""

from __future__ import annotations

import asyncio
import statistics

import pytest

import services
from tickui.common.clock import SystemClock
from tickui.ticks.config import TickerConfig
from ui_support import screen_text, until

pytestmark = pytest.mark.slow
KEY_EFFECT_S = 0.1


async def key_effect_times(pilot, presses: int = 6) -> list[float]:
    """Press `e` on alpha repeatedly; how long from the key event (as the terminal driver
    delivers it) until the task row shows the toggle."""
    app = pilot.app
    loop = asyncio.get_running_loop()
    # by id: with tasks sorted by NEXT, a disabled alpha moves to the end (the cursor with it)
    alpha = next(t.id for t in app.board.task_rows.by_id.values() if t.name == "alpha")
    app.board.tasks_table.select_key(alpha)
    times = []
    for _ in range(presses):
        before = app.board.task_rows.by_id[alpha].enabled
        started = loop.time()
        app.simulate_key("e")
        while app.board.task_rows.by_id[alpha].enabled == before:
            await asyncio.sleep(0.001)
        times.append(loop.time() - started)
        await pilot.pause(0.05)
    return times


async def test_kafka_killed_ui_keeps_answering_and_the_breaker_opens(dashboard) -> None:
    with services.private_tansu() as broker:
        config = TickerConfig(
            interval_ms=100,
            kafka_bootstrap=broker.bootstrap,
            publish_timeout_s=0.5,
            breaker_threshold=3,
            breaker_reset_s=2.0,
            scheduler_id="ui-outage",
            persist_sequence=False,
        )
        app, pilot = await dashboard(
            SystemClock(), start_ticker=True, ticker_config=config, started=False
        )
        await app.ready.wait()
        ticker = app.host.ticker
        await until(pilot, lambda: ticker.metrics().ticks_published >= 3, 20)
        await until(pilot, lambda: "CLOSED" in screen_text(app), 10)  # painted each second
        broker.kill()
        await until(pilot, lambda: "OPEN" in screen_text(app).split("Circuit breaker")[1], 20)
        breaker_text = screen_text(app).split("Circuit breaker")[1]
        assert "3 of 3" in breaker_text or "of 3" in breaker_text
        assert ticker.breaker.last_error and "next probe" in breaker_text
        times = await key_effect_times(pilot)
        print("key effect s:", [round(t, 4) for t in times])
        assert statistics.median(times) < KEY_EFFECT_S, times
        assert ticker.metrics().ticks_emitted > 0 and app.host.engine.running
        await dashboard.stop(app)  # before the service stops


async def test_redis_killed_ui_keeps_answering_and_shows_the_sequence_store_down(
    dashboard,
) -> None:
    with services.private_redis() as redis:
        config = TickerConfig(
            interval_ms=100,
            valkey_url=redis.url,
            valkey_timeout_s=0.3,
            scheduler_id="ui-redis",
        )
        app, pilot = await dashboard(
            SystemClock(), start_ticker=True, ticker_config=config, started=False
        )
        await app.ready.wait()
        ticker = app.host.ticker
        await until(pilot, lambda: ticker.metrics().sequence_state == "ok", 20)
        redis.kill()
        await until(pilot, lambda: "unreachable" in screen_text(app), 20)
        emitted = ticker.metrics().ticks_emitted
        times = await key_effect_times(pilot)
        print("key effect s:", [round(t, 4) for t in times])
        assert statistics.median(times) < KEY_EFFECT_S, times
        await until(pilot, lambda: ticker.metrics().ticks_emitted >= emitted + 5, 10)
        assert "valkey" in screen_text(app)
        await dashboard.stop(app)  # before the service stops
