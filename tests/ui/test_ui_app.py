"""Pilot tests for the dashboard's hub: settings, selection by id, edit, sort and
filters, time zones, layout, live panes under dialogs, keys, toasts, quitting. Real SQLite,
a manual clock, real processes."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from textual.widgets import Sparkline

from helpers import T0, cli
from tickui.common.clock import ManualClock
from tickui.model.spec import build_spec
from tickui.runtime.settings import load as config_load
from tickui.store import Store
from tickui.ui import settings as saved
from tickui.ui.app import TickuiApp
from tickui.ui.keys import KEY_GROUPS
from tickui.ui.screens.dashboard import Dashboard
from tickui.ui.screens.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.widgets.panes import BreakerPane, KeyFooter, StatusLine
from ui_support import make_app, notes, pick, screen_text, seed_basic, stored_state, until

SIZE = (140, 40)


def header(app) -> str:
    return str(app.dashboard.query_one(StatusLine)._shown)


def footer(app) -> str:
    return screen_text(app).splitlines()[-1]


# ---- settings ----------------------------------------------------------------------------


def test_settings_are_saved_privately_under_xdg_config_home_and_read_back(
    private_config_home: Path,
) -> None:
    path = saved.settings_path()
    assert path.is_relative_to(private_config_home)
    choice = saved.DashboardSettings(zone="utc", sort_column="NAME", side_hidden=True)
    saved.save(choice)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert saved.load() == (choice, None)
    assert [p.name for p in path.parent.iterdir()] == ["settings.json"]  # no temp file left


def test_a_corrupt_or_odd_settings_file_gives_defaults_and_one_message() -> None:
    path = saved.settings_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    settings, problem = saved.load()
    assert settings == saved.DashboardSettings() and "corrupt" in problem
    path.write_text(json.dumps({"zone": "mars", "side_hidden": True, "other": 1}))
    settings, problem = saved.load()
    assert settings.side_hidden and settings.zone == "local" and "zone" in problem


async def test_a_corrupt_settings_file_is_one_toast_not_a_traceback(dashboard) -> None:
    path = saved.settings_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff\xfe garbage")
    app, _ = await dashboard(notifications=True)
    assert [n for n in notes(app) if "settings" in n] == [
        f"settings file {path} is corrupt; using defaults"
    ]
    assert "alpha" in screen_text(app)


async def test_the_seconds_paint_survives_a_dashboard_without_its_panes(dashboard) -> None:
    """Mounted but not yet composed (start-up under load) or taken down (exit): the
    per-second repaint skips what is not there instead of ending the app with NoMatches
    (seen in CI: '#tasks-pane' not found in the first second)."""
    app, pilot = await dashboard()
    await app.dashboard.query_one("#tasks-pane").remove()
    app.live.each_second()
    app.live.show_ticker()
    await pilot.pause()
    assert app.is_running and app.return_code is None


async def test_the_theme_is_remembered(dashboard) -> None:
    app, pilot = await dashboard()
    app.theme = "textual-light"
    await until(pilot, lambda: saved.load()[0].theme == "textual-light")
    await dashboard.stop(app)
    again, pilot = await dashboard()
    assert again.theme == "textual-light"


async def test_saved_view_choices_come_back_at_start(dashboard) -> None:
    saved.save(
        saved.DashboardSettings(
            zone="utc", sort_column="NAME", sort_descending=True, occ_state="failed"
        )
    )
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock)
    assert "08:00:00 UTC" in header(app)
    assert app.dashboard.query_one("#tasks-pane").border_title == "Tasks · by NAME ▼"
    assert app.board.task_rows.at(0).name == "sleepy"
    assert "failed" in app.dashboard.query_one("#occ-pane").border_title
    clock.advance(3630)
    await app.host.engine.tick(clock.now())
    await until(pilot, lambda: any(not o.active for o in app.board.occ_rows.by_id.values()))
    await pilot.pause(0.3)
    assert {o.task for o in app.board.occ_rows.by_id.values()} == {"beta"}


async def test_settings_that_cannot_be_saved_are_said_once(
    dashboard, private_config_home: Path
) -> None:
    (private_config_home / "tickui").write_text("a file where the folder should be")
    app, pilot = await dashboard(notifications=True)
    await pilot.press("z", "z", "H")
    await until(pilot, lambda: any("settings not saved" in n for n in notes(app)))
    await pilot.pause(0.2)
    assert sum("settings not saved" in n for n in notes(app)) == 1
    assert app.board.view.mode == "task" and app.board.prefs.side_hidden  # kept while the app runs


async def test_an_app_can_keep_its_settings_in_a_file_of_its_own(tmp_db: Path, dashboard) -> None:
    own = tmp_db.with_name("scene-settings.json")
    saved.save(saved.DashboardSettings(zone="utc"), own)
    app = TickuiApp(make_app(tmp_db, ManualClock(T0)).factory, settings_file=own)
    _, pilot = await dashboard(app=app)
    assert "08:00:00 UTC" in header(app)
    await pilot.press("H")
    await until(pilot, lambda: saved.load(own)[0].side_hidden)
    await dashboard.stop(app)
    assert not saved.settings_path().exists()  # the user's file untouched


def test_ui_bell_must_be_true_or_false(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no tickui.toml here
    config = tmp_path / "ui.toml"
    config.write_text('[ui]\nbell = "yes"\n')
    result = cli("--config", str(config), "task", "list", db=tmp_path / "x.db")
    assert result.returncode == 2
    assert "line 2" in result.stderr and "ui.bell" in result.stderr
    assert config_load(None, T0).ui.bell is False  # no file: quiet
    config.write_text("[ui]\nbell = true\n")
    assert config_load(config, T0).ui.bell is True


# ---- selection by id ---------------------------------------------------------------------


async def test_c_cancels_the_picked_run_after_50_newer_ones_arrived(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    pick(app, "sleepy")
    await pilot.press("r")
    [picked] = await app.host.store.history("sleepy")
    await until(pilot, lambda: picked.id in app.board.occ_rows.by_id)
    await pilot.press("tab")
    app.board.occ_table.move_to(app.board.occ_rows.index_of(picked.id))
    spec = build_spec(
        {"name": "burst", "every": "1h", "concurrency": "allow", "command": ["true"]}, T0
    )
    await app.host.store.add_task(spec, T0)
    for _ in range(50):
        await app.host.engine.run_now("burst")
    await until(pilot, lambda: len(app.board.occ_rows) == 51)
    assert app.board.occ_rows.index_of(picked.id) == 50  # moved 50 rows down
    await pilot.press("c")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    assert f"Cancel run {picked.id} (sleepy, started " in screen_text(app)
    await pilot.press("y")
    await until(pilot, lambda: app.board.occ_rows.by_id[picked.id].state == "cancelled")
    cancelled = [o for o in await app.host.store.newest_occurrences(100) if o.state == "cancelled"]
    assert [o.id for o in cancelled] == [picked.id]


async def test_c_then_enter_or_n_keeps_the_run(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    await pilot.press("r")
    [occ] = await app.host.store.history("sleepy")
    await until(pilot, lambda: occ.id in app.board.occ_rows.by_id)
    for answer in ("enter", "n"):
        await pilot.press("c")  # from the Tasks pane: the task's running occurrence
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press(answer)
        await until(pilot, lambda: isinstance(app.screen, Dashboard))
    assert (await app.host.store.get_occurrence(occ.id)).active


async def test_d_then_enter_keeps_the_task(dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "beta")
    await pilot.press("d")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, Dashboard))
    assert await app.host.store.find_task("beta") is not None


# ---- edit --------------------------------------------------------------------------------


async def test_E_edits_the_selected_task_and_a_taken_name_changes_nothing(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    pick(app, "alpha")
    before = await app.host.store.get_task("alpha")
    await pilot.press("E")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    app.screen.query_one("#expr").value = "5m"
    await until(pilot, lambda: app.screen.spec is not None)
    await pilot.press("ctrl+s")
    await until(pilot, lambda: isinstance(app.screen, Dashboard))
    after = await app.host.store.get_task("alpha")
    assert after.spec.expr == str(300 * 1_000_000) and after.generation > before.generation
    pick(app, "alpha")
    await pilot.press("E")
    await until(pilot, lambda: isinstance(app.screen, AddTaskScreen))
    form = app.screen
    form.query_one("#name").value = "beta"
    form.query_one("#expr").value = "2h"
    # said under Name while typing; the form stays open with what was typed
    await until(pilot, lambda: "'beta' exists already" in screen_text(app))
    assert form.spec is None and form.query_one("#add").disabled
    await pilot.press("ctrl+s")
    await pilot.pause(0.1)
    assert app.screen is form and form.query_one("#expr").value == "2h"
    form.query_one("#name").value = "alpha"  # its own name is not a clash
    await until(pilot, lambda: form.spec is not None)
    await pilot.press("escape")
    assert not any(n.startswith("saved beta") for n in notes(app))
    assert (await app.host.store.get_task("alpha")).spec == after.spec
    assert (await app.host.store.get_task("beta")).spec.command[-1].endswith("exit 3")


# ---- sort and filters --------------------------------------------------------------------


async def test_S_cycles_the_sort_shows_it_in_the_title_and_remembers_it(dashboard) -> None:
    app, pilot = await dashboard()
    pane = app.dashboard.query_one("#tasks-pane")
    assert pane.border_title == "Tasks · by NEXT ▲"
    pick(app, "beta")
    await pilot.press("S")
    title, descending = app.board.task_rows.sort
    assert title not in ("NEXT", "LEFT") and not descending  # LEFT would order as NEXT
    assert pane.border_title == f"Tasks · by {title} ▲"
    assert app.board.task_rows.at(app.board.tasks_table.cursor).name == "beta"  # still on beta
    assert saved.load()[0].sort_column == title


async def test_a_header_click_sorts_by_that_column_and_again_reverses(dashboard) -> None:
    app, pilot = await dashboard()
    table = app.board.tasks_table
    for expected in (False, True):
        table.post_message(table.HeaderClicked(table, "NAME"))
        await until(pilot, lambda e=expected: app.board.task_rows.sort == ("NAME", e))
    names = [app.board.task_rows.at(i).name for i in range(len(app.board.task_rows))]
    assert names == sorted(names, reverse=True)
    assert app.dashboard.query_one("#tasks-pane").border_title == "Tasks · by NAME ▼"
    assert saved.load()[0].sort_descending


async def test_occurrence_filters_by_name_state_and_task_show_in_the_title(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock)
    clock.advance(3630)
    await app.host.engine.tick(clock.now())
    await until(pilot, lambda: {o.state for o in app.board.occ_rows.by_id.values()} >= {
        "succeeded", "failed", "running"})  # fmt: skip
    pane = app.dashboard.query_one("#occ-pane")
    await pilot.press("tab", "slash", *"bet", "enter")
    await until(pilot, lambda: {o.task for o in app.board.occ_rows.by_id.values()} == {"beta"})
    await until(pilot, lambda: "task ~ 'bet'" in pane.border_title, timeout=5)
    await pilot.press("slash", "escape")
    await until(pilot, lambda: len(app.board.occ_rows) == 3)
    await pilot.press("F")  # failed
    await until(pilot, lambda: [o.task for o in app.board.occ_rows.by_id.values()] == ["beta"])
    assert "failed" in pane.border_title and saved.load()[0].occ_state == "failed"
    await pilot.press("F")  # running
    await until(pilot, lambda: [o.task for o in app.board.occ_rows.by_id.values()] == ["sleepy"])
    await pilot.press("F", "F")  # not skipped, all
    await until(pilot, lambda: len(app.board.occ_rows) == 3)
    alpha = next(o.id for o in app.board.occ_rows.by_id.values() if o.task == "alpha")
    app.board.occ_table.move_to(app.board.occ_rows.index_of(alpha))
    await pilot.press("T")
    await until(pilot, lambda: [o.task for o in app.board.occ_rows.by_id.values()] == ["alpha"])
    assert "alpha" in pane.border_title
    await pilot.press("T")
    await until(pilot, lambda: len(app.board.occ_rows) == 3)
    assert pane.border_title == "Occurrences (newest first)"


async def test_a_run_the_state_filter_stops_showing_leaves_the_table_at_once(dashboard) -> None:
    """Filtered to running, the sleepy run is shown; when it is cancelled it leaves the
    rows and the table's height in the same refresh, not a second later."""
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock)
    await pilot.press("tab", "F", "F")  # failed, then running
    assert app.board.occ_rows.state == "running"
    occ = await app.host.engine.run_now("sleepy")
    # the height follows within the refresh that brought the row (its last step), well
    # before the next once-a-second repaint
    await until(pilot, lambda: occ.id in app.board.occ_rows.by_id)
    await until(pilot, lambda: app.board.occ_table.virtual_size.height == 2, timeout=0.5)
    await app.host.engine.cancel(occ.id)
    await until(pilot, lambda: not app.board.occ_rows.by_id)
    await until(pilot, lambda: app.board.occ_table.virtual_size.height == 1, timeout=0.5)


# ---- time zones --------------------------------------------------------------------------


async def test_z_cycles_the_zone_in_the_header_and_the_tables_and_remembers_it(dashboard) -> None:
    async def seed(store, clock):
        await seed_basic(store, clock)
        fields = {"name": "tokyo", "every": "1h", "tz": "Asia/Tokyo", "command": ["true"]}
        spec = build_spec({**fields, "anchor": "2027-01-15T08:00:30Z"}, clock.now())
        await store.add_task(spec, clock.now())

    app, pilot = await dashboard(ManualClock(T0), seed)

    def tokyo_row() -> str:
        return next(line for line in screen_text(app).splitlines() if "tokyo" in line)

    assert "08:00:00 local (UTC)" in header(app)
    assert app.board.tasks_table.source.view.mode == "local"
    assert "08:00:30" in tokyo_row()
    await pilot.press("z")
    await until(pilot, lambda: "08:00:00 UTC" in header(app))
    assert app.board.tasks_table.source.view.mode == app.board.occ_table.source.view.mode == "utc"
    await pilot.press("z")
    await until(pilot, lambda: "task zones" in header(app))
    await until(pilot, lambda: "17:00:30" in tokyo_row())  # the task's own zone
    assert saved.load()[0].zone == "task"
    await app.host.engine.run_now("tokyo")  # its run's times too, in the task's zone

    def tokyo_run() -> str:
        lines = screen_text(app).split("Occurrences", 1)[1].splitlines()
        return next((line for line in lines if "tokyo" in line), "")

    await until(pilot, lambda: "17:00:00" in tokyo_run())
    await pilot.press("z")  # local (UTC here) again
    await until(pilot, lambda: "08:00:00" in tokyo_run())


# ---- layout ------------------------------------------------------------------------------


async def test_layout_follows_every_resize(dashboard) -> None:
    app, pilot = await dashboard(size=(200, 60))
    side = app.dashboard.query_one("#side")
    tables = app.dashboard.query_one("#tables")

    def wide() -> bool:
        return side.region.x >= tables.region.right and side.region.width == 40

    def narrow() -> bool:
        return side.region.y >= tables.region.bottom and side.region.width == 80

    assert wide()
    await pilot.resize_terminal(80, 24)
    await until(pilot, narrow)
    await pilot.resize_terminal(200, 60)
    await until(pilot, wide)
    await pilot.resize_terminal(80, 24)
    await until(pilot, narrow)


async def test_H_hides_the_side_panes_and_it_is_remembered(dashboard) -> None:
    app, pilot = await dashboard()
    assert "Circuit breaker" in screen_text(app)
    await pilot.press("H")
    await until(pilot, lambda: "Circuit breaker" not in screen_text(app))
    assert app.dashboard.query_one("#tables").region.width == SIZE[0]
    await dashboard.stop(app)
    again, pilot = await dashboard()
    assert "Circuit breaker" not in screen_text(again)
    await pilot.press("H")
    await until(pilot, lambda: "Circuit breaker" in screen_text(again))


# ---- live under dialogs ------------------------------------------------------------------


async def test_the_header_clock_and_ticks_stay_live_under_help(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock)
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    clock.advance(7)
    await until(pilot, lambda: "08:00:07" in header(app), timeout=5)
    # painted behind the dialog (the screen can trail the header's text a frame)
    await until(pilot, lambda: "08:00:07" in screen_text(app), timeout=5)
    await app.host.ticker.emit_tick_at(clock.now())
    facts = app.dashboard.query_one("#tick-facts")
    await until(pilot, lambda: ("emitted", "1 · failed 0 · missed 0") in [
        (label, str(value)) for label, value in facts.rows
    ], timeout=5)  # fmt: skip


# ---- keys --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (240, 40)])
async def test_the_footer_keeps_help_and_quit_at_any_width(
    dashboard, size: tuple[int, int]
) -> None:
    app, pilot = await dashboard(size=size)
    await until(pilot, lambda: "Run now" in footer(app))
    line = footer(app)
    assert "? Help" in line and "q Quit" in line, line
    assert line.index("Run now") < line.index("? Help")  # in binding order
    shown = [label for label, _ in _labels() if f" {label} " in line + " "]
    if size[0] == 80:  # the lowest ranks went first
        assert "Fail publishes" not in shown and "Run now" in shown, line
    if size[0] == 240:
        assert len(shown) == len(_labels()), line


async def test_clicking_a_key_in_the_footer_presses_it(dashboard) -> None:
    app, pilot = await dashboard()
    await until(pilot, lambda: "? Help" in footer(app))
    x = footer(app).index("? Help") + 2
    await pilot.click(KeyFooter, offset=(x, 0))
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))


def _labels() -> list[tuple[str, int]]:
    return [(k.label, k.rank) for _, keys in KEY_GROUPS for k in keys if k.show]


async def test_help_is_grouped_and_says_what_enter_opens(dashboard) -> None:
    app, pilot = await dashboard(size=(120, 50))
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    text = screen_text(app)
    for title in ("Runs", "Tasks", "View", "Engine", "App"):
        assert title in text
    assert "Open: a task's detail (Tasks pane) or a run's output (Occurrences pane)" in text


async def test_the_palette_lists_each_command_once(dashboard) -> None:
    app, _ = await dashboard()
    titles = [c.title for c in app.get_system_commands(app.screen)]
    assert len(titles) == len(set(titles))
    assert sum("quit" in t.lower() for t in titles) == 1
    assert any(t.startswith("Edit (E)") for t in titles)
    assert any(t.startswith("Zone (z)") for t in titles)


# ---- telling the user ----------------------------------------------------------------------


async def test_a_failed_run_raises_a_toast_and_the_bell_once_a_minute(
    dashboard, monkeypatch
) -> None:
    app, pilot = await dashboard(notifications=True)
    app.live.ring_bell = True
    rings: list[int] = []
    app.bell = lambda: rings.append(1)
    told = lambda: [n for n in notes(app) if "failed (" in n]  # noqa: E731

    async def run(name: str) -> None:
        """Run `name` now and wait until that run has ended on screen."""
        pick(app, name)
        await pilot.press("r")
        [newest, *_] = await app.host.store.history(name)

        def ended() -> bool:
            occ = app.board.occ_rows.by_id.get(newest.id)
            return occ is not None and not occ.active

        await until(pilot, ended)
        await pilot.pause(0.1)

    await run("alpha")
    await run("beta")
    assert told() == ["beta failed (3): exit 3: broken"] and rings == [1]
    await run("beta")  # failing again within the minute: counted, not told
    assert len(told()) == 1 and rings == [1]
    app.live.notices.quiet = 0.0  # the minute has passed
    await run("beta")
    assert told()[-1] == "beta failed (3): exit 3: broken (1 more failed since the last notice)"
    assert rings == [1, 1]


async def test_breaker_opening_is_told_and_f_off_says_when_it_closes(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    assert not app.host.demo
    await pilot.press("f")  # a real database: asks first
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("enter")  # No
    await until(pilot, lambda: isinstance(app.screen, Dashboard))
    assert not app.host.ticker.simulate_failures
    await pilot.press("f")
    await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    await pilot.press("y")
    await until(pilot, lambda: app.host.ticker.simulate_failures)
    for _ in range(5):
        await app.host.ticker.emit_tick_at(app.host.clock.now())
    assert app.host.ticker.breaker.state == "OPEN"
    await until(pilot, lambda: any("Breaker open" in n or "publishes stop" in n
                                   for n in notes(app)))  # fmt: skip
    await pilot.press("f")  # off: no question
    await until(pilot, lambda: not app.host.ticker.simulate_failures)
    pane = app.dashboard.query_one(BreakerPane)
    await until(pilot, lambda: "closes on its next probe" in pane.note)
    assert "closes on its next probe" in screen_text(app)


async def test_losing_the_lease_is_told(tmp_db: Path, dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, notifications=True)
    engine = app.host.engine
    await until(pilot, lambda: engine.status().lease_state == "held")
    app.live.show_status()
    clock.advance(120)  # the lease expired unrenewed: another engine takes it
    thief = await Store.open(tmp_db)
    try:
        taken = await thief.acquire_lease(
            "thief", clock.now(), 60_000_000, ("elsewhere", 1, None), lambda *_: False
        )
        assert taken.held
        await engine.tick(clock.now())
    finally:
        await thief.close()
    await until(pilot, lambda: any("lost the lease" in n for n in notes(app)))
    assert engine.status().lease_state == "standby"


# ---- quitting ------------------------------------------------------------------------------


async def test_quit_wait_counts_down_in_the_header_and_c_cancels_them(
    tmp_db: Path, dashboard
) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    await pilot.press("r")
    [occ] = await app.host.store.history("sleepy")
    await until(pilot, lambda: app.host.engine.dispatcher.active() == 1)
    await pilot.press("q")
    await until(pilot, lambda: isinstance(app.screen, QuitScreen))
    await pilot.press("w")
    await until(pilot, lambda: "waiting for 1 run (c cancels them)" in header(app))
    assert app.is_running
    await until(pilot, lambda: "Run now" not in footer(app))  # only what still means something
    assert "c Cancel run" in footer(app) and "q Quit" in footer(app)
    await pilot.press("q")  # q again says how it stands rather than nothing
    await until(pilot, lambda: any("already quitting" in n for n in notes(app)))
    assert app.is_running
    await pilot.press("c")
    await until(pilot, lambda: not app.is_running)
    await dashboard.stop(app)
    assert app.return_code == 0
    assert await stored_state(tmp_db, occ.id) == "cancelled"


async def test_hang_up_cancels_runs_records_them_and_exits_0(tmp_db: Path, dashboard) -> None:
    app, pilot = await dashboard()
    pick(app, "sleepy")
    await pilot.press("r")
    [occ] = await app.host.store.history("sleepy")
    await until(pilot, lambda: app.host.engine.dispatcher.active() == 1)
    pid_alive = _pids(app)
    await app.hang_up()
    await until(pilot, lambda: not app.is_running)
    await dashboard.stop(app)
    assert app.return_code == 0 and app.host.closed
    assert not any(_alive(pid) for pid in pid_alive)
    assert await stored_state(tmp_db, occ.id) == "cancelled"


def _pids(app) -> list[int]:
    runs = getattr(app.host.engine.dispatcher, "_runs", {})
    return [r.process.pid for r in runs.values() if getattr(r, "process", None)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("width", [60, 80, 200])
async def test_the_header_cuts_the_database_path_not_a_separator(
    tmp_db: Path, width, dashboard
) -> None:
    app, pilot = await dashboard(size=(width, 30))
    app.host.clock.advance(1)
    app.live.show_status()
    await pilot.pause()
    line = screen_text(app).splitlines()[0].rstrip()  # as drawn, cut to the width
    assert not line.endswith("│"), line
    if width >= 200:
        assert line.endswith(str(tmp_db)), line
    elif "│ …" in line:
        assert line.endswith(tmp_db.name[-4:]), line  # cut at its start, its end kept


async def test_the_occurrences_title_counts_newer_runs_scrolled_out_of_sight(dashboard) -> None:
    """The cursor keeps its run while newer ones arrive above; once they push the view
    down, the title says how many are above rather than leaving them unseen."""
    app, pilot = await dashboard(size=(100, 24))
    first = await app.host.engine.run_now("alpha")
    await until(pilot, lambda: first.id in app.board.occ_rows.by_id)
    app.board.occ_table.focus()
    app.board.occ_table.select_key(first.id)
    pane = app.dashboard.query_one("#occ-pane")
    last = first
    for _ in range(15):
        # settled in the store (forbid refuses a run-now while the last one is active)
        await until(pilot, lambda last=last: not app.board.occ_rows.by_id[last.id].active)
        last = await app.host.engine.run_now("alpha")
        await until(pilot, lambda occ=last: occ.id in app.board.occ_rows.by_id)
    assert app.board.occ_table.selected_key == first.id
    above = app.board.occ_table.scroll_offset.y
    assert above > 0
    await until(pilot, lambda: f"↑ {above} newer above" in pane.border_title)
    app.board.occ_table.move_to(0)  # back to the newest: nothing above any more
    await until(pilot, lambda: "newer above" not in pane.border_title)


def test_a_task_that_keeps_failing_is_told_once_a_minute_with_the_count_between(
    tmp_db: Path,
) -> None:
    """README: a task that keeps failing is told once a minute, with the count in between.
    The dashboard's own notices, on loop times a test gives: told at 0 s, quiet at 30 s
    and 59.9 s, told again at 60 s; another task's failure is told meanwhile."""
    from tickui.model.records import Occurrence

    app = make_app(tmp_db, ManualClock(T0))
    ids = iter(range(1, 100))

    def failure(task_id: int, name: str) -> Occurrence:
        fields = {"exit_code": 3, "error_code": "EXIT_NONZERO", "detail": "exit 3: broken"}
        return Occurrence(next(ids), task_id, name, "scheduled", T0, "failed", T0, **fields)

    def told(task_id: int, name: str, at: float) -> str | None:
        return app.live.notices.failed_run(None, failure(task_id, name), at)

    assert told(1, "beta", 1000.0) == "beta failed (3): exit 3: broken"
    assert told(1, "beta", 1030.0) is None
    assert told(2, "gamma", 1030.0) == "gamma failed (3): exit 3: broken"
    assert told(1, "beta", 1059.9) is None
    assert told(1, "beta", 1060.0) == (
        "beta failed (3): exit 3: broken (2 more failed since the last notice)"
    )
    assert told(1, "beta", 1119.9) is None
    assert told(1, "beta", 1120.0) == (
        "beta failed (3): exit 3: broken (1 more failed since the last notice)"
    )


async def test_side_panes_move_under_the_tables_below_140_columns_and_the_sparkline_below_30_rows(
    dashboard,
) -> None:
    """README: below 140 columns the Ticks and breaker panes move under the tables; below
    30 rows the sparkline goes. At 140 x 30 neither happens; one column or row less does."""
    app, pilot = await dashboard(size=(140, 30))
    side = app.dashboard.query_one("#side")
    tables = app.dashboard.query_one("#tables")
    spark = app.dashboard.query_one("#tick-spark", Sparkline)
    assert side.region.x >= tables.region.right and spark.region.height > 0
    await pilot.resize_terminal(139, 30)
    await until(pilot, lambda: side.region.y >= tables.region.bottom)
    assert spark.region.height > 0
    await pilot.resize_terminal(139, 29)
    await until(pilot, lambda: spark.region.height == 0)
    await pilot.resize_terminal(140, 29)
    await until(pilot, lambda: side.region.x >= tables.region.right)
