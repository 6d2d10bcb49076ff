"""What a new user meets first: keys that mean what they say everywhere, empty and stale
states that say the way out, times that name their zone, rows that stay put."""

from __future__ import annotations

from tickui.ui.screens.dialogs import QuitScreen
from tickui.ui.screens.form import AddTaskScreen
from ui_support import pick, until


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
