"""The columns of the Tasks, Occurrences and hook deliveries tables and how a row becomes
cells."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from tickui.ui.view.cells import Cell, TimeView
from tickui.ui.view.layout import Column, RowSource
from tickui.ui.view.rows import OccurrenceRows, TaskRows

# Column(title, min, preferred, priority, flex): see table.layout_columns.
TASK_COLUMNS = [
    Column("NAME", 8, 16, flex=True),
    Column("SCHEDULE", 8, 14, priority=3, flex=True),
    Column("NEXT", 8, 16, flex=True),  # "2027-01-15 09:00" whole: a date beats OK% and MED
    Column("LEFT", 6, right=True),
    Column("LAST", 8, 16, priority=7, flex=True),
    Column("PASSED", 6, priority=8, right=True),
    Column("RESULT", 9, 26, flex=True),  # "failed, retry 2/4 in 1m00s" when one waits
    Column("OK%", 4, priority=5, right=True),
    Column("MED", 5, priority=6, right=True),
    # what it does now ("running 41s", "retry 2/4 in 40s") or why it is off ("off CRM
    # migration"): worth more than PASSED or POLICY
    Column("STATE", 7, 16, priority=2, flex=True),
    Column("POLICY", 6, 11, priority=9, flex=True),
    Column("MISS/SKIP", 9, priority=4, right=True),
]
OCCURRENCE_COLUMNS = [
    Column("ID", 4, 6, priority=4, right=True),  # what `c` and the run view name a run by
    Column("STATE", 9),
    Column("TASK", 8, 16, flex=True),
    Column("KIND", 6, 8, priority=6, flex=True),  # sched, manual, backfill
    Column("SCHED", 8, 9, priority=3, flex=True),
    Column("START", 8, 9, flex=True),
    Column("LATE", 7, priority=5, right=True),
    Column("TOOK", 6, right=True),
    Column("CODE", 8, 11, priority=1, flex=True),
    # free text, read whole in the run view: spare width only, never pushes a column out
    Column("DETAIL", 6, 8, priority=2, flex=True),
]
# Runs on workers (Kafka dispatch): which one, before DETAIL. Kept over KIND, LATE and ID when
# narrow (ID is in the run view and c's question), so at 120 columns beside the side panes it
# shows; dropped before SCHED.
WORKER_COLUMN = Column("WORKER", 6, 14, priority=3, flex=True)
WORKER_AT = 9
OCCURRENCE_COLUMNS_WITH_WORKER = [
    *OCCURRENCE_COLUMNS[:WORKER_AT],
    WORKER_COLUMN,
    *OCCURRENCE_COLUMNS[WORKER_AT:],
]
# The hooks screen's recent deliveries: when, which hook, how it went and why; the event,
# task, run and tries go first when narrow.
DELIVERY_COLUMNS = [
    Column("WHEN", 8, 23, flex=True),  # "2027-01-15 09:00:00 CET"
    Column("HOOK", 4, 24, flex=True),
    Column("EVENT", 5, 16, priority=3, flex=True),
    Column("TASK", 4, 24, priority=2, flex=True),
    Column("RUN", 3, 6, priority=4, right=True),
    Column("OUTCOME", 9),
    Column("TRIES", 5, priority=5, right=True),
    Column("DETAIL", 6, 60, priority=1, flex=True),
]


class CellSource(RowSource):
    """Rows (`TaskRows` or `OccurrenceRows`) read through their cell function, whose times
    show in `view`'s zone (settable: the table then repaints what changed)."""

    def __init__(
        self,
        rows: TaskRows | OccurrenceRows,
        cells: Callable[[Any, int, TimeView], list[Cell]],
        view: TimeView | None = None,
    ):
        self.rows = rows
        self.to_cells = cells
        self.view = view or TimeView()

    @property
    def sort(self) -> tuple[str, bool] | None:  # type: ignore[override]
        return self.rows.sort if isinstance(self.rows, TaskRows) else None

    def __len__(self) -> int:
        return len(self.rows)

    def cells(self, index: int, now: int) -> list[Cell] | None:
        row = self.rows.at(index)
        return self.to_cells(row, now, self.view) if row is not None else None

    def key_at(self, index: int) -> Hashable | None:
        return self.rows.key_at(index)

    def index_of(self, key: Hashable) -> int | None:
        return self.rows.index_of(key)  # type: ignore[arg-type]

    def hold(self, on: bool) -> bool:
        return self.rows.hold(on) if isinstance(self.rows, TaskRows) else False

    def reorders(self) -> bool:
        return isinstance(self.rows, TaskRows) and not self.rows.held
