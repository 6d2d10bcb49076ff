"""A small app holding only the timeline, over tasks read from a real SQLite file: the
Saturday evening before Europe/London's clocks go forward (Sun 28 Mar 2027, 01:00 GMT)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from textual.app import App, ComposeResult

from tickui.common.timeutil import to_micros
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.ui.view.cells import TimeView
from tickui.ui.view.rows import TaskRows
from tickui.ui.widgets.timeline import DayTimeline

NOW = to_micros(datetime(2027, 3, 27, 19, 40, tzinfo=UTC))
LONDON = ZoneInfo("Europe/London")
TASKS = [
    ("backup-db", {"cron": "0 2 * * *", "tz": "Europe/London"}),
    ("every-15m", {"cron": "*/15 * * * *"}),
    ("hourly-report", {"cron": "@hourly", "tz": "Europe/London"}),
    ("nightly-batch-a", {"cron": "0 23 * * *", "tz": "Europe/London"}),
    ("nightly-batch-b", {"cron": "0 23 * * *", "tz": "Europe/London"}),
    ("nightly-batch-c", {"cron": "5 23 * * *", "tz": "Europe/London"}),
    ("sync-inventory", {"every": "90m", "anchor": "2027-03-27T00:10:00Z"}),
    ("cleanup-tmp", {"cron": "30 3 * * *", "tz": "Europe/London"}),
    ("export-orders", {"cron": "0 */4 * * *"}),
    ("weekly-invoices", {"cron": "0 6 * * 1", "tz": "Europe/London"}),
]
OFF = {"cleanup-tmp": "on hold", "export-orders": "paused after 3 consecutive failures (last: 1)"}


async def seed(db: Path) -> TaskRows:
    """The tasks above in a new SQLite store (two of them off, one paused), read back."""
    store = await Store.open(db)
    try:
        for name, fields in TASKS:
            await store.add_task(
                build_spec({"name": name, "command": ["true"], **fields}, NOW), NOW
            )
        for name, note in OFF.items():
            await store.set_enabled(name, False, NOW, note=note)
        rows = TaskRows()
        rows.set_sort("NAME")
        rows.load(await store.list_tasks())
        return rows
    finally:
        await store.close()


class TimelineApp(App):
    """The timeline alone, its tasks loaded from `db` when it mounts."""

    def __init__(self, db: Path, now: int = NOW) -> None:
        super().__init__()
        self.db = db
        self.clock = now
        self.view = TimeView("local", LONDON)  # the dashboard's zone choice (`z`)
        self.timeline = DayTimeline(TaskRows(), self.now, time_view=lambda: self.view)
        self.spans: list[int] = []  # what the timeline told, in order
        self.highlighted: list[int | None] = []

    def now(self) -> int:
        return self.clock

    def compose(self) -> ComposeResult:
        yield self.timeline

    async def on_mount(self) -> None:
        self.timeline.rows = await seed(self.db)
        self.timeline.sync_size()
        self.timeline.focus()

    def on_day_timeline_span_changed(self, message: DayTimeline.SpanChanged) -> None:
        self.spans.append(message.span)

    def on_day_timeline_highlighted(self, message: DayTimeline.Highlighted) -> None:
        self.highlighted.append(message.task_id)
