"""`tickui` and `tickui demo`: open the store, build the host, run the dashboard."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tickui.clock import Clock, ScaledClock, SystemClock
from tickui.config import Settings
from tickui.errors import BadInput
from tickui.redact import RedactingFilter
from tickui.simulate import SimulatedDispatcher, TimeLapse
from tickui.spec import build_spec
from tickui.store import Store, inspect_file
from tickui.ui.host import Host, build_host

if TYPE_CHECKING:
    from textual.app import App


# name, fields; within 15 s these show success, failure, skips (forbid), a replaced run,
# a disabled task and a cron one.
def _sh(script: str) -> list[str]:
    return ["sh", "-c", script]


DEMO_TASKS: list[tuple[str, dict]] = [
    ("hello", {"every": "3s", "command": _sh("echo hello from tickui; date -u")}),
    ("flaky-export", {"every": "5s", "command": _sh("echo export; echo 'disk full' >&2; exit 3")}),
    ("slow-report", {"every": "2s", "command": _sh("echo building; sleep 5; echo done")}),
    ("replace-cache", {"every": "4s", "concurrency": "replace", "command": _sh("sleep 6")}),
    ("cron-heartbeat", {"cron": "*/5 * * * * *", "command": _sh("echo beat")}),
    ("nightly-backup", {"cron": "0 3 * * *", "tz": "Europe/Berlin", "command": _sh("echo backup")}),
    ("paused-sync", {"every": "10s", "disabled": True, "command": _sh("echo sync")}),
]  # fmt: skip
DEMO_NOTE = "paused for the demo"


async def seed_demo(store: Store, now: int) -> None:
    for name, fields in DEMO_TASKS:
        await store.add_task(build_spec({"name": name, **fields}, now), now, source="demo")
        if fields.get("disabled"):
            await store.set_enabled(name, False, now, note=DEMO_NOTE)


def _log_to_file(db: Path) -> None:
    """The screen is the UI's: engine logs go to a file next to the database."""
    db.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(db.with_name(db.name + ".log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("tickui")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@dataclass
class Session:
    """What the dashboard opens: the database path, the factory that builds its host, and
    (under time-lapse) the copy it works on."""

    path: Path
    factory: Callable[[], Awaitable[Host]]
    lapse: TimeLapse | None = None


@contextlib.contextmanager
def dashboard_session(
    args: argparse.Namespace, settings: Settings, db: Path, demo: bool
) -> Iterator[Session]:
    """The demo's own throwaway database; under time-lapse a copy of `db` with simulated
    runs (real ones with --real-commands); else `db` itself. Whatever was made for the
    session is removed when it ends, however it ends."""
    scale = args.time_scale
    if not 1 <= scale <= 3600:
        raise BadInput("time-scale", f"{scale:g} is out of range (1 to 3600)")
    with contextlib.ExitStack() as stack:
        lapse: TimeLapse | None = None
        if demo:  # its database is its own: real commands, time-lapse or not
            scratch = Path(tempfile.mkdtemp(prefix="tickui-demo-"))
            stack.callback(shutil.rmtree, scratch, ignore_errors=True)
            path = scratch / "demo.db"
        elif scale != 1:
            real = bool(getattr(args, "real_commands", False))
            lapse = stack.enter_context(TimeLapse(db, scale, real))
            path = lapse.copy
        else:
            path = db

        async def factory() -> Host:
            store = await Store.open(path)
            clock: Clock = ScaledClock(scale) if scale != 1 else SystemClock()
            try:
                if demo:
                    await seed_demo(store, clock.now())
                elif settings.tasks is not None:
                    await store.sync_tasks(settings.tasks, clock.now())
                dispatcher = None
                if lapse is not None and not lapse.real_commands:
                    dispatcher = SimulatedDispatcher(store, clock, lapse.profiles)
                return build_host(store, clock, settings, dispatcher=dispatcher, demo=demo)
            except BaseException:
                await store.close()
                raise

        yield Session(path, factory, lapse)


def run_dashboard(args: argparse.Namespace, settings: Settings, db: Path, demo: bool) -> int:
    from tickui.ui.app import TickuiApp

    app: TickuiApp | None = None
    # Installed around the session too: a signal while the demo folder or the time-lapse
    # copy is being removed is noted, not allowed to cut the clean-up short.
    with (
        _exit_on_signals(lambda: app) as received,
        dashboard_session(args, settings, db, demo) as session,
    ):
        if session.lapse is not None:
            print(session.lapse.banner(), file=sys.stderr, flush=True)
        path = session.path.expanduser()
        inspect_file(path)  # a foreign or broken file: one line, before the UI
        _log_to_file(path)  # under time-lapse, beside the copy (and removed with it)
        app = TickuiApp(session.factory, bell=settings.ui.bell)
        code = app.run()
        if app.failure:
            print(f"tickui: {app.failure}", file=sys.stderr)
            return 2
        if received:
            return 128 + received[0]
        return code or 0


@contextlib.contextmanager
def _exit_on_signals(current_app: Callable[[], App | None]) -> Iterator[list[int]]:
    """SIGTERM or SIGHUP (the terminal went away) quit the app as `q` does, so the engine
    stops cleanly and a time-lapse copy or demo database is removed. Outside the app's
    loop (setting up, cleaning up) a signal is only noted: the caller is on its way out."""
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        app = current_app()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if app is None:  # before the app: nothing to clean up yet, stop here
                raise SystemExit(128 + signum) from None
            return
        if app is not None:
            loop.call_soon_threadsafe(app.exit)

    wanted = (signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
