"""The columns of the Tasks and Occurrences tables and how a row becomes cells."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tickui.ui.cells import Cell
from tickui.ui.rows import OccurrenceRows, TaskRows
from tickui.ui.table import Column, RowSource

TASK_COLUMNS = [
    Column("NAME", 16),
    Column("SCHEDULE", 14, priority=3),
    Column("NEXT", 8),
    Column("LEFT", 6),
    Column("LAST", 8, priority=5),
    Column("PASSED", 6, priority=6),
    Column("RESULT", 9),
    Column("ENABLED", 0),
    Column("POLICY", 11, priority=7),
    Column("MISS/SKIP", 9, priority=4),
]
OCCURRENCE_COLUMNS = [
    Column("ID", 6, priority=5),
    Column("STATE", 9),
    Column("TASK", 16),
    Column("KIND", 6, priority=4),
    Column("SCHED", 8, priority=3),
    Column("START", 8),
    Column("LATE", 6, priority=2),
    Column("TOOK", 6),
    Column("CODE", 11, priority=1),
    Column("DETAIL", 0),
]


class CellSource(RowSource):
    """Rows (`TaskRows` or `OccurrenceRows`) read through their cell function."""

    def __init__(self, rows: TaskRows | OccurrenceRows, cells: Callable[[Any, int], list[Cell]]):
        self.rows = rows
        self.to_cells = cells

    def __len__(self) -> int:
        return len(self.rows)

    def cells(self, index: int, now: int) -> list[Cell] | None:
        row = self.rows.at(index)
        return self.to_cells(row, now) if row is not None else None
