"""The tables: column layout, times in a zone, what CODE says, sort, filters, per-task
numbers from a real SQLite store, the cursor following a row's id, theme colours."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from rich.cells import cell_len
from textual.app import App, ComposeResult
from textual.color import Color

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS, to_micros
from tickui.model.records import Occurrence, Task, TaskStats
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.ui.view.cells import (
    TimeView,
    occurrence_cells,
    outcome_code,
    stamp_in,
    task_cells,
    when_text,
)
from tickui.ui.view.columns import OCCURRENCE_COLUMNS, TASK_COLUMNS, CellSource
from tickui.ui.view.layout import Column, fit, layout_columns
from tickui.ui.view.rows import OccurrenceRows, TaskRows
from tickui.ui.widgets.table import RowTable
from ui_support import until

S = MICROS
PARIS = ZoneInfo("Europe/Paris")


def at(text: str, zone=UTC) -> int:
    return to_micros(datetime.fromisoformat(text).replace(tzinfo=zone))


def occ(occ_id: int, **fields) -> Occurrence:
    base = {"task_id": 1, "task": "t", "kind": "scheduled", "scheduled_for": T0,
            "state": "succeeded", "claimed_at": T0}  # fmt: skip
    return Occurrence(id=occ_id, **{**base, **fields})


def task(task_id: int, name: str, due: int | None = T0 + 60 * S, **fields) -> Task:
    spec = build_spec({"name": name, "every": "1m", "command": ["true"], **fields}, T0)
    return Task(task_id, name, spec, "cli", True, None, 1, T0, T0, T0, due, due)


# ---- layout ----------------------------------------------------------------------------


def _widths(columns: list[Column], width: int, wanted=None) -> dict[str, int]:
    return {columns[i].title: w for i, w in layout_columns(columns, width, wanted)}


@pytest.mark.parametrize("width", [80, 120, 200])
def test_every_shown_column_fits_its_title_and_the_row_fits_the_width(width: int) -> None:
    for columns in (TASK_COLUMNS, OCCURRENCE_COLUMNS):
        layout = layout_columns(columns, width)
        assert sum(w for _, w in layout) + len(layout) - 1 <= width
        for i, w in layout:
            assert w >= max(columns[i].min, len(columns[i].title))


def test_narrow_drops_the_highest_priority_numbers_first_and_keeps_priority_zero() -> None:
    narrow, wide = _widths(TASK_COLUMNS, 80), _widths(TASK_COLUMNS, 200)
    assert set(wide) == {c.title for c in TASK_COLUMNS}
    assert "POLICY" not in narrow and "PASSED" not in narrow  # priorities 8 and 7
    assert {"NAME", "NEXT", "LEFT", "RESULT"} <= set(narrow)
    occ = _widths(OCCURRENCE_COLUMNS, 78)  # an 80-column terminal, less the pane's border
    assert {"STATE", "TASK", "START", "TOOK", "CODE"} <= set(occ) and "ID" not in occ
    assert occ["TASK"] == 16  # its preferred width before optional columns show


def test_spare_width_goes_to_the_flexible_columns_that_are_cut_not_to_state() -> None:
    by = {c.title: i for i, c in enumerate(TASK_COLUMNS)}
    seen = {by["NAME"]: 6, by["STATE"]: 2, by["POLICY"]: 11, by["LAST"]: 8, by["NEXT"]: 8}
    wide = _widths(TASK_COLUMNS, 200, {**seen, by["SCHEDULE"]: 40})
    assert wide["SCHEDULE"] == 40  # all it needs
    assert wide["STATE"] == 7 and wide["NAME"] == 8  # no blank room: content is short
    note = _widths(TASK_COLUMNS, 98, {**seen, by["STATE"]: 11})
    assert note["STATE"] == 11  # "off on hold": POLICY (priority 8) gives way instead
    assert "POLICY" not in note
    by = {c.title: i for i, c in enumerate(OCCURRENCE_COLUMNS)}
    shared = _widths(OCCURRENCE_COLUMNS, 120, {by["DETAIL"]: 500, by["TASK"]: 20, by["CODE"]: 7})
    assert shared["TASK"] == 20 and shared["CODE"] == 8  # satisfied, being short
    assert sum(shared.values()) + len(shared) - 1 == 120  # DETAIL takes the rest


def test_a_cut_cell_ends_in_an_ellipsis_and_numbers_align_right() -> None:
    assert fit("0 3 * * * (Europe/Paris)", 14) == "0 3 * * * (Eu…"
    assert cell_len(fit("界界界界", 5)) == 5 and fit("界界界界", 5).endswith("…")
    assert fit("ok", 4) == "ok  " and fit("3m05s", 7, right=True) == "  3m05s"
    assert fit("x", 0) == ""


def test_a_sorted_column_has_room_for_its_arrow() -> None:
    layout = layout_columns([Column("NEXT", 4), Column("NAME", 4)], 20, None, "NEXT")
    assert layout[0] == (0, 5)


# ---- times -----------------------------------------------------------------------------


def test_when_text_shows_the_clock_today_the_weekday_within_six_days_else_the_date() -> None:
    now = at("2027-01-14 12:00")  # a Thursday
    assert when_text(at("2027-01-14 09:00:05"), now, UTC) == "09:00:05"
    assert when_text(at("2027-01-15 09:00"), now, UTC) == "Fri 09:00"
    assert when_text(at("2027-01-08 23:59"), now, UTC) == "Fri 23:59"  # 6 days back
    assert when_text(at("2027-01-21 09:00"), now, UTC) == "2027-01-21 09:00"
    assert when_text(None, now, UTC) == "-"
    # 23:30 UTC is already the next day in Paris
    assert when_text(at("2027-01-14 23:30"), now, PARIS) == "Fri 00:30"
    assert stamp_in(at("2027-01-15 08:00"), PARIS) == "2027-01-15 09:00:00 CET"
    assert stamp_in(at("2027-07-15 07:00"), PARIS) == "2027-07-15 09:00:00 CEST"


def test_time_view_zones_and_labels() -> None:
    assert TimeView("utc").zone("Asia/Tokyo") is UTC and TimeView("utc").label() == "UTC"
    assert TimeView("task", local=PARIS).zone("Asia/Tokyo") == ZoneInfo("Asia/Tokyo")
    assert TimeView("task", local=PARIS).zone(None) is PARIS  # no zone of its own
    assert TimeView("task", local=PARIS).zone("No/Such_Zone") is PARIS
    assert TimeView("local", local=PARIS).zone("Asia/Tokyo") is PARIS
    assert TimeView("local", local=PARIS).label() in ("local (CET)", "local (CEST)")
    assert TimeView("task").label() == "task zones"


def test_task_cells_show_times_in_the_view_and_in_task_mode_the_task_zone() -> None:
    now = at("2027-01-14 12:00")
    t = task(1, "tokyo", due=at("2027-01-14 13:00"), tz="Asia/Tokyo")
    by = {c.title: i for i, c in enumerate(TASK_COLUMNS)}
    assert task_cells(t, now, TimeView("utc"))[by["NEXT"]][0] == "13:00:00"
    assert task_cells(t, now, TimeView("local", local=PARIS))[by["NEXT"]][0] == "14:00:00"
    assert task_cells(t, now, TimeView("task"))[by["NEXT"]][0] == "22:00:00"
    t = task(1, "tokyo", due=at("2027-01-14 16:00"), tz="Asia/Tokyo")
    assert task_cells(t, now, TimeView("task"))[by["NEXT"]][0] == "Fri 01:00"
    assert len(task_cells(t, now, TimeView())) == len(TASK_COLUMNS)
    o = occ(1, scheduled_for=at("2027-01-10 08:00"), started_at=at("2027-01-10 08:00:03"))
    cells = occurrence_cells(o, now, TimeView("utc"))
    assert len(cells) == len(OCCURRENCE_COLUMNS)
    assert cells[4][0] == "Sun 08:00" and cells[6][0] == "+3.00s"


# ---- CODE ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"state": "succeeded", "exit_code": 0}, "0"),
        ({"state": "failed", "exit_code": 3, "error_code": "EXIT_NONZERO"}, "3"),
        ({"state": "failed", "exit_code": -15, "error_code": "TIMEOUT"}, "TIMEOUT"),
        ({"state": "failed", "exit_code": -9, "error_code": "KILLED"}, "SIGKILL"),
        ({"state": "cancelled", "exit_code": -15, "detail": "replaced"}, "REPLACED"),
        ({"state": "cancelled", "exit_code": -15, "detail": "cancelled_by_user"}, "CANCELLED"),
        ({"state": "cancelled", "exit_code": -15, "detail": "engine_stopped"}, "CANCELLED"),
        ({"state": "failed", "error_code": "INTERRUPTED"}, "INTERRUPTED"),
        ({"state": "failed", "exit_code": None, "error_code": "DISPATCH_FAILED"}, "DISPATCH"),
        ({"state": "failed", "exit_code": -15, "error_code": "DISPATCH_FAILED"}, "DISPATCH"),
        ({"state": "failed", "error_code": "RUN_FAILED"}, "FAILED"),
        ({"state": "failed", "error_code": "SOME_RUNTIME_CODE"}, "SOME_RUNTIME_CODE"),
        ({"state": "running"}, ""),
        ({"state": "skipped", "detail": "skipped: forbid"}, ""),
    ],
)
def test_outcome_code_says_what_happened(fields: dict, code: str) -> None:
    assert outcome_code(occ(1, **fields)) == code


def test_every_error_code_the_engine_records_has_a_word() -> None:
    """Each error code written in tickui's sources maps to something other than itself
    or a bare signal number."""
    import pathlib
    import re

    import tickui

    root = pathlib.Path(tickui.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        text = path.read_text()
        found |= set(re.findall(r'error_code="([A-Z_]+)"', text))
        found |= set(re.findall(r'"error_code": "([A-Z_]+)"', text))
        found |= set(re.findall(r'DispatchFailure\("([A-Z_]+)"', text))
        found |= set(re.findall(r'\(occ\.id, "([A-Z_]+)"', text))
    assert {"TIMEOUT", "DISPATCH_FAILED", "KILLED", "EXIT_NONZERO", "INTERRUPTED"} <= found
    for code in found - {"EXIT_NONZERO"}:  # a plain exit: its code is the word
        shown = outcome_code(occ(1, state="failed", exit_code=-15, error_code=code))
        assert shown != "-15", code


# ---- sort --------------------------------------------------------------------------------


def _names(rows: TaskRows) -> list[str]:
    return [rows.at(i).name for i in range(len(rows))]


def test_tasks_sort_by_next_with_disabled_and_none_last_ties_by_name() -> None:
    rows = TaskRows()
    off = replace(task(4, "aaa-off", due=T0 + 5 * S), enabled=False)
    rows.load([task(1, "late", T0 + 90 * S), task(2, "b", T0 + 10 * S),
               task(3, "a", T0 + 10 * S), off, task(5, "done", None)])  # fmt: skip
    assert rows.sort == ("NEXT", False) and "NEXT" in TaskRows.SORTABLE
    assert _names(rows) == ["a", "b", "late", "aaa-off", "done"]
    rows.set_sort("NEXT", True)
    assert _names(rows) == ["late", "a", "b", "aaa-off", "done"]  # still last when absent
    rows.set_sort("NAME", True)
    assert _names(rows) == ["late", "done", "b", "aaa-off", "a"]
    rows.set_sort("NAME", False)
    assert _names(rows) == ["a", "aaa-off", "b", "done", "late"]
    with pytest.raises(ValueError):
        rows.set_sort("NOPE", False)


def test_an_update_moves_one_row_and_says_so_and_index_of_follows() -> None:
    rows = TaskRows()
    rows.load([task(i, f"t{i:02d}", T0 + i * S) for i in range(1, 21)])
    assert not rows.upsert(rows.by_id[5])  # same key: nothing moved
    assert rows.upsert(replace(rows.by_id[5], due_at=T0 + 100 * S))  # ran: now last
    assert rows.at(19).id == 5 and rows.index_of(5) == 19 and rows.index_of(6) == 4
    assert rows.key_at(0) == 1 and rows.key_at(20) is None
    rows.set_filter("T1")  # case-insensitive
    assert [rows.at(i).id for i in range(len(rows))] == list(range(10, 20))
    assert rows.index_of(5) is None
    rows.remove(10)
    assert rows.index_of(11) == 0 and rows.total == 19


def test_schedule_sorts_by_how_often_a_task_runs() -> None:
    """Not by the text ("every 15s" before "every 1s"): intervals and crons by their
    period, a one-off after every repeating task, ties by name."""

    def scheduled(task_id: int, name: str, **schedule: str) -> Task:
        spec = build_spec({"name": name, "command": ["true"], **schedule}, T0)
        return Task(task_id, name, spec, "cli", True, None, 1, T0, T0, T0, T0, T0)

    rows = TaskRows()
    rows.load([
        scheduled(1, "daily-cron", cron="0 3 * * *"),
        scheduled(2, "fifteen", every="15s"),
        scheduled(3, "one", every="1s"),
        scheduled(4, "minutely-cron", cron="*/1 * * * *"),
        scheduled(5, "daily", every="1d"),
        scheduled(6, "once", at="2027-06-01T00:00:00Z"),
        scheduled(7, "seven", every="7s"),
    ])  # fmt: skip
    rows.set_sort("SCHEDULE", False)
    assert _names(rows) == [
        "one", "seven", "fifteen", "minutely-cron", "daily", "daily-cron", "once"
    ]  # fmt: skip
    rows.set_sort("SCHEDULE", True)
    assert _names(rows) == [
        "daily", "daily-cron", "minutely-cron", "fifteen", "seven", "one", "once"
    ]  # fmt: skip


def test_sort_by_stats_columns_uses_the_numbers() -> None:
    rows = TaskRows()
    a, b, c = task(1, "a"), task(2, "b"), task(3, "c")
    a.stats = TaskStats(success_rate=0.5, median_duration_us=3 * S)
    b.stats = TaskStats(success_rate=1.0, median_duration_us=1 * S)
    rows.load([a, b, c])
    rows.set_sort("OK%", False)
    assert _names(rows) == ["a", "b", "c"]  # c has no runs: last
    rows.set_sort("MED", True)
    assert _names(rows) == ["a", "b", "c"]


# ---- occurrence filters ------------------------------------------------------------------


def test_occurrence_filter_keeps_what_it_shows_and_says_what_it_is() -> None:
    rows = OccurrenceRows()
    rows.load([occ(1, task="Backup", state="failed"), occ(2, task="report"),
               occ(3, task="backup-db", state="skipped", task_id=2),
               occ(4, task="x", state="running", task_id=3)])  # fmt: skip
    assert rows.filter_label() == "" and len(rows) == 4
    rows.set_filter(text="BACK")
    assert [rows.at(i).id for i in range(len(rows))] == [3, 1]
    assert rows.filter_label() == "task ~ 'BACK'"
    rows.set_filter(text="back", state="not skipped")
    assert [rows.at(i).id for i in range(len(rows))] == [1]
    assert rows.filter_label() == "task ~ 'back' · not skipped"
    assert not rows.upsert(occ(9, task="backup", state="skipped"))  # hidden: not kept
    assert rows.upsert(occ(10, task="backup", state="succeeded")) and rows.key_at(0) == 10
    assert not rows.upsert(occ(10, task="backup", state="skipped")) and 10 not in rows.by_id
    rows.set_filter(state="running", task_id=3, task_name="x")
    assert rows.filter_label() == "task = x · running"
    assert rows.query() == {"task_text": None, "states": ["claimed", "accepted", "running"],
                            "task_id": 3}  # fmt: skip
    with pytest.raises(ValueError):
        rows.set_filter(state="bogus")


async def _add_runs(store: Store, task_row: Task, runs: list[tuple[str, int | None]]) -> None:
    """Occurrences of `task_row`, oldest first: (state, duration in µs or None)."""
    base = await store._one("SELECT coalesce(max(scheduled_for), ?) FROM occurrences", (T0,))
    items = []
    for n, (state, took) in enumerate(runs, start=1):
        slot = base[0] + n * 60 * S
        started = slot + S if took is not None else None
        finished = started + took if took is not None else (slot if state == "skipped" else None)
        items.append((task_row.id, task_row.name, slot, state, slot, started, finished))
    async with store._write():
        await store._conn.executemany(
            "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
            " started_at, finished_at) VALUES (?, ?, 'scheduled', ?, ?, ?, ?, ?)",
            items,
        )


async def _store_with(tmp_path, *names: str) -> tuple[Store, list[Task]]:
    store = await Store.open(tmp_path / "t.db")
    tasks = []
    for name in names:
        spec = build_spec({"name": name, "every": "1m", "command": ["true"]}, T0)
        tasks.append(await store.add_task(spec, T0))
    return store, tasks


async def test_newest_occurrences_filters_in_sql_as_the_rows_do(tmp_path) -> None:
    store, (backup, report) = await _store_with(tmp_path, "nightly-backup", "report")
    try:
        await _add_runs(store, backup, [("succeeded", S), ("failed", S), ("skipped", None)])
        await _add_runs(store, report, [("failed", S), ("running", None)])
        rows = OccurrenceRows()
        cases = [("", "all", None), ("backup", "all", None), ("BACK", "failed", None),
                 ("", "not skipped", None), ("", "running", None),
                 ("", "all", report.id), ("o", "failed", backup.id)]  # fmt: skip
        everything = await store.newest_occurrences(100)
        assert len(everything) == 5
        for text, state, task_id in cases:
            rows.set_filter(text, state, task_id)
            got = [o.id for o in await store.newest_occurrences(100, **rows.query())]
            assert got == [o.id for o in everything if rows.shows(o)], (text, state, task_id)
        rows.set_filter("backup", "all")
        assert len(await store.newest_occurrences(100, **rows.query())) == 3
        assert len(await store.newest_occurrences(2, **rows.query())) == 2
        newest = everything[0].id
        assert await store.newest_occurrences(100, newest) == []
    finally:
        await store.close()


# ---- per-task numbers --------------------------------------------------------------------


async def test_task_stats_result_rate_and_median_over_the_last_100_finished_runs(tmp_path):
    store, (busy, skippy, idle) = await _store_with(tmp_path, "busy", "skippy", "idle")
    try:
        # 30 old failures fall out of the window of 100 finished runs
        runs = [("failed", 50 * S)] * 30 + [("succeeded", 2 * S)] * 90 + [("failed", 4 * S)] * 8
        runs += [("cancelled", None), ("cancelled", 99 * S), ("skipped", None), ("running", None)]
        await _add_runs(store, busy, runs)
        await _add_runs(store, skippy, [("succeeded", 1 * S), ("failed", 3 * S),
                                        ("skipped", None), ("skipped", None)])  # fmt: skip
        stats = await store.task_stats()
        s = stats[busy.id]
        assert s.last_state == "running" and s.last_result == "cancelled"
        assert s.finished == 100 and s.skipped == 1 and s.active == 1
        assert s.success_rate == pytest.approx(0.90)  # 90 of 100 (2 failed from the old 30)
        assert s.median_duration_us == 2 * S  # cancelled runs do not count
        k = stats[skippy.id]
        assert k.last_state == "skipped" and k.last_result == "failed"  # skips are not runs
        assert k.success_rate == 0.5 and k.median_duration_us == 2 * S and k.skipped == 2
        assert idle.id not in stats
        assert (await store.task_stats([skippy.id])) == {skippy.id: k}
        assert await store.task_stats([]) == {}
        listed = {t.name: t.stats for t in await store.list_tasks()}
        assert listed["idle"].success_rate is None and listed["idle"].last_result is None
        t = listed["skippy"]
        by = {c.title: i for i, c in enumerate(TASK_COLUMNS)}
        row = replace((await store.list_tasks())[1], stats=t)
        cells = task_cells(row, T0, TimeView("utc"))
        assert cells[by["RESULT"]][0] == "failed" and cells[by["OK%"]][0] == "50%"
        assert cells[by["MED"]][0] == "2.0s" and cells[by["MISS/SKIP"]][0] == "0/2"
    finally:
        await store.close()


# ---- the widget: selection, header, theme ------------------------------------------------


class OccApp(App):
    def __init__(self, rows: OccurrenceRows) -> None:
        super().__init__()
        self.rows = rows
        self.table = RowTable(OCCURRENCE_COLUMNS, CellSource(rows, occurrence_cells), lambda: T0)
        self.clicked: list[str] = []

    def compose(self) -> ComposeResult:
        yield self.table

    def on_row_table_header_clicked(self, event: RowTable.HeaderClicked) -> None:
        self.clicked.append(event.column_title)


async def test_a_pane_nobody_is_in_shows_the_newest_rows_as_they_arrive(run_app) -> None:
    """Its cursor on the top row and the focus elsewhere, the pane follows the top (as a
    log does): the demo showed runs from a minute ago and "↑ 73 newer above". Once the
    pane is focused, the cursor keeps its row (the test below)."""
    rows = OccurrenceRows()
    rows.load([occ(i, task=f"t{i}") for i in range(1, 11)])
    app = OccApp(rows)
    pilot = await run_app(app, size=(120, 20))
    table = app.table
    await pilot.pause()
    app.set_focus(None)
    await pilot.pause()
    table.sync_size()
    assert table.selected_key == 10 and not table.has_focus
    for i in range(11, 61):
        rows.upsert(occ(i, task=f"t{i}"))
        table.sync_size()
    await pilot.pause()
    assert table.selected_key == 60 and table.cursor == 0 and table.scroll_offset.y == 0
    table.focus()
    await pilot.pause()
    for i in range(61, 71):
        rows.upsert(occ(i, task=f"t{i}"))
        table.sync_size()
    assert table.selected_key == 60 and table.cursor == 10  # in it: the row is kept


async def test_the_cursor_stays_on_its_occurrence_while_50_arrive_on_top(run_app) -> None:
    rows = OccurrenceRows()
    rows.load([occ(i, task=f"t{i}") for i in range(1, 101)])
    app = OccApp(rows)
    pilot = await run_app(app, size=(120, 20))
    table = app.table
    table.focus()
    table.sync_size()
    for _ in range(5):
        await pilot.press("down")
    picked = table.selected_key
    assert picked == 95 and table.cursor == 5
    # rows end left of the scrollbar, so a cut cell's "…" shows
    region = table.scrollable_content_region
    assert region.width == table.size.width - table.styles.scrollbar_size_vertical > 0
    assert table.render_line(1).cell_length == region.width
    for i in range(101, 151):
        rows.upsert(occ(i, task=f"t{i}"))
    table.sync_size()
    await pilot.pause()
    assert table.selected_key == 95 and table.cursor == 55
    assert table.scroll_offset.y <= 55 < table.scroll_offset.y + table.size.height - 1
    assert table.scroll_offset.y == 50  # the row keeps its line on screen
    # the selected row goes: the cursor moves to the row now in its place
    rows._remove(95)
    table.sync_size()
    assert table.selected_key == 94 and table.cursor == 55
    assert table.select_key(150) and table.cursor == 0 and table.scroll_offset.y == 0
    assert not table.select_key(12345) and table.selected_key == 150
    # at the top with room: new rows show above, the cursor still follows its row
    rows.upsert(occ(151))
    table.sync_size()
    assert table.selected_key == 150 and table.cursor == 1 and table.scroll_offset.y == 0
    await pilot.click(RowTable, offset=(2, 0))
    assert app.clicked == ["ID"]
    # a row hidden by a filter, with no sync_size: the next second's repaint re-finds it
    rows.set_filter(state="failed")
    rows.upsert(occ(152, state="failed"))
    table.refresh_changed()
    assert table.selected_key == 152 and table.virtual_size.height == 2


async def test_cells_take_the_theme_colours_light_and_dark(run_app) -> None:
    rows = OccurrenceRows()
    rows.load([occ(1, state="failed", exit_code=3, error_code="EXIT_NONZERO"), occ(2)])
    app = OccApp(rows)
    pilot = await run_app(app, size=(100, 10))
    table = app.table
    table.focus()
    table.sync_size()
    for theme in ("textual-light", "solarized-light", "textual-dark"):
        app.theme = theme
        await pilot.pause()
        variables = app.theme_variables
        surface = Color.parse(variables["surface"])
        cursor_bg = Color.parse(variables["block-cursor-background"])
        cursor_line = table.render_line(1)  # row 0: the cursor's
        other = table.render_line(2)
        for segment in other:
            assert segment.style.bgcolor is not None, theme
            assert Color.from_rich_color(segment.style.bgcolor) == surface, theme
            assert segment.style.color is not None, theme
        for segment in cursor_line:
            assert Color.from_rich_color(segment.style.bgcolor) == cursor_bg, theme
        failed = next(s for s in other if s.text.strip() == "failed")
        error = Color.parse(variables["text-error"])
        assert Color.from_rich_color(failed.style.color) == error, theme
        header = next(iter(table.render_line(0)))
        assert Color.from_rich_color(header.style.bgcolor) == Color.parse(variables["panel"])
    # without focus the cursor row reads in the theme's blurred cursor colour
    focused = next(iter(table.render_line(1))).style.bgcolor
    app.set_focus(None)
    await pilot.pause()
    blurred = next(iter(table.render_line(1))).style.bgcolor
    assert blurred is not None and blurred != focused
    assert Color.from_rich_color(blurred) != surface


async def test_the_app_keeps_the_selected_run_while_new_runs_arrive(tmp_db, dashboard) -> None:
    """The full dashboard: pick a run in the Occurrences pane; 50 newer ones arrive
    (recorded by another connection, as a second tickui would); the pick stays."""
    clock = ManualClock(T0)
    db = tmp_db
    app, pilot = await dashboard(clock, start_engine=False, size=(160, 50), started=False)
    await until(pilot, lambda: app.host is not None and len(app.board.task_rows) > 0)
    other = await Store.open(db)
    try:
        alpha = await other.get_task("alpha")
        await _add_runs(other, alpha, [("succeeded", S)] * 10)
        await app.live.look_outside()
        await until(pilot, lambda: len(app.board.occ_rows) == 10)
        table = app.board.occ_table
        table.focus()
        await pilot.press("down", "down", "down")
        picked = table.selected_key
        assert picked == app.board.occ_rows.key_at(3)
        await _add_runs(other, alpha, [("failed", S)] * 50)
        await app.live.look_outside()
        await until(pilot, lambda: len(app.board.occ_rows) == 60)
        await until(pilot, lambda: table.cursor == 53, timeout=2)  # moved in the same refresh
        assert table.selected_key == picked
        assert app.dashboard.selected_occurrence().id == picked
    finally:
        await other.close()


class TaskApp(App):
    def __init__(self, rows: TaskRows) -> None:
        super().__init__()
        self.table = RowTable(TASK_COLUMNS, CellSource(rows, task_cells), lambda: T0)

    def compose(self) -> ComposeResult:
        yield self.table


async def test_the_sorted_column_shows_its_arrow_and_a_resort_keeps_the_selection(run_app) -> None:
    rows = TaskRows()
    rows.load([task(i, f"t{i:02d}", T0 + (30 - i) * S) for i in range(1, 21)])
    app = TaskApp(rows)
    pilot = await run_app(app, size=(150, 12))
    table = app.table
    table.sync_size()
    await pilot.pause()
    header = table.render_line(0).text
    assert "NEXT▲" in header and "NAME " in header
    assert table.selected_key == 20  # the soonest first
    table.select_key(18)
    rows.set_sort("NAME", True)
    table.sync_size()
    await pilot.pause()
    assert "NAME▼" in table.render_line(0).text and "NEXT▲" not in table.render_line(0).text
    assert table.selected_key == 18 and table.cursor == rows.index_of(18) == 2
    assert rows.at(0).name == "t20"


def test_the_occurrences_pane_keeps_the_newest_500_that_pass_its_filter() -> None:
    """README: Occurrences shows the newest 500 that pass the pane's filters, newest first."""
    rows = OccurrenceRows()
    rows.set_filter(state="failed")
    for n in range(1, 1201):  # every other one failed: 600 pass the filter
        rows.upsert(occ(n, state="failed" if n % 2 else "succeeded"))
    assert len(rows) == 500
    assert rows.key_at(0) == 1199 and rows.key_at(499) == 1199 - 2 * 499
