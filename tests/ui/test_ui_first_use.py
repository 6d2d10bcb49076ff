"""What a new user meets first: keys that mean what they say everywhere, empty and stale
states that say the way out, times that name their zone, rows that stay put."""

from __future__ import annotations

import pytest

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.model.records import Occurrence, Task, TaskStats
from tickui.model.spec import build_spec
from tickui.ui.screens.dialogs import ConfirmScreen, QuitScreen
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.view.cells import task_state
from ui_support import pick, screen_text, until

S = MICROS


def _task(enabled: bool = True, note: str | None = None, **stats) -> Task:
    spec = build_spec({"name": "t", "every": "1m", "retries": 3, "command": ["true"]}, T0)
    task = Task(1, "t", spec, "cli", enabled, note, 1, T0, T0, T0, T0 + 60 * S, T0 + 60 * S)
    task.stats = TaskStats(**stats)
    return task


def _occ(occ_id: int, state: str, started_at: int | None = None) -> Occurrence:
    return Occurrence(occ_id, 1, "t", "scheduled", T0, state, T0, started_at=started_at)


@pytest.mark.parametrize(
    ("task", "pending", "said"),
    [
        (_task(active=1), [_occ(7, "running", T0 - 41 * S)], "running 41s"),
        (_task(active=1), [], "running"),  # the Occurrences filter hides it: stats say so
        (_task(active=2), [_occ(7, "running", T0 - 65 * S), _occ(8, "running", T0)],
         "running 1m05s ×2"),
        (_task(active=1), [_occ(7, "claimed")], "starting"),
        (_task(retry_attempt=2, retry_at=T0 + 40 * S), [_occ(7, "queued")], "retry 2/4 in 40s"),
        (_task(), [_occ(7, "queued")], "queued"),
        (_task(), [], "on"),
        (_task(False, "on hold"), [], "off on hold"),
        (_task(False, "paused after 3 failed slots"), [], "PAUSED after 3 failed slots"),
        (_task(False, "on hold", active=1), [_occ(7, "running", T0 - 2 * S)], "running 2.0s, off"),
    ],
)  # fmt: skip
def test_a_task_row_says_what_the_task_does_now(task, pending, said: str) -> None:
    assert task_state(task, T0, pending)[0] == said


def _row(app, name: str) -> str:
    return next(line for line in screen_text(app).splitlines() if f"│{name} " in line)


async def test_a_running_task_says_running_in_its_row(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    assert "running" not in _row(app, "sleepy")
    await pilot.press("r")
    await until(pilot, lambda: "running" in _row(app, "sleepy"))
    assert "STATE" in screen_text(app)


async def test_ctrl_c_quits_as_q_does(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("ctrl+c")
    await until(pilot, lambda: not app.is_running)
    assert app.host.closed
    assert not any("ctrl+q" in str(n.message) for n in app._notifications)


async def test_ctrl_c_with_an_active_run_asks_as_q_does(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    await pilot.press("r")
    await until(pilot, lambda: app.host.engine.dispatcher.active() == 1)
    await pilot.press("ctrl+c")
    await until(pilot, lambda: isinstance(app.screen, QuitScreen))
    await pilot.press("escape")
    await pilot.pause()
    assert app.is_running and not app.host.closed


async def test_enter_saves_the_form_once_it_is_valid(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    form = app.screen
    await pilot.press(*"ping", "enter")  # not whole yet: enter moves on, saves nothing
    await pilot.pause()
    assert app.screen is form and form.focused is not form.query_one("#name")
    form.query_one("#expr").value = "10m"
    form.query_one("#command").value = "echo hi"
    form.query_one("#command").focus()
    await pilot.pause()
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, AddTaskScreen))
    task = await app.host.store.get_task("ping")
    assert task.spec.command == ["echo", "hi"]


async def test_the_palette_has_one_entry_for_the_keys(dashboard) -> None:
    app, _pilot = await dashboard()
    titles = [c.title for c in app.get_system_commands(app.screen)]
    assert "Keys" not in titles
    assert sum(t.startswith("Help") for t in titles) == 1, titles


async def test_at_120_columns_the_tables_keep_the_useful_columns(dashboard) -> None:
    app, pilot = await dashboard(size=(120, 40))
    await pilot.pause()
    shown = app.board.tasks_table.shown_titles()
    assert {"OK%", "MISS/SKIP", "STATE", "RESULT"} <= set(shown), shown
    side, tables = app.dashboard.query_one("#side"), app.dashboard.query_one("#tables")
    assert side.region.y >= tables.region.bottom and tables.region.width == 120


async def test_S_steps_only_through_the_columns_on_screen(dashboard) -> None:
    app, pilot = await dashboard(size=(80, 24))
    await pilot.pause()
    shown = app.board.tasks_table.shown_titles()
    seen = set()
    for _ in range(8):
        await pilot.press("S")
        seen.add(app.board.task_rows.sort[0])
    assert seen <= set(shown) and len(seen) > 1, (seen, shown)


async def _every(store, clock) -> None:
    for name, every in (("a", "10s"), ("b", "20s"), ("c", "30s"), ("d", "40s")):
        spec = build_spec({"name": name, "every": every, "anchor": "2027-01-15T08:00:00Z",
                           "command": ["true"]}, clock.now())  # fmt: skip
        await store.add_task(spec, clock.now())


def _order(app) -> list[str]:
    rows = app.board.task_rows
    return [rows.at(i).name for i in range(len(rows))]


async def _slot(app, pilot, clock: ManualClock, seconds: int) -> None:
    clock.advance(seconds)
    await app.host.engine.tick(clock.now())
    due = clock.now()
    await until(pilot, lambda: all(t.due_at > due for t in app.board.task_rows.by_id.values()))


async def test_rows_hold_their_order_under_a_moved_cursor_until_it_goes_home(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, _every)
    await _slot(app, pilot, clock, 0)  # the first slots are behind: every task has run
    start = _order(app)
    await pilot.press("down", "down")
    picked = app.board.task_rows.at(app.board.tasks_table.cursor).name
    for _ in range(3):  # each slot would reorder them
        await _slot(app, pilot, clock, 10)
    assert _order(app) == start
    assert app.board.task_rows.at(app.board.tasks_table.cursor).name == picked
    pane = app.dashboard.query_one("#tasks-pane")
    await until(pilot, lambda: "order held (home resumes)" in pane.border_title)
    await pilot.press("home")
    await until(pilot, lambda: _order(app) != start)
    nexts = [app.board.task_rows.at(i).due_at for i in range(4)]
    assert nexts == sorted(nexts)
    await until(pilot, lambda: "held" not in pane.border_title)


async def test_a_new_filter_starts_at_the_newest_runs(dashboard) -> None:
    app, pilot = await dashboard()
    rows, table = app.board.occ_rows, app.board.occ_table
    for n in range(30):
        await app.host.engine.run_now("alpha" if n % 2 else "beta")
        await until(pilot, lambda n=n: len(rows) == n + 1 and not rows.active_ids())
    table.focus()
    await pilot.press("end")  # the oldest run, far below the newest
    assert table.scroll_offset.y > 0
    pane = app.dashboard.query_one("#occ-pane")
    for key in ("T", "F"):  # only that task's runs; then only failed ones
        await pilot.press(key)
        await until(pilot, lambda: table.cursor == 0 and table.scroll_offset.y == 0)
        assert table.selected_key == rows.key_at(0) == max(rows.by_id)
        assert "newer above" not in pane.border_title


async def test_a_new_database_says_how_to_add_a_task(dashboard) -> None:
    app, pilot = await dashboard(seed=None)
    await until(pilot, lambda: "No tasks yet: press a to add one" in screen_text(app))
    assert "tickui task add" in screen_text(app)
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))


async def test_a_filter_that_matches_nothing_says_so_and_esc_clears_it(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("slash", *"formtask", "enter")
    pane = app.dashboard.query_one("#tasks-pane")
    await until(pilot, lambda: "0 of 4 match 'formtask' · esc clears" in pane.border_title)
    assert "No task matches 'formtask': esc clears the filter" in screen_text(app)
    await pilot.press("escape")
    await until(pilot, lambda: len(app.board.task_rows) == 4)
    assert "match" not in pane.border_title and "No task" not in screen_text(app)
    await pilot.press("tab", "F", "F")  # Occurrences: failed, then running: none
    rows = app.board.occ_rows
    await until(pilot, lambda: rows.state == "running")
    await until(pilot, lambda: "No run matches this filter: esc clears it" in screen_text(app))
    await pilot.press("escape")
    await until(pilot, lambda: rows.state == "all" and not rows.filter_label())
    assert app.board.prefs.occ_state == "all"


async def test_each_table_names_the_zone_of_its_times(dashboard) -> None:
    app, pilot = await dashboard()
    panes = [app.dashboard.query_one(f"#{name}") for name in ("tasks-pane", "occ-pane")]
    await until(pilot, lambda: all("times in local (" in p.border_subtitle for p in panes))
    await pilot.press("z")
    await until(pilot, lambda: all(p.border_subtitle.startswith("times in UTC") for p in panes))
    assert "times in UTC · z changes" in screen_text(app)


async def test_ctrl_c_in_a_half_typed_form_asks_before_quitting(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    await pilot.press(*"half")
    await pilot.press("ctrl+c")  # from inside the Name field, whose own ctrl+c copies
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert "discard" in screen_text(app)
    await pilot.press("n")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    assert app.screen.query_one("#name").value == "half" and app.is_running
    await pilot.press("ctrl+c")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    await until(pilot, lambda: not app.is_running)
    assert app.host.closed


async def test_ctrl_c_in_an_untouched_form_quits_at_once(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    await pilot.press("ctrl+c")
    await until(pilot, lambda: not app.is_running)


async def test_esc_on_a_half_typed_form_asks_before_discarding_it(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    await pilot.press(*"half", "escape")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("escape")  # no: back to the form, nothing lost
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    assert app.screen.query_one("#name").value == "half"
    await pilot.press("escape")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    await until(pilot, lambda: not isinstance(app.screen, AddTaskScreen | ConfirmScreen))
    assert app.is_running


async def test_ctrl_c_twice_over_a_half_typed_form_quits(dashboard) -> None:
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    await pilot.press(*"half", "ctrl+c")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("ctrl+c")  # as the yes, not a second question
    await until(pilot, lambda: not app.is_running)


async def test_enter_alone_walks_the_form_to_a_saved_task(dashboard) -> None:
    """Enter on a text field moves on; on a select it opens the list, and enter there
    picks and moves on (not back to the same select, round and round)."""
    app, pilot = await dashboard()
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    form = app.screen
    await pilot.press(*"ping", "enter")
    for _ in range(30):
        focused = form.focused
        if focused is not None and focused.id == "command":
            break
        if focused is not None and focused.id == "expr":
            await pilot.press(*"10s")
        await pilot.press("enter")
        await pilot.pause()
    assert form.focused is not None and form.focused.id == "command", form.focused
    await pilot.press(*"echo hi", "enter")
    await until(pilot, lambda: not isinstance(app.screen, AddTaskScreen))
    task = await app.host.store.get_task("ping")
    assert task.spec.command == ["echo", "hi"] and task.spec.misfire == "run_once"
