"""The Tasks pane's history grid, driven as a user would: v shows it and back, arrows move
between runs, enter opens one, the title says the cell; runs reach it live."""

from __future__ import annotations

from tickui.common.timeutil import MICROS
from tickui.store import Queued
from tickui.ui.screens.run import RunScreen
from tickui.ui.view.grid import OUTCOMES
from tickui.ui.widgets.grid import TaskGrid
from ui_support import pick, screen_text, until

GLYPH = {outcome: glyph for outcome, (glyph, _, _) in OUTCOMES.items()}


def row_of(app, name: str) -> str:
    """The grid's line of task `name` as the terminal shows it, inside the Tasks pane's
    border, without the spaces that end it."""
    line = next(line for line in screen_text(app).splitlines() if line.startswith(f"│{name} "))
    return line.split("│")[1].rstrip()


def timeline_row(app, name: str) -> str:
    """The day timeline's line of task `name`, as it draws it now."""
    timeline = app.board.timeline
    for y in range(timeline.size.height):
        text = timeline.render_line(y).text.rstrip()
        if text.startswith(f"{name} "):
            return text
    return ""


def tasks_title(app) -> str:
    return str(app.screen.query_one("#tasks-pane").border_title)


async def settled_runs(app, pilot, name: str, count: int) -> None:
    """`count` runs of `name`, each ended, made with r."""
    pick(app, name)
    for _ in range(count):
        before = len(await app.host.store.history(name))
        await pilot.press("r")
        await until(pilot, lambda b=before: len(app.board.occ_rows.by_id) > 0 and sum(
            1 for o in app.board.occ_rows.by_id.values() if o.task == name and not o.active
        ) > b)  # fmt: skip


async def test_v_shows_the_grid_on_the_same_task_and_v_again_the_table(dashboard) -> None:
    app, pilot = await dashboard()
    table, grid = app.board.tasks_table, app.board.grid
    pick(app, "beta")
    beta = table.selected_key
    await pilot.press("v")
    await until(pilot, lambda: grid.display and not table.display and app.focused is grid)
    assert grid.selected_key == beta
    await until(pilot, lambda: tasks_title(app).startswith("Tasks · grid · beta · no runs yet"))
    assert "← older" in screen_text(app) and "newer →" in screen_text(app)
    await pilot.press("down")
    assert grid.selected_key != beta
    moved = grid.selected_key
    await pilot.press("v")  # the timeline, then the table again
    timeline = app.board.timeline
    await until(pilot, lambda: timeline.display and not grid.display and app.focused is timeline)
    assert timeline.selected_key == moved
    assert tasks_title(app).startswith("Tasks · timeline")
    await pilot.press("v")
    await until(pilot, lambda: table.display and not timeline.display and app.focused is table)
    assert table.selected_key == moved  # the cursor stays on the task it was on
    assert tasks_title(app).startswith("Tasks · by NEXT")


async def test_the_timeline_view_marks_each_task_and_r_runs_the_one_picked(dashboard) -> None:
    app, pilot = await dashboard()
    timeline = app.board.timeline
    await pilot.press("v", "v")
    await until(pilot, lambda: timeline.display and app.focused is timeline)
    shown = screen_text(app)
    assert "runs" in shown and all(name in shown for name in ("alpha", "beta", "gamma"))
    await pilot.press("home", "down")
    picked = app.board.task_rows.by_id[timeline.selected_key].name
    before = len(await app.host.store.history(picked))
    await pilot.press("r")
    await until(pilot, lambda: any(o.task == picked for o in app.board.occ_rows.by_id.values()))
    assert len(await app.host.store.history(picked)) == before + 1
    await until(pilot, lambda: all(  # its run ended: its row's stats changed, in place
        not o.active for o in app.board.occ_rows.by_id.values() if o.task == picked
    ))  # fmt: skip
    await pilot.pause(0.2)
    assert "refresh failed" not in screen_text(app)
    await pilot.press("e")  # turned off: its row says so, live, and nothing failed
    await until(pilot, lambda: not app.board.task_rows.by_id[timeline.selected_key].enabled)
    await until(pilot, lambda: timeline_row(app, picked).endswith("off"))
    assert "refresh failed" not in screen_text(app)


async def test_cells_show_each_outcome_newest_on_the_right(dashboard) -> None:
    app, pilot = await dashboard()
    await settled_runs(app, pilot, "alpha", 2)
    await settled_runs(app, pilot, "beta", 1)
    store = app.host.store
    gamma = await store.get_task("gamma")
    now = app.host.clock.now()
    [queued] = await store.queue_occurrences(
        [Queued(gamma.id, "gamma", "backfill", now - 3600 * MICROS, gamma.generation)], now
    )
    [waiting] = await store.queue_occurrences(
        [Queued(gamma.id, "gamma", "backfill", now - 1800 * MICROS, gamma.generation)], now
    )
    await store.cancel_queued_occurrence(queued, now, "backfill cancelled")
    await pilot.press("v")
    grid = app.board.grid
    await until(pilot, lambda: all(t in grid.runs for t in app.board.task_rows.by_id))
    await until(pilot, lambda: row_of(app, "alpha").endswith(
        f"{GLYPH['succeeded']} {GLYPH['succeeded']}"))  # fmt: skip
    assert row_of(app, "beta").endswith(GLYPH["failed"])
    # gamma: the cancelled backfill, then the one still waiting (newest, on the right)
    assert row_of(app, "gamma").endswith(f"{GLYPH['cancelled']} {GLYPH['queued']}")
    assert [o.id for o in grid.runs[gamma.id]] == [waiting, queued]
    assert row_of(app, "sleepy") == "sleepy"  # no run: no cell


async def test_arrows_move_between_runs_and_the_title_says_the_cell(dashboard) -> None:
    app, pilot = await dashboard()
    await settled_runs(app, pilot, "beta", 1)
    await settled_runs(app, pilot, "alpha", 2)
    pick(app, "alpha")
    await pilot.press("v")
    grid = app.board.grid
    await until(pilot, lambda: grid.current_runs() is not None)
    runs = grid.current_runs()
    assert len(runs) == 2 and grid.slot == 0
    newest, older = runs
    await until(pilot, lambda: f"alpha · run {newest.id} · slot 08:00:00 · succeeded, manual"
                in tasks_title(app))  # fmt: skip
    assert " · took " in tasks_title(app)
    await pilot.press("left")
    assert grid.slot == 1 and grid.current_run().id == older.id
    await until(pilot, lambda: f"alpha · run {older.id} ·" in tasks_title(app))
    await pilot.press("left")  # no older run: the cursor stays on the oldest
    assert grid.slot == 1
    await pilot.press("right")
    assert grid.slot == 0
    pick_row = app.board.task_rows.index_of(
        next(t.id for t in app.board.task_rows.by_id.values() if t.name == "beta")
    )
    grid.move_to(pick_row)
    await until(pilot, lambda: "beta · run " in tasks_title(app) and "failed (exit 3)"
                in tasks_title(app))  # fmt: skip
    await pilot.press("down")  # a task with no runs says so
    await until(pilot, lambda: "· no runs yet" in tasks_title(app))


async def test_enter_opens_the_run_under_the_cursor(dashboard) -> None:
    app, pilot = await dashboard()
    await settled_runs(app, pilot, "beta", 2)
    pick(app, "beta")
    await pilot.press("v")
    grid = app.board.grid
    await until(pilot, lambda: grid.current_runs() is not None and len(grid.current_runs()) == 2)
    await pilot.press("left")
    wanted = grid.current_run()
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    assert app.screen.occ.id == wanted.id
    await until(pilot, lambda: "broken" in screen_text(app))  # its output
    await pilot.press("escape")
    await until(pilot, lambda: not isinstance(app.screen, RunScreen) and app.focused is grid)


async def test_a_new_run_reaches_the_grid_live(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    await pilot.press("v")
    grid = app.board.grid
    sleepy = grid.selected_key
    await until(pilot, lambda: grid.runs.get(sleepy) == [])
    await pilot.press("r")  # sleeps 30 s: running while the test looks
    await until(pilot, lambda: row_of(app, "sleepy").endswith(GLYPH["running"]))
    await until(pilot, lambda: "· running, manual · for " in tasks_title(app))
    await pilot.press("c")  # c in the grid: the running run under the cursor
    await pilot.press("y")
    await until(pilot, lambda: row_of(app, "sleepy").endswith(GLYPH["cancelled"]))


async def test_the_grid_paints_only_the_rows_on_screen(dashboard) -> None:
    """200 tasks, a pane of about 20 rows: only those rows' runs are asked for."""
    from helpers import T0
    from tickui.model.spec import build_spec

    async def many(store, clock) -> None:
        for i in range(200):
            spec = build_spec({"name": f"t{i:03d}", "every": "1h", "command": ["true"]}, T0)
            await store.add_task(spec, T0)

    app, pilot = await dashboard(seed=many, size=(100, 30))
    asked: list[list[int]] = []
    grid = app.board.grid
    original = app.host.store.recent_runs

    async def counting(ids, per_task):
        asked.append(list(ids))
        return await original(ids, per_task)

    app.host.store.recent_runs = counting  # type: ignore[method-assign]
    await pilot.press("v")
    await until(pilot, lambda: len(grid.runs) > 0)
    assert len(asked) == 1 and 5 <= len(asked[0]) <= 30, asked  # the rows on screen
    assert set(grid.runs) == set(asked[0])
    await pilot.press("end")  # the last rows: theirs are read, in one query
    await until(pilot, lambda: len(asked) == 2)
    assert not set(asked[1]) & set(asked[0]) and len(asked[1]) == len(asked[0])
    assert app.board.task_rows.key_at(199) in asked[1]
    assert len(grid.runs) == 2 * len(asked[0]) < 200
    assert isinstance(grid, TaskGrid)


async def test_runs_reach_the_grid_while_the_occurrences_pane_filters_them_out(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "alpha")
    await pilot.press("v")
    grid = app.board.grid
    alpha = grid.selected_key
    await until(pilot, lambda: grid.runs.get(alpha) == [])
    await pilot.press("F")  # Occurrences: failed runs only
    await until(pilot, lambda: app.board.occ_rows.state == "failed")
    await pilot.press("r")
    await until(pilot, lambda: row_of(app, "alpha").endswith(GLYPH["succeeded"]))
    assert [o.state for o in grid.runs[alpha]] == ["succeeded"]
    assert not app.board.occ_rows.by_id  # the pane shows none of them


def test_every_task_view_answers_what_the_dashboard_asks_of_a_task_view() -> None:
    """The Tasks pane's views stand in for each other: each has every method the dashboard
    and the live refresh call on whichever is shown (a missing one fails a refresh)."""
    from tickui.ui.widgets.table import RowTable
    from tickui.ui.widgets.timeline import DayTimeline

    asked = ("sync_size", "refresh_row", "refresh_changed", "select_key", "show_top",
             "hold_briefly", "say_when_empty", "selected_key", "focus")  # fmt: skip
    for view in (RowTable, TaskGrid, DayTimeline):
        missing = [name for name in asked if not hasattr(view, name)]
        assert not missing, f"{view.__name__} lacks {missing}"
