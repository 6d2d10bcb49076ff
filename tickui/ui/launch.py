"""`tickui` and `tickui demo`: open the store, build the host, run the dashboard."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tickui.common.clock import Clock, ScaledClock, SystemClock
from tickui.common.errors import BadInput
from tickui.common.logfilter import RedactingFilter
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import Settings
from tickui.runtime.simulate import SimulatedDispatcher, TimeLapse
from tickui.store import Store, inspect_file
from tickui.ui.terminal import (
    WEB_DRIVER,
    served_driver,
    surviving_driver,
    terminal_gone,
    writes_to_null,
)

if TYPE_CHECKING:
    from tickui.ui.app import TickuiApp


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

    path: Path | str  # a SQLite file, or a PostgreSQL store's URL
    factory: Callable[[], Awaitable[Host]]
    lapse: TimeLapse | None = None


def check_scale(scale: float) -> float:
    if not 1 <= scale <= 3600:
        raise BadInput("time-scale", f"{scale:g} is out of range (1 to 3600)")
    return scale


@contextlib.contextmanager
def dashboard_session(
    args: argparse.Namespace, settings: Settings, db: Path | str, demo: bool
) -> Iterator[Session]:
    """The demo's own throwaway database; under time-lapse a copy of `db` with simulated
    runs (real ones with --real-commands); else `db` itself. Whatever was made for the
    session is removed when it ends, however it ends."""
    scale = check_scale(args.time_scale)
    with contextlib.ExitStack() as stack:
        lapse: TimeLapse | None = None
        if demo:  # its database is its own: real commands, time-lapse or not
            scratch = Path(tempfile.mkdtemp(prefix="tickui-demo-"))
            stack.callback(shutil.rmtree, scratch, ignore_errors=True)
            path = scratch / "demo.db"
        elif scale != 1:
            real = args.real_commands
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
                watch = bool(getattr(args, "watch", False)) and not demo
                return build_host(
                    store, clock, settings, dispatcher=dispatcher, demo=demo, watch=watch
                )
            except BaseException:
                await store.close()
                raise

        yield Session(path, factory, lapse)


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # None, closed, or no descriptor
        return False


def require_terminal(stdin: object = None, stdout: object = None) -> None:
    """The dashboard reads keys from a terminal and draws on one: without it, it would
    draw into a file and spin. Said in one line before anything is opened or created."""
    streams = (("stdin", stdin or sys.stdin), ("stdout", stdout or sys.stdout))
    missing = [name for name, stream in streams if not _is_terminal(stream)]
    if missing:
        raise BadInput(
            "",
            f"the dashboard needs a terminal ({' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not one); "
            "'tickui run' runs the engine without one",
        )


def run_dashboard(args: argparse.Namespace, settings: Settings, db: Path | str, demo: bool) -> int:
    from tickui.ui.app import TickuiApp

    # Bad input first (it is said the same with or without a terminal), then the
    # terminal, then whatever the session makes.
    scale = check_scale(args.time_scale)
    if isinstance(db, Path) and scale == 1 and not demo:  # time-lapse reads only its copy
        inspect_file(db.expanduser())
    browser = os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER  # tickui serve's session
    if not browser:
        require_terminal()
    # Installed around the session too: a signal while the demo folder or the time-lapse
    # copy is being removed is noted, not allowed to cut the clean-up short.
    with (
        _hang_up_on_signals() as hang_up,
        dashboard_session(args, settings, db, demo) as session,
    ):
        if session.lapse is not None:
            print(session.lapse.banner(), file=sys.stderr, flush=True)
        if isinstance(session.path, Path):
            path = session.path.expanduser()
            inspect_file(path)  # a foreign or broken file: one line, before the UI
            _log_to_file(path)  # under time-lapse, beside the copy (and removed with it)
        else:  # a PostgreSQL store: the log stays on this host, in the user's state folder
            import platformdirs

            _log_to_file(Path(platformdirs.user_state_dir("tickui")) / "dashboard")
        driver = served_driver() if browser else surviving_driver()
        app = TickuiApp(session.factory, driver_class=driver)
        hang_up.app = app
        code = asyncio.run(hang_up.run(app))
        if app.failure:  # the host could not be built: 2 for bad input, else 1
            print(f"tickui: {app.failure}", file=sys.stderr)
            return code if isinstance(code, int) and code else 1
        if hang_up.received:  # the convention for an exit on a signal, kept
            return 128 + hang_up.received[0]
        return code or 0


BOOT_WAIT = 30.0  # a hang-up while the dashboard boots waits this long for its host


@dataclass
class HangUp:
    """SIGTERM or SIGHUP (the terminal went away) do what `q` then "cancel them" does:
    the app's `hang_up()` cancels and records the active runs, ends their process trees
    and closes the host; the caller then removes the demo folder or time-lapse copy. The
    first signal counts; more while hanging up are noted only. Before the app exists
    there is nothing to clean up (SystemExit); after its loop ended, a signal is noted.

    Python may run a handler inside another (a second signal arriving while the first's
    handler runs): every call does the same idempotent things, and the one hang-up is
    started on the loop (`_start`), never decided by counting in here."""

    received: list[int] = field(default_factory=list)
    app: TickuiApp | None = None
    loop: asyncio.AbstractEventLoop | None = None
    _task: asyncio.Task[None] | None = None

    def handler(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if self.app is None:
            raise SystemExit(128 + signum)
        if terminal_gone():
            writes_to_null()  # Textual's output (and its restore codes) goes nowhere
        loop = self.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._start)
        # else: before the loop runs (run() starts the hang-up) or after it (noted)

    async def run(self, app: TickuiApp) -> object:
        """The app on this loop (as App.run does), hanging up at once on a signal that
        came while the app was being built."""
        self.loop = asyncio.get_running_loop()
        if self.received:
            self._start()
        try:
            return await app.run_async()
        finally:
            self.loop = None

    def _start(self) -> None:
        if self._task is None and self.loop is not None:
            self._task = self.loop.create_task(self._hang_up())

    async def _hang_up(self) -> None:
        app = self.app
        assert app is not None
        if not app.ready.is_set():
            # Booting: wait for the host (its engine may be starting runs) so that
            # hang_up() finds it and cancels them, rather than leaving them behind.
            waiting = asyncio.ensure_future(app.ready.wait())
            await asyncio.wait({waiting}, timeout=BOOT_WAIT)
            waiting.cancel()
        if not app.is_running:
            return
        app.call_later(app.hang_up)


@contextlib.contextmanager
def _hang_up_on_signals() -> Iterator[HangUp]:
    hang_up = HangUp()
    wanted = (signal.SIGTERM, signal.SIGHUP, signal.SIGCONT)
    previous = {sig: signal.getsignal(sig) for sig in wanted}
    for sig in wanted[:2]:
        signal.signal(sig, hang_up.handler)
    try:
        yield hang_up
    finally:
        for sig, old in previous.items():  # SIGCONT too: Textual's driver set its own
            if old is not None:
                signal.signal(sig, old)
