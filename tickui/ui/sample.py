"""Fixed scenes of the dashboard for snapshot tests and `make screenshots`.

Everything is deterministic: a manual clock at a fixed instant, fixed tasks, runs whose
outcome does not depend on timing, and a fixed database label in the header.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import Change
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import EngineSettings, Settings
from tickui.store import Queued, Store
from tickui.ticks.breaker import OPEN
from tickui.ui.app import TickuiApp

T0 = 1_800_000_000 * MICROS  # 2027-01-15T08:00:00Z
ANCHOR = "2027-01-15T08:00:30Z"
OTHER_ENGINE = "ops-box:4242:9f1c2d3e"

SAMPLE_TASKS: list[tuple[str, dict]] = [
    ("backup-db", {"cron": "0 3 * * *", "tz": "Europe/Berlin", "command": ["echo", "backup done"]}),
    ("export-orders", {"every": "15m", "command": ["sh", "-c", "echo x; echo full >&2; exit 3"]}),
    ("heartbeat", {"every": "30s", "command": ["sh", "-c", "echo beat"]}),
    ("reindex", {"every": "1h", "concurrency": "forbid", "command": ["sleep", "30"]}),
    ("rotate-logs", {"every": "1h", "misfire": "skip", "command": ["true"]}),
    ("sync-crm", {"every": "5m", "command": ["true"]}),
    ("warm-cache", {"every": "10m", "concurrency": "replace", "command": ["true"]}),
]  # fmt: skip

Scene = Callable[[object], Awaitable[None]]  # takes a Pilot


async def seed(store: Store, now: int, history: bool = False) -> None:
    for name, fields in SAMPLE_TASKS:
        spec = build_spec({"name": name, "anchor": ANCHOR, **fields}, now)
        await store.add_task(spec, now)
    if history:  # before sync-crm is disabled: a disabled task's runs do not start
        await add_history(store, now)
    await store.set_enabled("sync-crm", False, now, note="CRM migration")


# The history grid's scene: each task's past slots, newest last, one letter a slot:
# s succeeded, f failed, r failed then retried (a second attempt that succeeded),
# c cancelled, k skipped, m missed (a misfire skip of 3 slots), q a retry still waiting.
HISTORY = {
    "backup-db": "sssssssfsssss",
    "export-orders": "ssssrsssfssrsssssffrssssssssrsssssssssfq",
    "heartbeat": "s" * 30 + "f" + "s" * 40,
    "reindex": "ssksskssssskssskssskssssssks",
    "rotate-logs": "sssssmsssssssssssmssss",
    "sync-crm": "ssssssssscc",
    "warm-cache": "sssscsssssscsssssscssssssssc",
}
EVERY = {"backup-db": 86_400, "export-orders": 900, "heartbeat": 30, "reindex": 3600,
         "rotate-logs": 3600, "sync-crm": 300, "warm-cache": 600}  # fmt: skip


async def add_history(store: Store, now: int) -> None:
    """HISTORY's runs, settled before T0, through the store as the engine leaves them:
    queued, then started, skipped or left waiting under a lease of its own, then ended
    (ids in time order within a task, a retry naming its first attempt)."""
    owner = "sample:0:history"
    got = await store.acquire_lease(owner, now, 60 * MICROS, ("sample", 0, None), _alive)
    assert got.lease is not None
    token = got.lease.token
    tasks = {t.name: t for t in await store.list_tasks(with_stats=False)}
    start: list[int] = []
    skip: list[tuple[int, str]] = []
    ends: list[Change] = []
    for name, letters in HISTORY.items():
        task, every = tasks[name], EVERY[name] * MICROS
        first_slot = T0 + 30 * MICROS - len(letters) * every
        for k, letter in enumerate(letters):
            slot = first_slot + k * every
            missed = 3 if letter == "m" else 1
            [first] = await store.queue_occurrences(
                [Queued(task.id, name, "scheduled", slot, task.generation, covers=missed)], now
            )
            if letter in "km":
                skip.append((first, MISSED if letter == "m" else "concurrency_forbid"))
                continue
            start.append(first)
            ends.append(
                _ended(first, slot, "c" if letter == "c" else "f" if letter in "frq" else "s")
            )
            if letter in "rq":  # its retry: it succeeded, or it waits
                again = slot + 30 * MICROS
                due = again if letter == "r" else T0 + 90 * MICROS
                retry = Queued(task.id, name, "scheduled", slot, task.generation,
                               retry_at=due, attempt=2, retry_of=first)  # fmt: skip
                [second] = await store.queue_occurrences([retry], now)
                if letter == "r":
                    start.append(second)
                    ends.append(_ended(second, again, "s"))
    await store.take_queued(start, skip, [], owner, token, now)
    await store.apply_changes(ends)
    await store.release_lease(owner, token, now)


MISSED = "misfire_skipped: 3 missed"
DETAILS = {"s": None, "f": "exit 3: upload refused", "c": "replaced"}


def _ended(occ_id: int, slot: int, how: str) -> Change:
    """A run started 40 ms after its slot, ended 0.2 to 0.8 s later: s succeeded, f failed
    (exit 3), c cancelled (replaced by the next slot's run)."""
    began = slot + 40_000
    took = 200_000 + (slot // MICROS % 7) * 90_000
    fields = {"started_at": began, "finished_at": began + took,
              "exit_code": {"s": 0, "f": 3, "c": -15}[how],
              "error_code": "EXIT_NONZERO" if how == "f" else None,
              "detail": DETAILS[how]}  # fmt: skip
    state = {"s": "succeeded", "f": "failed", "c": "cancelled"}[how]
    return Change(occ_id, 0, state, fields)


def sample_app(db: Path, *, standby: bool = False, history: bool = False) -> TickuiApp:
    clock = ManualClock(T0)
    settings = Settings(engine=EngineSettings(stop_grace=0))

    async def factory() -> Host:
        store = await Store.open(db)
        await seed(store, clock.now(), history)
        if standby:
            await store.acquire_lease(
                OTHER_ENGINE, clock.now(), 3600 * MICROS, ("ops-box", 4242, 1), _alive
            )
        host = build_host(store, clock, settings, start_ticker=False)
        host.db = Path("~/.local/share/tickui/tickui.db")
        return host

    return TickuiApp(factory, settings_file=db.parent / "settings.json")  # not the user's


def _alive(host: str | None, pid: int | None, start: int | None) -> bool:
    return False


async def _settled(app: TickuiApp, wanted: dict[str, str]) -> None:
    """Until each named task's newest run is in the state wanted and nothing else is in
    flight: a scene taken while a run is still ending would flicker (its toast, its row)."""
    states: dict[str, str] = {}
    for _ in range(500):
        await app.live.drain()
        states = {}
        for occ in sorted(app.board.occ_rows.by_id.values(), key=lambda o: o.id):
            states[occ.task] = occ.state
        others = all(
            o.state == "running" or not o.active for o in app.board.occ_rows.by_id.values()
        )
        if others and all(states.get(n) == s for n, s in wanted.items()):
            return
        await asyncio.sleep(0.02)
    raise RuntimeError(f"sample runs did not settle: {states}, wanted {wanted}")


# what each sample run ends in (reindex sleeps 30 s: it stays running in every scene)
WITH_RUNS = {
    "heartbeat": "succeeded",
    "export-orders": "failed",
    "reindex": "running",
    "backup-db": "succeeded",
}


async def with_runs(pilot) -> None:
    """Some history: a success, a failure, one still running, and a skipped slot."""
    app: TickuiApp = pilot.app
    await app.ready.wait()
    engine = app.host.engine
    if engine.holds_lease:
        for name in WITH_RUNS:
            await engine.run_now(name)
        await _settled(app, WITH_RUNS)
    # A toast's life is timed: in a fixed scene it would flicker. A run's toast is posted
    # (a message) before its row changes, so clearing from the queue, after it, catches it.
    cleared = asyncio.Event()

    def clear() -> None:
        app.clear_notifications()
        cleared.set()

    app.call_later(clear)
    await cleared.wait()
    # The cursors follow rows by id: which run the Occurrences cursor ended on depends on
    # how the runs' changes were batched; a fixed scene puts both on their first row.
    app.board.occ_table.move_to(0)
    app.board.tasks_table.move_to(0)
    await pilot.pause()


async def main_scene(pilot) -> None:
    await with_runs(pilot)


async def grid_scene(pilot) -> None:
    """The Tasks pane as the history grid (v), its cursor on export-orders' failure before
    the newest one, which a retry follows (sample_app with history=True)."""
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    await pilot.press("v")
    grid = app.board.grid
    export = next(t.id for t in app.board.task_rows.by_id.values() if t.name == "export-orders")
    grid.select_key(export)
    for _ in range(200):
        if len(grid.runs) == len(app.board.task_rows) and not grid.reading:
            break
        await pilot.pause(0.02)
    grid.move_slot(2)
    await pilot.pause()


async def timeline_scene(pilot) -> None:
    """The Tasks pane as the day timeline (v twice): the next 24 hours of fire times."""
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    await pilot.press("v", "v")
    timeline = app.board.timeline
    for _ in range(200):
        if timeline.display and "counting" not in str(timeline.render_line(4).text):
            break
        await pilot.pause(0.02)
    await pilot.pause()


async def detail_scene(pilot) -> None:
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    failing = next(t.id for t in app.board.task_rows.by_id.values() if t.name == "export-orders")
    app.board.tasks_table.select_key(failing)  # its failure and output
    await pilot.press("enter")
    await pilot.pause(0.4)


async def add_error_scene(pilot) -> None:
    await with_runs(pilot)
    await pilot.press("a")
    await pilot.pause()
    await pilot.press(*"nightly-report")
    screen = pilot.app.screen
    screen.query_one("#kind").value = "cron"
    screen.query_one("#expr").value = "0 3 * *"
    screen.query_one("#command").value = "make report"
    await pilot.pause()


async def add_scene(pilot) -> None:
    await add_error_scene(pilot)
    pilot.app.screen.query_one("#expr").value = "0 3 * * 1-5"
    await pilot.pause()


async def help_scene(pilot) -> None:
    await with_runs(pilot)
    await pilot.press("question_mark")
    await pilot.pause()


async def light_scene(pilot) -> None:
    """The main screen in a light theme: the tables' cells take the theme's colours."""
    await with_runs(pilot)
    pilot.app.theme = "textual-light"
    await pilot.pause()


async def edit_scene(pilot) -> None:
    """E on backup-db: the form filled in, its cron read in words, dated fire times."""
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    app.board.tasks_table.select_key(next(t.id for t in app.board.task_rows.by_id.values()
                                    if t.name == "backup-db"))  # fmt: skip
    await pilot.press("E")
    await pilot.pause(0.2)


async def cancel_scene(pilot) -> None:
    """c on the run in flight: the question names it; No has the focus."""
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    running = next(o for o in app.board.occ_rows.by_id.values() if o.state == "running")
    app.board.occ_table.focus()
    app.board.occ_table.select_key(running.id)
    await pilot.press("c")
    await pilot.pause(0.2)


async def standby_scene(pilot) -> None:
    await pilot.app.ready.wait()
    await pilot.pause()


async def breaker_open_scene(pilot) -> None:
    """Publishes failed on purpose until the breaker opened; the probe time is pinned."""
    await with_runs(pilot)
    app: TickuiApp = pilot.app
    ticker = app.host.ticker
    await pilot.press("f", "y")  # not the demo's database: f asks first
    breaker = ticker.breaker
    for _ in range(breaker.threshold):
        breaker.failure(0.0, T0, "simulated publish failure")
    breaker.retry_in = lambda mono: 42.0  # type: ignore[method-assign]
    app.live.show_ticker()
    await pilot.pause()


async def workers_scene(pilot) -> None:
    """Runs on `tickui worker`s (what a `--dispatch kafka` engine records): the Workers
    pane under the ticks and breaker, trouble first, each run's WORKER, and a worker that
    refused forged commands."""
    from tickui.store import Beat

    await with_runs(pilot)
    app: TickuiApp = pilot.app
    store, now = app.host.store, app.host.clock.now()
    runs = {o.task: o for o in app.board.occ_rows.by_id.values()}
    on = {"heartbeat": "build-01", "export-orders": "build-02", "reindex": "build-01"}
    on["backup-db"] = "gpu-box"
    await store.set_workers([(runs[task].id, worker) for task, worker in on.items()])
    reindex = runs["reindex"].command_id or "cmd-reindex"
    log_dir = "/var/lib/tickui-worker/logs"
    await store.record_heartbeats(
        [
            Beat(
                "build-01", "build-01.lan", 4, [reindex], "0.13", "alive", now - 1 * MICROS, log_dir
            ),
            Beat(
                "build-02",
                "build-02.lan",
                4,
                [],
                "0.13",
                "alive",
                now - 2 * MICROS,
                log_dir,
                refused={"forged_command": 3},
            ),
            Beat("gpu-box", "gpu-box.lan", 2, [], "0.13", "alive", now - 15 * MICROS, log_dir),
            Beat("old-ci", "ci-7.lan", 8, [], "0.12", "drained", now - 200 * MICROS, log_dir),
        ]
    )
    await store.mark_workers_lost(["gpu-box"], now)
    app.live.mark(occurrences=[o.id for o in runs.values()])
    await app.live.workers.read()
    await app.live.drain()
    app.board.occ_table.move_to(0)
    await pilot.pause()


SAMPLE_LOG = "".join(
    [
        "export-orders: connecting to postgres://exporter:s3cret@db.internal/orders\n",
        "export-orders: 1,204 orders since 2027-01-14T08:00Z\n",
    ]
    + [f"  wrote batch {n:02d} (100 orders)\n" for n in range(1, 13)]
    + [
        "\x1b[31mwarning\x1b[0m: 4 orders without a customer (kept)\n",
        "export-orders: upload to s3://exports/2027-01-15/orders.csv\n",
        "error: disk full while writing /var/tmp/orders.csv\n",
    ]
)


async def run_output_scene(pilot) -> None:
    """The run output view on export-orders' failed run, its log replaced by a fixed one
    (with a password, shown hidden, and a colour, shown as a colour)."""
    from dataclasses import replace

    from tickui.ui.screens.run import RunScreen

    await with_runs(pilot)
    app: TickuiApp = pilot.app
    occ = next(o for o in app.board.occ_rows.by_id.values() if o.task == "export-orders")
    Path(occ.log_path).write_text(SAMPLE_LOG)
    app.board.occ_table.focus()
    app.board.occ_table.move_to(app.board.occ_rows.index_of(occ.id))
    await pilot.press("enter")
    screen = app.screen
    assert isinstance(screen, RunScreen)
    label = "~/.local/share/tickui/logs/" + Path(occ.log_path).name
    screen.source = replace(screen.source, label=lambda path: label)
    for _ in range(200):
        await pilot.pause(0.02)
        if screen.indexed and screen.view.count:
            break
    screen.render_facts()
    await pilot.pause()


class ReplayClock:
    """Real time, started at a fixed instant: the engine and ticker run for real (ticks
    every second, real processes), and the header reads the same day in every picture."""

    scale = 1.0

    def __init__(self, start: int) -> None:
        self._start = start
        self._mono0 = time.monotonic()

    def now(self) -> int:
        return self._start + round((time.monotonic() - self._mono0) * MICROS)

    def monotonic(self) -> float:
        return time.monotonic()


BUSY_START = T0 + 24 * MICROS  # 08:00:24, six seconds before the half-minute slots


def busy_app(db: Path) -> TickuiApp:
    """Engine and ticker running in real time from 08:00:24: slots at 08:00:30 start
    heartbeat (succeeds), export-orders (fails) and reindex (still running)."""
    clock = ReplayClock(BUSY_START)
    settings = Settings(engine=EngineSettings(stop_grace=0))

    async def factory() -> Host:
        store = await Store.open(db)
        await seed(store, T0)
        host = build_host(store, clock, settings)
        host.db = Path("~/.local/share/tickui/tickui.db")
        return host

    return TickuiApp(factory, settings_file=db.parent / "settings.json")  # not the user's


async def busy_scene(pilot) -> None:
    """Live: the 08:00:30 slots run, publishes fail on purpose until the breaker opens,
    then `f` is turned off again, so the breaker pane says when it will close."""
    app: TickuiApp = pilot.app
    await app.ready.wait()
    loop = asyncio.get_running_loop()

    async def until(check, timeout: float) -> None:
        deadline = loop.time() + timeout
        while not check() and loop.time() < deadline:
            await pilot.pause(0.1)

    def states() -> dict[str, str]:
        return {o.task: o.state for o in app.board.occ_rows.by_id.values()}

    await until(lambda: states().get("export-orders") == "failed", 15)
    ticker = app.host.ticker
    await pilot.press("f")  # asks first: this is not the demo's database
    await pilot.press("y")
    await until(lambda: ticker.simulate_failures, 5)
    await until(lambda: ticker.breaker.state == OPEN, 15)
    await pilot.press("f")  # publishes work again; the breaker closes on its next probe
    await until(lambda: not ticker.simulate_failures, 5)
    app.board.tasks_table.focus()
    await pilot.pause(1.2)
