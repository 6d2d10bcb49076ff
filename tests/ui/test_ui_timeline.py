"""The timeline widget in a small app over a real SQLite board (tests/timeline_support):
what a user reads, the zoom and cursor keys, and what it tells its screen."""

from __future__ import annotations

from pathlib import Path

from timeline_support import NOW, TimelineApp, seed

from tickui.common.timeutil import MICROS
from tickui.schedules.triggers import CronSchedule, preview
from tickui.store import Store
from tickui.ui.view.cells import TimeView
from ui_support import screen_text, until

HOUR = 3600 * MICROS


def row(app: TimelineApp, name: str) -> str:
    return next(line for line in screen_text(app).splitlines() if line.startswith(name + " "))


def runs_between(expr: str, tz: str, start: int, end: int) -> int:
    return sum(1 for t in preview(CronSchedule(expr, tz), start, 500) if t < end)


async def test_the_timeline_reads_the_boards_tasks_and_names_the_clock_change(
    tmp_path: Path,
) -> None:
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: "weekly-invoices" in screen_text(app))
        shown = screen_text(app)
        axis = app.timeline._axis
        assert axis is not None and axis.span == 24 * HOUR
        start = axis.start
        assert f"next 24h from Sat {axis.local(start).strftime('%H:%M')} · Europe/London" in shown
        assert "▼ clocks go forward 1h at Sun 28 Mar 01:00 GMT (GMT → BST)" in shown
        every15 = runs_between("*/15 * * * *", "UTC", start, axis.end)
        assert row(app, "every-15m").rstrip().endswith(f" {every15}")
        assert row(app, "cleanup-tmp").rstrip().endswith(" off")
        assert row(app, "export-orders").rstrip().endswith(" paused")
        assert row(app, "weekly-invoices").rstrip().endswith(" 0")  # Monday: not in the day
        nightly = [row(app, f"nightly-batch-{x}")[16:] for x in "ab"]  # the marks
        assert nightly[0] == nightly[1] and "│" in nightly[0]  # the same minute
        assert "busiest " in shown and "23:" in shown.split("busiest ")[1][:20]


async def test_the_axis_follows_the_zone_the_dashboard_shows(tmp_path: Path) -> None:
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: "clocks go forward" in screen_text(app))
        app.view = TimeView("utc")  # `z` on the dashboard
        await until(pilot, lambda: "\nUTC    " in screen_text(app))  # the rule names it
        assert "no clock change in this span" in screen_text(app)  # UTC has none
        assert "▼" not in screen_text(app)


async def test_zoom_keys_step_the_span_and_tell_the_screen(tmp_path: Path) -> None:
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: "weekly-invoices" in screen_text(app))
        told = len(app.spans)
        await pilot.press("minus")
        await until(pilot, lambda: "next 7d from" in screen_text(app))
        assert row(app, "weekly-invoices").rstrip().endswith(" 1")  # Monday is in the week
        assert "Mon 29" in screen_text(app)
        await pilot.press("minus")  # no wider step: it stays
        await pilot.press("plus", "plus")
        await until(pilot, lambda: "next 6h from" in screen_text(app))
        assert app.spans[told:] == [7 * 24 * HOUR, 24 * HOUR, 6 * HOUR]
        assert row(app, "backup-db").rstrip().endswith(" 1")  # 02:00 BST is 01:00 GMT
        assert app.timeline.span == 6 * HOUR


async def test_a_filter_on_the_rows_shows_by_itself(tmp_path: Path) -> None:
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: "weekly-invoices" in screen_text(app))
        app.timeline.rows.set_filter("nightly")  # the Tasks pane's `/`
        await until(pilot, lambda: "weekly-invoices" not in screen_text(app))
        assert row(app, "runs").split()[-1] == "3"  # the density counts the rows shown
        assert app.timeline.virtual_size.height == 3 + 5


async def test_the_cursor_moves_over_tasks_and_says_which(tmp_path: Path) -> None:
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 12)) as pilot:  # room for 7 of the 10 tasks
        await until(pilot, lambda: "backup-db" in screen_text(app))
        rows = app.timeline.rows
        await pilot.press("down")
        await until(pilot, lambda: app.timeline.selected_key == rows.key_at(1))
        assert app.highlighted[-1] == rows.key_at(1)
        await pilot.press("end")
        await until(pilot, lambda: "weekly-invoices" in screen_text(app))
        assert "backup-db" not in screen_text(app)  # scrolled to keep the cursor in view
        assert app.timeline.selected_key == rows.key_at(len(rows) - 1)


async def test_a_task_turned_off_leaves_the_density_and_time_moves_the_axis(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    app = TimelineApp(db)
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: "every-15m" in screen_text(app))

        def total() -> str:
            return row(app, "runs").split()[-1]

        before = int(total())
        store = await Store.open(db)
        try:  # another process turns it off; the board's rows take the new record
            turned = await store.set_enabled("every-15m", False, NOW, note="on hold")
        finally:
            await store.close()
        app.timeline.rows.upsert(turned)  # the screen need not say: the widget sees it
        every15 = int(app.timeline.times.counts(turned, app.timeline._axis).total)
        await until(pilot, lambda: total() == str(before - every15))
        await until(pilot, lambda: row(app, "every-15m").rstrip().endswith(" off"))
        app.clock = NOW + 5 * HOUR  # 00:40 GMT: the nightly batches have run
        await until(pilot, lambda: "from Sun 00:" in screen_text(app))
        assert row(app, "nightly-batch-a").rstrip().endswith(" 1")  # tomorrow's 23:00
        assert "▼" in row(app, "Europe/London")  # the change is still ahead


async def test_seed_reads_back_what_it_stored(tmp_path: Path) -> None:
    rows = await seed(tmp_path / "t.db")
    assert len(rows) == 10 and rows.at(0).name == "backup-db"


def test_timeline_snapshot(snap_compare, tmp_path: Path) -> None:
    """The timeline at 100 columns on the evening before the clocks go forward, the cursor
    on the second task."""
    app = TimelineApp(tmp_path / "t.db")

    async def loaded(pilot) -> None:
        await until(pilot, lambda: len(app.timeline.rows) == 10)
        await pilot.press("down")
        await pilot.pause()

    assert snap_compare(app, run_before=loaded, terminal_size=(100, 20))


async def test_a_big_board_is_counted_between_other_work_to_the_same_sum(
    tmp_path: Path, monkeypatch
) -> None:
    from tickui.ui.widgets import timeline as widget

    monkeypatch.setattr(widget, "COUNT_AT_ONCE", 3)  # these 10 tasks count as a big board
    app = TimelineApp(tmp_path / "t.db")
    async with app.run_test(size=(100, 24)) as pilot:
        await until(pilot, lambda: len(app.timeline.rows) == 10)
        await until(pilot, lambda: row(app, "runs").split()[-1].isdigit())
        at_once = app.timeline._count(list(app.timeline._tasks()), app.timeline._axis)
        assert row(app, "runs").split()[-1] == str(at_once.total)  # the same sum
        await pilot.press("minus")
        await until(pilot, lambda: "next 7d" in screen_text(app) and "busiest" in screen_text(app))
        week = app.timeline._count(list(app.timeline._tasks()), app.timeline._axis)
        assert row(app, "runs").split()[-1] == str(week.total)
