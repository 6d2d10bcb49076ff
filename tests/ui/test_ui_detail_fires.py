"""The task detail says why a fire time is when it is (real SQLite store, fixed now)."""

from __future__ import annotations

from pathlib import Path

from textual.app import App
from textual.screen import Screen
from textual.widgets import Static

import tickui.ui
from tickui.common.timeutil import MICROS, parse_instant
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.ui.screens.detail import DetailScreen, DetailSource
from tickui.ui.view.cells import TimeView
from ui_support import screen_text, until

NOW = parse_instant("2027-03-26T12:00:00Z")  # two days before Berlin's spring forward


class Host(App[None]):
    """A bare app with the dashboard's stylesheet that shows one screen."""

    CSS_PATH = str(Path(tickui.ui.__file__).with_name("tickui.tcss"))

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.first = screen

    def on_mount(self) -> None:
        self.push_screen(self.first)


async def _detail(db: Path, raw: dict, added_at: int = NOW) -> tuple[Host, Store]:
    store = await Store.open(db)
    await store.add_task(build_spec({"command": ["true"], **raw}, added_at), added_at)
    task = await store.get_task(raw["name"])

    async def cancel(occ) -> None:
        return None

    source = DetailSource(
        current_task=lambda t: t,
        history=lambda name, limit: store.history(name, limit=limit),
        now=lambda: NOW,
        cancel=cancel,
        view=lambda: TimeView("task"),
    )
    return Host(DetailScreen(task, source)), store


async def test_the_detail_says_why_a_time_moved_in_the_gap_and_which_day_matched(
    tmp_db: Path, run_app
) -> None:
    raw = {"name": "nightly", "cron": "30 2 * * 0,5", "tz": "Europe/Berlin", "jitter": "1m"}
    app, store = await _detail(tmp_db, raw)
    try:
        pilot = await run_app(app, size=(150, 50))
        await until(pilot, lambda: "Why these times" in screen_text(app))
        text = screen_text(app)
        assert "2027-03-28 03:00:00 •" in text  # Sunday 02:30 does not exist: moved
        assert "DST gap: 02:30 does not exist on 2027-03-28" in text
        assert "the run is moved to 03:00 CEST" in text
        assert "jitter +" in text and "scheduled 03:00:00 CEST, planned 03:0" in text
    finally:
        await run_app.stop(app)
        await store.close()


async def test_the_detail_says_which_day_field_matched_and_a_task_behind_coalesces(
    tmp_db: Path, run_app
) -> None:
    raw = {"name": "thirteenth", "cron": "0 9 13 * 5"}
    # added ten days earlier: the 2027-03-19 Friday and 2027-03-26 09:00 have passed
    app, store = await _detail(tmp_db, raw, added_at=NOW - 10 * 86400 * MICROS)
    try:
        pilot = await run_app(app, size=(150, 50))
        await until(pilot, lambda: "Why these times" in screen_text(app))
        text = screen_text(app)
        assert "2027-03-26 09:00:00 UTC (passed: the next scan)" in text
        assert "misfire run_once: 2 slots since 2027-03-19 09:00:00 UTC coalesce" in text
        assert "2027-04-13 09:00:00 •" in text
        assert "day-of-month matched (13), day-of-week did not (Tue)" in text
        assert "day-of-week matched (Fri), day-of-month did not (2)" in text
    finally:
        await run_app.stop(app)
        await store.close()


async def test_a_plain_task_has_no_why_pane(tmp_db: Path, run_app) -> None:
    app, store = await _detail(tmp_db, {"name": "daily", "cron": "0 9 * * *"})
    try:
        pilot = await run_app(app, size=(150, 50))
        await until(pilot, lambda: "2027-03-27 09:00:00" in screen_text(app))
        assert not app.screen.query_one("#detail-why", Static).display
        assert "•" not in screen_text(app) and "Why these times" not in screen_text(app)
    finally:
        await run_app.stop(app)
        await store.close()
