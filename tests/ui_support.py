"""Building the dashboard for tests: a real SQLite file, a manual clock, fixed tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual._context import active_app, active_message_pump
from textual.app import App
from textual.pilot import Pilot

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import EngineSettings, Settings
from tickui.store import Store
from tickui.ticks.config import TickerConfig
from tickui.ui.app import TickuiApp

SIZE = (140, 40)  # the terminal a dashboard test runs in unless it says otherwise
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


class RunningApps:
    """Apps run headless, each by a task of its own until `close` (Textual's run_test sets
    context variables it must reset in the context that set them, and a fixture's
    teardown runs in another): see the `dashboard` and `run_app` fixtures."""

    def __init__(self) -> None:
        self.runs: dict[App, tuple[asyncio.Task, asyncio.Event]] = {}

    async def __call__(self, app: App, *, size: tuple[int, int] = SIZE, **options) -> Pilot:
        """`app` running (run_test's `options`), and its pilot."""
        opened: asyncio.Future[Pilot] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()

        async def run() -> None:
            async with app.run_test(size=size, **options) as pilot:
                opened.set_result(pilot)
                await closing.wait()

        task = asyncio.create_task(run(), name=f"headless app {len(self.runs)}")
        self.runs[app] = (task, closing)
        await asyncio.wait([task, opened], return_when=asyncio.FIRST_COMPLETED)
        if not opened.done():
            await task  # it ended before its pilot came: raise why
            raise AssertionError(f"{app} ended before it started")
        active_app.set(app)  # as run_test does for the code inside it: the test's code
        active_message_pump.set(app)
        return opened.result()

    async def stop(self, app: App) -> None:
        """`app` shut down now, as leaving run_test does; what ended it is raised."""
        if app not in self.runs:  # never started, or stopped already
            return
        task, closing = self.runs.pop(app)
        closing.set()
        await task

    async def close(self) -> None:
        """Each app still running shut down, the last opened first; what ended one is
        raised."""
        ended: list[BaseException] = []
        for app in reversed(list(self.runs)):
            try:
                await self.stop(app)
            except Exception as exc:
                ended.append(exc)
        if ended:
            raise ended[0]


class Dashboards:
    """What the `dashboard` fixture gives: `await dashboards(...)` opens one over `db`,
    `await dashboards.stop(app)` shuts one down before the test ends (to look at what it
    left behind, or to start it again)."""

    def __init__(self, running: RunningApps, db: Path) -> None:
        self.running = running
        self.db = db

    async def __call__(
        self,
        clock: ManualClock | None = None,
        seed: Seed | None = seed_basic,
        *,
        size: tuple[int, int] = SIZE,
        notifications: bool = False,
        started: bool = True,
        app: TickuiApp | None = None,
        **options,
    ) -> tuple[TickuiApp, Pilot]:
        """The dashboard over the test's database (make_app's `options`), or `app` when
        the test built its own."""
        if app is None:
            clock = clock if clock is not None else ManualClock(T0)
            app = make_app(self.db, clock, seed, **options)
        pilot = await self.running(app, size=size, notifications=notifications)
        if started:
            await ready(pilot)
        return app, pilot

    async def stop(self, app: TickuiApp) -> None:
        await self.running.stop(app)


async def ready(pilot) -> None:
    """Until the host is up and the first picture is on the screen."""
    await pilot.app.ready.wait()
    await pilot.pause()


def pick(app: TickuiApp, name: str) -> None:
    """Put the Tasks pane's cursor on the task shown with that name."""
    rows = app.board.task_rows
    index = next(i for i in range(len(rows)) if rows.at(i).name == name)
    app.board.tasks_table.move_to(index)


async def until(pilot, check: Callable[[], object], timeout: float = 10.0) -> None:
    """Let the app run (in real time: real processes finish) until `check()` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if check():
            return
        await pilot.pause(0.02)
    try:
        shown = screen_text(pilot.app)
    except Exception as exc:  # the failure says what it can
        shown = f"(the screen could not be read: {exc!r})"
    raise AssertionError(f"not true after {timeout:.1f}s: {check}; the screen was:\n{shown}")


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
