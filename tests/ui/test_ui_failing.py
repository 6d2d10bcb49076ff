"""Failure handling in the dashboard: a pending retry ("retry 2/2 in 1m00s", "attempt 2/2, next
in ..."), a task paused by pause_after (loud, with a toast), backfill runs, the edit
form's failure fields, and the hook deliveries screen (key h). Real SQLite, the real
engine and real processes; a manual clock moves time."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.widgets import Collapsible

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.hooks.config import HookConfig
from tickui.model.records import Occurrence, Task, TaskStats
from tickui.model.spec import build_spec
from tickui.runtime.host import Host, build_host
from tickui.runtime.settings import EngineSettings, Settings
from tickui.store import Store
from tickui.ui.app import TickuiApp
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.screens.hooks import HooksScreen
from tickui.ui.view.cells import (
    TimeView,
    attempt_text,
    countdown,
    enabled_off,
    occurrence_cells,
    task_cells,
)
from ui_support import notes, screen_text, until

SIZE = (160, 40)
PAUSE_NOTE = "paused after 2 consecutive failures (last: EXIT_NONZERO)"


def _task(**stats) -> Task:
    spec = build_spec({"name": "export", "every": "5m", "command": ["true"], "retries": 3}, T0)
    nxt = T0 + 300 * MICROS
    return Task(1, "export", spec, "cli", True, None, 1, T0, T0, T0, nxt, nxt, TaskStats(**stats))


def _occ(**fields) -> Occurrence:
    base = {"id": 7, "task_id": 1, "task": "export", "kind": "scheduled"}
    base |= {"scheduled_for": T0, "state": "queued", "claimed_at": T0}
    return Occurrence(**(base | fields))


# ---- cells (pure) ----------------------------------------------------------------------


def test_a_waiting_retry_shows_in_result_with_its_countdown() -> None:
    task = _task(last_result="failed", retry_attempt=2, retry_at=T0 + 40 * MICROS)
    cells = task_cells(task, T0, TimeView("utc"))
    assert ("failed, retry 2/4 in 40s", "yellow") in cells
    later = task_cells(task, T0 + 39 * MICROS, TimeView("utc"))
    assert ("failed, retry 2/4 in 1s", "yellow") in later
    assert ("failed", "bold red") in task_cells(_task(last_result="failed"), T0)


def test_a_paused_task_is_loud_and_a_disabled_one_is_not() -> None:
    text, style = enabled_off(PAUSE_NOTE)
    assert text == "PAUSED after 2 consecutive failures (last: EXIT_NONZERO)" and "red" in style
    assert enabled_off("migration") == ("off migration", "yellow")


def test_attempts_and_backfill_in_the_occurrences_pane() -> None:
    waiting = _occ(attempt=2, retry_of=5, retry_at=T0 + 40 * MICROS)
    assert attempt_text(waiting, 3, T0) == "attempt 2/4, next in 40s"
    assert attempt_text(waiting, None, T0) == "attempt 2, next in 40s"
    assert attempt_text(_occ(attempt=1), 3, T0) == ""
    ran = _occ(attempt=3, retry_of=5, state="failed", detail="exit 3: full")
    assert occurrence_cells(ran, T0, TimeView("utc"), None, 3)[-1][0] == (
        "attempt 3/4 · exit 3: full"
    )
    backfill = occurrence_cells(_occ(kind="backfill", state="succeeded"), T0)
    assert backfill[3][0] == "backfill"


# ---- the dashboard with the real engine -------------------------------------------------


def _app(db: Path, clock: ManualClock, hooks: tuple[HookConfig, ...] = ()) -> TickuiApp:
    async def factory() -> Host:
        store = await Store.open(db)
        if not await store.list_tasks(with_stats=False):
            raw = {"name": "export", "every": "1h", "anchor": "2027-01-15T07:00:00Z"}
            raw |= {"command": ["sh", "-c", "echo out; exit 3"]}
            raw |= {"retries": 1, "retry_delay": "1m", "pause_after": 2}
            await store.add_task(build_spec(raw, clock.now()), clock.now())
        settings = Settings(engine=EngineSettings(stop_grace=0), hooks=hooks)
        return build_host(store, clock, settings, start_ticker=False)

    return TickuiApp(factory, settings_file=db.parent / "settings.json")


def _row(app: TickuiApp, task: str) -> str:
    return next(line for line in screen_text(app).splitlines() if f"│{task} " in line)


async def test_a_retry_waits_then_pause_after_pauses_the_task_loudly(
    tmp_path: Path, dashboard
) -> None:
    """The 08:00 slot (due at start) fails; its retry waits with a countdown in both
    panes, runs and fails; the 09:00 slot does the same: two failed slots pause it."""
    clock = ManualClock(T0)
    app, pilot = await dashboard(app=_app(tmp_path / "t.db", clock), size=SIZE, started=False)
    await app.ready.wait()
    engine, store = app.host.engine, app.host.store

    async def waiting_retry() -> Occurrence:
        (queued,) = await store.queued_of()
        return queued

    async def fail_a_slot() -> None:
        await until(pilot, lambda: "retry 2/2 in " in _row(app, "export"), timeout=15)
        retry = await waiting_retry()
        left = countdown(retry.retry_at, clock.now())
        assert f"failed, retry 2/2 in {left}" in _row(app, "export")
        # the Occurrences pane reads the store on its own: it may show the retry a moment on
        await until(pilot, lambda: f"attempt 2/2, next in {left}" in screen_text(app), 5)
        clock.advance(20)  # the countdowns move with the clock
        app.live.each_second()
        left = countdown(retry.retry_at, clock.now())
        await until(pilot, lambda: f"retry 2/2 in {left}" in _row(app, "export"), timeout=5)
        clock.set(retry.retry_at)  # due: it runs (attempt 2) and fails
        clock.advance(0)
        await engine.tick(clock.now())
        await until(pilot, lambda: f"{retry.id:>6} failed" in screen_text(app), timeout=15)
        await until(pilot, lambda: "attempt 2/2 · exit 3" in screen_text(app), timeout=5)

    await fail_a_slot()
    assert " on " in _row(app, "export") and not any("paused" in n for n in notes(app))
    clock.set(T0 + 3600 * MICROS)  # the 09:00 slot
    await engine.tick(clock.now())
    await fail_a_slot()
    await until(pilot, lambda: "PAUSED after 2" in _row(app, "export"), timeout=15)
    await until(
        pilot,
        lambda: any("export paused after 2 consecutive failures" in n for n in notes(app)),
        timeout=5,
    )


async def test_c_cancels_a_waiting_retry_after_asking(tmp_path: Path, dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(app=_app(tmp_path / "t.db", clock), size=SIZE, started=False)
    await app.ready.wait()
    await until(pilot, lambda: "retry 2/2 in " in _row(app, "export"), timeout=15)
    (retry,) = await app.host.store.queued_of()
    # the Occurrences pane reads the store on its own and can trail the Tasks row
    await until(pilot, lambda: retry.id in app.board.occ_rows.by_id, timeout=5)
    app.board.occ_table.focus()
    assert app.board.occ_table.select_key(retry.id)
    await pilot.press("c")
    await until(pilot, lambda: f"Cancel run {retry.id} (export, due " in screen_text(app))
    await pilot.press("y")
    await until(pilot, lambda: f"{retry.id:>6} cancelled" in screen_text(app), timeout=10)
    assert not await app.host.store.queued_of()
    await until(pilot, lambda: "retry" not in _row(app, "export"), timeout=5)


async def test_the_hooks_screen_lists_deliveries_with_their_outcome(
    tmp_path: Path, dashboard
) -> None:
    got = tmp_path / "event.json"
    hook = HookConfig(name="pager", on=frozenset({"failed"}), command=("sh", "-c", f"cat > {got}"))
    clock = ManualClock(T0)
    app, pilot = await dashboard(
        app=_app(tmp_path / "t.db", clock, hooks=(hook,)), size=SIZE, started=False
    )
    await app.ready.wait()
    while await app.host.store.active_occurrences():  # the 08:00 slot, due at start
        await pilot.pause(0.05)
    await app.host.store.edit_task(
        "export",
        build_spec(
            {"name": "export", "every": "1h", "command": ["sh", "-c", "exit 3"]}, clock.now()
        ),
        clock.now(),
    )  # no retries: the first failure is the slot's last
    await app.host.engine.run_now("export")
    await until(pilot, got.exists, timeout=15)
    await pilot.press("h")
    await until(pilot, lambda: isinstance(app.screen, HooksScreen))
    # the count goes up when the hook's process has ended; the screen reads it each second
    await until(pilot, lambda: "1 hook · delivered 1 · failed 0" in screen_text(app), timeout=10)
    text = screen_text(app)
    assert "pager" in text and "failed" in text and "export" in text
    assert "1 hook · delivered 1 · failed 0" in text
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, HooksScreen))


async def test_the_hooks_screen_without_hooks_says_so(tmp_path: Path, dashboard) -> None:
    app, pilot = await dashboard(
        app=_app(tmp_path / "t.db", ManualClock(T0)), size=SIZE, started=False
    )
    await app.ready.wait()
    await pilot.press("h")
    await until(pilot, lambda: "No [[hook]] in tickui.toml" in screen_text(app))
    assert "No deliveries recorded yet." in screen_text(app)


# ---- the edit form ----------------------------------------------------------------------


async def test_the_edit_form_keeps_and_changes_the_failure_fields(tmp_path: Path, run_app) -> None:
    from textual.app import App

    raw = {"name": "export", "every": "5m", "command": ["true"], "retries": 3}
    raw |= {"retry_delay": "30s", "retry_max_delay": "10m", "retry_on": "timeout"}
    raw |= {"pause_after": 4, "concurrency": "buffer_one"}
    store = await Store.open(tmp_path / "t.db")
    try:
        task = await store.add_task(build_spec(raw, T0), T0)
    finally:
        await store.close()
    answers: list = []

    class FormApp(App[None]):
        def on_mount(self) -> None:
            self.push_screen(AddTaskScreen(lambda: T0, task=task), answers.append)

    app = FormApp()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    assert not form.query_one("#failing", Collapsible).collapsed  # it has retries
    assert form.query_one("#retries").value == "3"
    assert form.query_one("#retry_delay").value == "30s"
    assert form.query_one("#pause_after").value == "4"
    assert form.query_one("#concurrency").value == "buffer_one"
    await pilot.press("ctrl+s")
    await until(pilot, lambda: answers)
    assert answers[0] == task.spec, "saving unchanged changed the failure fields"
    answers.clear()
    app = FormApp()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    form.query_one("#retries").value = "5"
    form.query_one("#pause_after").value = ""
    await pilot.pause()
    await pilot.press("ctrl+s")
    await until(pilot, lambda: answers)
    spec = answers[0]
    assert (spec.retries, spec.pause_after) == (5, None)
    assert (spec.retry_delay, spec.retry_max_delay) == (30 * MICROS, 600 * MICROS)
    assert spec.retry_on == ("timeout",)
    answers.clear()
    app = FormApp()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    app.screen.query_one("#retries").value = "101"
    await pilot.pause()
    assert "retries" in screen_text(app) and app.screen.query_one("#add").disabled
    await asyncio.sleep(0)
