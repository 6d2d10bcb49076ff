"""What the dashboard shows, in one place: the rows, the tables over them, the time view,
the remembered view choices and, once it is up, the host. The app makes it and hands it
down; the dashboard screen and the live refresh read and change it, nothing else does."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tickui.model.records import Occurrence, Task
from tickui.runtime.host import Host
from tickui.ui import settings as saved
from tickui.ui.view.cells import MODES, TimeView, occurrence_cells, task_cells
from tickui.ui.view.columns import OCCURRENCE_COLUMNS, TASK_COLUMNS, CellSource
from tickui.ui.view.rows import OccurrenceRows, TaskRows
from tickui.ui.widgets.grid import TaskGrid
from tickui.ui.widgets.table import RowTable
from tickui.ui.widgets.timeline import DayTimeline
from tickui.ui.widgets.workers import WorkerColumn


class Board:
    def __init__(self, settings_file: Path | None, warn: Callable[[str], None]) -> None:
        """`settings_file`: where view choices are kept (None: the user's config folder);
        `warn`: says once that they could not be saved."""
        self.settings_file = settings_file
        self.warn = warn
        self.prefs, self.prefs_problem = saved.load(settings_file)
        self.host: Host | None = None
        self.ready = asyncio.Event()  # the host is up and the first picture loaded
        self.quitting = False  # quit waits for the active runs
        self.view = TimeView(self.prefs.zone if self.prefs.zone in MODES else "local")
        self.task_rows = TaskRows()
        self.occ_rows = OccurrenceRows()
        self._apply_prefs_to_rows()
        self.task_cells = CellSource(self.task_rows, self._task_cells)
        self.occ_cells = CellSource(self.occ_rows, self._occurrence_cells)
        self.task_cells.view = self.occ_cells.view = self.view
        self.tasks_table = RowTable(TASK_COLUMNS, self.task_cells, self.now, id="tasks")
        self.occ_table = RowTable(OCCURRENCE_COLUMNS, self.occ_cells, self.now, id="occurrences")
        self.worker_column = WorkerColumn(self.occ_table)
        self.grid = TaskGrid(self.task_cells, self.task_rows.at, self.now, id="task-grid")
        # The Tasks pane's views, in the order its key steps through them (the first is
        # shown at start): each over the same rows, cursor and filter.
        self.timeline = DayTimeline(self.task_rows, self.now, time_view=lambda: self.view,
                                    id="timeline")  # fmt: skip
        self.task_views: dict[str, RowTable | DayTimeline] = {
            "table": self.tasks_table, "grid": self.grid, "timeline": self.timeline,
        }  # fmt: skip
        self.task_view_name = "table"  # the one shown
        self._save_failed = False

    @property
    def task_widget(self) -> RowTable | DayTimeline:
        """The Tasks pane's view shown now."""
        return self.task_views[self.task_view_name]

    def now(self) -> int:
        return self.host.clock.now() if self.host is not None else 0

    def _task_cells(self, task: Task, now: int, view: TimeView) -> list:
        """A task's cells, its STATE from the runs held for the Occurrences pane."""
        return task_cells(task, now, view, self.occ_rows.pending(task.id))

    def _occurrence_cells(self, occ: Occurrence, now: int, view: TimeView) -> list:
        """An occurrence's cells, its times in its task's zone when the view says so."""
        task = self.task_rows.by_id.get(occ.task_id)
        if task is None:
            return self.worker_column.cells(occ, occurrence_cells(occ, now, view))
        cells = occurrence_cells(occ, now, view, task.spec.tz, task.spec.retries)
        return self.worker_column.cells(occ, cells)

    def _apply_prefs_to_rows(self) -> None:
        prefs = self.prefs
        if prefs.sort_column in TaskRows.SORTABLE:
            self.task_rows.set_sort(prefs.sort_column, prefs.sort_descending)
        state = prefs.occ_state if prefs.occ_state in OccurrenceRows.STATES else "all"
        self.occ_rows.set_filter(text=prefs.occ_text, state=state)

    def set_view(self, view: TimeView) -> None:
        """Times in another zone from now on: both tables repaint."""
        self.view = view
        self.task_cells.view = self.occ_cells.view = view
        self.tasks_table.refresh()
        self.occ_table.refresh()

    def remember(self, **changes: object) -> None:
        """Keep a view choice for next time; a folder that cannot be written is said once."""
        self.prefs = self.prefs.but(**changes)
        try:
            saved.save(self.prefs, self.settings_file)
        except OSError as exc:
            if not self._save_failed:
                self._save_failed = True
                self.warn(f"settings not saved ({exc.strerror or exc}); they last until you quit")

    async def load_occurrences(self) -> None:
        """The newest occurrences that pass the Occurrences pane's filters (again after a
        filter changed); the cursor stays on the same occurrence when it is still shown."""
        assert self.host is not None
        rows = self.occ_rows
        rows.load(await self.host.store.newest_occurrences(rows.window, **rows.query()))
        for occ in rows.by_id.values():
            self.worker_column.note(occ)
        self.occ_table.sync_size()
