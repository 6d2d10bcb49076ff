"""The main screen: header, Tasks and Occurrences, Ticks, breaker and workers, filter box,
keys."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Input

from tickui.ui.keys import rank
from tickui.ui.widgets.panes import Banner, BreakerPane, KeyFooter, StatusLine, TablePane, TicksPane
from tickui.ui.widgets.table import RowTable
from tickui.ui.widgets.workers import WorkersPane

NARROW = 110  # below this width the side panes move under the tables
SHORT = 30  # below this height the narrow layout drops the sparkline


class Dashboard(Screen[None]):
    """The main screen. Its layout classes follow its own size on every resize (the app's
    size moves before the screen is laid out again, so classes set there came a resize
    late)."""

    def __init__(self, tasks: RowTable, occurrences: RowTable) -> None:
        super().__init__()
        self.tasks = tasks
        self.occurrences = occurrences

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield Banner("", id="banner")
        with Horizontal(id="body"):
            with Vertical(id="tables"):
                yield TablePane("Tasks", self.tasks, id="tasks-pane")
                yield TablePane("Occurrences (newest first)", self.occurrences, id="occ-pane")
            with Vertical(id="side"):
                yield TicksPane(id="ticks")
                yield BreakerPane(id="breaker")
                yield WorkersPane(id="workers")  # shown when runs go to workers (app.py)
        yield Input(placeholder="filter by task name (enter keeps, esc clears)", id="filter")
        yield KeyFooter(rank, id="footer")

    def on_mount(self) -> None:
        self.tasks.focus()
        self.lay_out(self.app.size.width, self.app.size.height)

    def on_resize(self, event) -> None:
        self.lay_out(event.size.width, event.size.height)

    def lay_out(self, width: int, height: int) -> None:
        narrow, short = width < NARROW, height < SHORT
        if self.has_class("-narrow") != narrow or self.has_class("-short") != short:
            self.set_class(narrow, "-narrow")
            self.set_class(short, "-short")
            self.refresh(layout=True)
