"""`tickui` and `tickui demo`: open the store, build the host, run the dashboard."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from tickui.clock import Clock, ScaledClock, SystemClock
from tickui.config import Settings
from tickui.errors import BadInput
from tickui.redact import RedactingFilter
from tickui.spec import build_spec
from tickui.store import Store, inspect_file
from tickui.ui.host import Host, build_host


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


def run_dashboard(args: argparse.Namespace, settings: Settings, db: Path, demo: bool) -> int:
    from tickui.ui.app import TickuiApp

    scale = args.time_scale
    if not 1 <= scale <= 3600:
        raise BadInput("time-scale", f"{scale:g} is out of range (1 to 3600)")
    scratch = Path(tempfile.mkdtemp(prefix="tickui-demo-")) if demo else None
    path = scratch / "demo.db" if scratch else db

    async def factory() -> Host:
        store = await Store.open(path)
        clock: Clock = ScaledClock(scale) if scale != 1 else SystemClock()
        try:
            if demo:
                await seed_demo(store, clock.now())
            elif settings.tasks is not None:
                await store.sync_tasks(settings.tasks, clock.now())
            return build_host(store, clock, settings, demo=demo)
        except BaseException:
            await store.close()
            raise

    inspect_file(path.expanduser())  # a foreign or broken file: one line, before the UI
    _log_to_file(path.expanduser())
    try:
        app = TickuiApp(factory)
        code = app.run()
        if app.failure:
            print(f"tickui: {app.failure}", file=sys.stderr)
            return 2
        return code or 0
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
