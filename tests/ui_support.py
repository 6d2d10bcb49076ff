"""Building the dashboard for tests: a real SQLite file, a manual clock, fixed tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tickui.common.clock import ManualClock
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import EngineSettings, Settings
from tickui.store import Store
from tickui.ticks.config import TickerConfig
from tickui.ui.app import TickuiApp

QUIT_GRACE = 200_000  # µs: runs still going when a test's app closes are cancelled quickly
Seed = Callable[[Store, ManualClock], Awaitable[None]]

# Hourly slots anchored at the clock's start: nothing is due until a test says so.
BASIC_TASKS = [
    ("alpha", {"every": "1h", "command": ["sh", "-c", "echo alpha says hi"]}),
    ("beta", {"every": "1h", "command": ["sh", "-c", "echo broken >&2; exit 3"]}),
    ("gamma", {"every": "1h", "disabled": True, "command": ["true"]}),
    ("sleepy", {"every": "1h", "concurrency": "forbid", "command": ["sleep", "30"]}),
]


async def seed_basic(store: Store, clock: ManualClock) -> None:
    now = clock.now()
    for name, fields in BASIC_TASKS:
        spec = build_spec({"name": name, "anchor": "2027-01-15T08:00:30Z", **fields}, now)
        await store.add_task(spec, now)
    await store.set_enabled("gamma", False, now, note="on hold")


def make_app(
    db: Path,
    clock: ManualClock,
    seed: Seed | None = seed_basic,
    *,
    start_engine: bool = True,
    start_ticker: bool = False,
    prepare: Callable[[Host], Awaitable[None]] | None = None,
    ticker_config: TickerConfig | None = None,
) -> TickuiApp:
    async def factory() -> Host:
        store = await Store.open(db)
        if seed is not None and not (await store.list_tasks(with_stats=False)):
            await seed(store, clock)
        settings = Settings(engine=EngineSettings(stop_grace=QUIT_GRACE))
        host = build_host(
            store,
            clock,
            settings,
            ticker_config,
            start_engine=start_engine,
            start_ticker=start_ticker,
        )
        if prepare is not None:
            await prepare(host)
        return host

    return TickuiApp(factory)


async def until(pilot, check: Callable[[], object], timeout: float = 10.0) -> None:
    """Let the app run (in real time: real processes finish) until `check()` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if check():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"not true after {timeout:.1f}s: {check}")


def notes(app: TickuiApp) -> list[str]:
    return [str(n.message) for n in app._notifications]


def screen_text(app: TickuiApp) -> str:
    """What the terminal shows now, as plain text: what a user reads."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


def wait_for(screen, text: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = screen()
        if text in shown:
            return shown
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never showed; the screen was:\n{shown}")


async def stored_state(db: Path, occ_id: int) -> str:
    """An occurrence's state as the database has it, read after the app has closed."""
    store = await Store.open(db)
    try:
        return (await store.get_occurrence(occ_id)).state
    finally:
        await store.close()
