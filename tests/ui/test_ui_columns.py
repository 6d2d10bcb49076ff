"""Every table's columns fit or are cut with "…", a space apart, at every width: the
column sets of every pane through the one layout (pure), and the dashboard's tables as
drawn at 80 to 200 columns with long values (pilot)."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest
from rich.cells import cell_len

from helpers import T0
from tickui.common.timeutil import MICROS
from tickui.model.records import Occurrence
from tickui.model.spec import build_spec
from tickui.store import Beat
from tickui.ui import sample
from tickui.ui.view.cells import Cell
from tickui.ui.view.columns import (
    DELIVERY_COLUMNS,
    OCCURRENCE_COLUMNS,
    OCCURRENCE_COLUMNS_WITH_WORKER,
    TASK_COLUMNS,
)
from tickui.ui.view.layout import (
    ELLIPSIS,
    Column,
    FittedTable,
    content_widths,
    fit_row,
    layout_columns,
)
from tickui.ui.widgets.table import RowTable
from tickui.ui.widgets.workers import WORKER_COLUMNS, WorkerLines, WorkersPane
from ui_support import until

WIDTHS = (80, 100, 120, 160, 200)
LONG = "a-task-name-much-longer-than-any-column-gives-it"

# Realistic long values for each column title (what cells.py and workers.py write).
VALUES = {
    "NAME": LONG, "SCHEDULE": "0 3 * * 1-5 (Europe/Berlin)", "NEXT": "2027-01-15 09:00",
    "LEFT": "18h00m", "LAST": "2027-01-15 08:00", "PASSED": "10m20s",
    "RESULT": "failed, retry 2/4 in 1m00s", "OK%": "100%", "MED": "12m30s",
    "STATE": "retry 2/4 in 40s", "POLICY": "once/replace", "MISS/SKIP": "1204/3391",
    "ID": "123456", "TASK": LONG, "KIND": "backfill", "SCHED": "01-15 08:00", "START": "08:00:01",
    "LATE": "+12.50s", "TOOK": "3h20m", "CODE": "CANCELLED", "DETAIL": "exit 3: " + "disk " * 30,
    "WORKER": "a-very-long-worker-name-for-gpu-jobs", "SEEN": "3m20s ago", "RUN": "12/16",
    "HOST": "gpu-box-with-a-long-hostname.example.com", "VERSION": "0.13.2-dev+g1234567",
    "WHEN": "2027-01-15 09:00:00 CET", "HOOK": "pager-duty-for-the-nightly-jobs",
    "EVENT": "run.failed", "OUTCOME": "delivered", "TRIES": "12",
}  # fmt: skip
SHORT = {title: value[:3] for title, value in VALUES.items()}

COLUMN_SETS = {
    "tasks": TASK_COLUMNS,
    "occurrences": OCCURRENCE_COLUMNS,
    "occurrences+worker": OCCURRENCE_COLUMNS_WITH_WORKER,
    "workers": WORKER_COLUMNS,
    "hook deliveries": DELIVERY_COLUMNS,
}


def row_of(columns: list[Column], values: dict[str, str]) -> list[Cell]:
    return [(values[column.title], "") for column in columns]


def assert_apart(line: str, layout: list[tuple[int, int]], cells: list[str], gap: int = 1) -> None:
    """Each cell of `line` at its column's place is its value whole or cut with "…" (and
    padded), and the cells are `gap` blanks apart: no two values touch."""
    at = 0
    for n, ((_, width), value) in enumerate(zip(layout, cells, strict=True)):
        if n:
            assert line[at : at + gap] == " " * gap, (line, at)
            at += gap
        drawn = line[at : at + width]
        assert cell_len(drawn) == width, (drawn, width)
        shown = drawn.strip()
        if cell_len(value) <= width:
            assert shown == value, (shown, value)
        else:
            assert shown.endswith(ELLIPSIS) and value.startswith(shown[:-1]), (shown, value)
        at += width
    assert cell_len(line.rstrip()) <= cell_len(line)


@pytest.mark.parametrize("name", COLUMN_SETS)
@pytest.mark.parametrize("values", [VALUES, SHORT], ids=["long", "short"])
def test_every_column_set_fits_or_cuts_at_every_width(name: str, values: dict) -> None:
    columns = COLUMN_SETS[name]
    cells = row_of(columns, values)
    for width in range(1, 241):
        layout = layout_columns(columns, width, content_widths(columns, [cells]))
        used = sum(w for _, w in layout) + len(layout) - 1
        assert used <= width, (name, width, layout)
        line = "".join(text for text, _ in fit_row(columns, layout, cells))
        assert cell_len(line) == used
        assert_apart(line, layout, [cells[i][0] for i, _ in layout])


def test_columns_that_are_never_dropped_are_cut_not_cropped_when_narrow() -> None:
    columns = [Column("A", 10), Column("B", 10), Column("C", 10, flex=True)]
    cells: list[Cell] = [("x" * 10, ""), ("y" * 10, ""), ("z" * 30, "")]

    def drawn(width: int) -> str:
        layout = layout_columns(columns, width, content_widths(columns, [cells]))
        return "".join(text for text, _ in fit_row(columns, layout, cells))

    assert drawn(25) == "x" * 10 + " " + "y" * 10 + " " + "zz…"  # the flexible one first
    assert drawn(14) == "xxxxx… yy… zz…"  # then from the right
    assert drawn(8) == "xxx… yy…"  # C cannot have 3 cells: it goes
    assert drawn(2) == "x…" and drawn(1) == "…" and drawn(0) == ""


@pytest.mark.parametrize("width", [*WIDTHS, 40, 60])
def test_the_detail_runs_and_hook_deliveries_fit_their_width(width: int) -> None:
    from tickui.ui.screens.detail import runs_table

    occ = sample_occurrence()
    runs = runs_table([occ, occ], 0, T0 + 7200 * MICROS, UTC)
    deliveries = FittedTable(DELIVERY_COLUMNS, [row_of(DELIVERY_COLUMNS, VALUES)] * 2)
    for table in (runs, deliveries):
        layout = layout_columns(
            table.columns, width - 2, content_widths(table.columns, table.rows), gap=2
        )
        lines = table.lines(width)
        assert all(line.cell_len <= width for line in lines)
        for line, cells in zip(lines[1:], table.rows, strict=True):
            assert line.plain[0] == " "
            assert_apart(line.plain[1:], layout, [cells[i][0] for i, _ in layout], gap=2)


def sample_occurrence() -> Occurrence:
    return Occurrence(
        id=123456, task_id=1, task=LONG, kind="backfill", scheduled_for=T0, state="failed",
        claimed_at=T0, started_at=T0 + 12 * MICROS, finished_at=T0 + 7200 * MICROS,
        exit_code=3, detail="exit 3: " + "disk " * 40, worker=VALUES["WORKER"],
    )  # fmt: skip


# ---- as drawn ----------------------------------------------------------------------------


def drawn_rows(widget) -> list[str]:
    """The lines a table widget draws now (header first)."""
    return [widget.render_line(y).text for y in range(widget.size.height)]


@pytest.mark.parametrize("width", WIDTHS)
async def test_every_table_of_the_dashboard_keeps_its_columns_apart(
    tmp_path: Path, run_app, width: int
) -> None:
    """The Tasks, Occurrences and Workers panes at 80 to 200 columns, with a long task
    name, long worker names and hosts and a worker seen 3m20s ago: in every row drawn,
    every value sits in its column, whole or cut with "…", a space from the next."""
    app = sample.sample_app(tmp_path / "t.db")
    pilot = await run_app(app, size=(width, 60 if width > 120 else 40))
    await sample.workers_scene(pilot)
    store, now = app.host.store, app.host.clock.now()
    await store.record_heartbeats(
        [
            Beat(VALUES["WORKER"], VALUES["HOST"], 16, ["x"], VALUES["VERSION"], "alive",
                 now - 200 * MICROS, "/var/w"),
            Beat("w7", "h7", 8, [], "0.13", "draining", now - 4000 * MICROS, "/var/w"),
        ]
    )  # fmt: skip
    spec = build_spec({"name": LONG, "every": "10m", "command": ["true"]}, T0)
    task = await app.host.store.add_task(spec, now)
    app.live.mark(tasks=[task.id])
    await app.live.workers.read()
    await app.live.drain()
    await until(pilot, lambda: LONG[:10] in drawn_rows(app.board.tasks_table)[1])
    lines = app.dashboard.query_one(WorkerLines)
    await until(pilot, lambda: any(cells[0][0] == VALUES["WORKER"] for cells in lines.rows))
    checked = 0
    for table in (app.board.tasks_table, app.board.occ_table):
        await pilot.pause()
        checked += check_table(table)
    pane = app.dashboard.query_one(WorkersPane)
    if pane.display:
        layout = lines.layout(lines.size.width)
        for y, cells in enumerate(lines.rows, start=1):
            if y < lines.visible() - 1:
                assert_apart(drawn_rows(lines)[y], layout, [cells[i][0] for i, _ in layout])
                checked += 1
    assert checked >= 8


def check_table(table: RowTable) -> int:
    drawn_rows(table)  # a first paint measures the content: the layout settles
    layout = table._columns_for(table._width)
    rows = drawn_rows(table)
    assert table._columns_for(table._width) == layout
    checked = 0
    for y in range(1, len(rows)):
        index = table.scroll_offset.y + y - 1
        cells = table.source.cells(index, table.now()) if index < len(table.source) else None
        if cells is None:
            continue
        assert_apart(rows[y], layout, [cells[i][0] for i, _ in layout])
        checked += 1
    return checked
