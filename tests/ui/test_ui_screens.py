"""Pilot tests for the screens: the dialogs, the add/edit form, the task detail, and the
store's edit_task they save through (real SQLite file, manual clock)."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.app import App
from textual.screen import Screen
from textual.widgets import Sparkline

import tickui.ui
from helpers import T0
from tickui.common.clock import ManualClock
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, iso
from tickui.model.spec import build_spec
from tickui.store import Store
from tickui.ui.screens.detail import DetailScreen, DetailSource, sparkline
from tickui.ui.screens.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.screens.form import CONCURRENCY_HELP, MISFIRE_HELP, AddTaskScreen
from tickui.ui.view.cells import TimeView
from tickui.ui.widgets.panes import TicksPane
from ui_support import make_app, screen_text, until

_UNSET = object()


class Host(App[None]):
    """A bare app with the dashboard's stylesheet that shows one screen and keeps what it
    was dismissed with."""

    CSS_PATH = str(Path(tickui.ui.__file__).with_name("tickui.tcss"))

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.first = screen
        self.answer: Any = _UNSET

    def on_mount(self) -> None:
        self.push_screen(self.first, self.keep)

    def keep(self, answer: Any) -> None:
        self.answer = answer


def footer_line(app: App) -> str:
    return screen_text(app).splitlines()[-1]


# ---- dialogs ---------------------------------------------------------------------------------


async def test_confirm_enter_answers_no_and_focus_starts_on_no(run_app) -> None:
    app = Host(ConfirmScreen("Cancel run 7 (backup, started 08:00:01)?"))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    assert app.focused is not None and app.focused.id == "no"
    await pilot.press("tab")  # the destructive button never takes the focus
    assert app.focused is not None and app.focused.id == "no"
    await pilot.press("enter")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer is False


@pytest.mark.parametrize("size", [(40, 16), (120, 30)])
async def test_a_long_question_wraps_whole_inside_the_dialog(
    size: tuple[int, int], run_app
) -> None:
    question = (
        "Fail every tick publish on purpose? This is not the demo's database: consumers"
        " of these ticks miss them until you press f again."
    )
    app = Host(ConfirmScreen(question))
    pilot = await run_app(app, size=size)
    await pilot.pause()
    shown = re.sub(r"[█│▊▎▌▐┃]", " ", screen_text(app))  # the dialog's borders out
    assert " ".join(shown.split()).count("until you press f again.") == 1, shown


async def test_confirm_y_answers_yes_and_the_footer_shows_the_dialog_keys(run_app) -> None:
    app = Host(ConfirmScreen("Delete task beta?", yes_label="Delete (y)", no_label="Keep (n)"))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    text = screen_text(app)
    assert "Delete (y)" in text and "Keep (n)" in text
    footer = footer_line(app)
    assert "Yes" in footer and "No" in footer and "^q" not in footer
    await pilot.press("y")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer is True


@pytest.mark.parametrize("key", ["escape", "n"])
async def test_confirm_escape_and_n_answer_no(key: str, run_app) -> None:
    app = Host(ConfirmScreen("Delete task beta?"))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    await pilot.press(key)
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer is False


async def test_quit_dialog_enter_never_cancels_runs(run_app) -> None:
    app = Host(QuitScreen(2))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    assert app.focused is not None and app.focused.id == "stay"
    footer = footer_line(app)
    assert "Wait for them" in footer and "Cancel them" in footer
    await pilot.press("tab", "tab", "tab")
    assert app.focused is not None and app.focused.id != "cancel"
    await pilot.press("escape")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer is None
    app = Host(QuitScreen(2))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    await pilot.press("c")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer == "cancel"


HELP_GROUPS = [
    ("Runs", [("r", "Run the selected task now"), ("c", "Cancel the selected run")]),
    ("Tasks", [("a", "Add a task"), ("E", "Edit the selected task"), ("d", "Delete it")]),
    ("Views", [(f"k{i}", f"view number {i}") for i in range(30)]),
    ("Leave", [("q", "Quit (asks when runs are active)")]),
]


async def test_help_renders_groups_and_scrolls_to_the_last_at_80x24(run_app) -> None:
    app = Host(HelpScreen(HELP_GROUPS))
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    text = screen_text(app)
    assert "Runs" in text and "Run the selected task now" in text
    assert "Quit (asks when runs are active)" not in text  # below the fold
    assert "Close" in footer_line(app)
    await pilot.press("end")
    await until(pilot, lambda: "Quit (asks when runs are active)" in screen_text(app))
    await pilot.press("question_mark")
    await until(pilot, lambda: app.answer is not _UNSET)


async def test_help_group_titles_are_bold() -> None:
    from tickui.ui.screens.dialogs import help_text

    table = help_text(HELP_GROUPS[:2])
    first = table.columns[0]
    titles = [cell for cell in first._cells if getattr(cell, "plain", None) in ("Runs", "Tasks")]
    assert len(titles) == 2 and all(str(t.style) == "bold" for t in titles)


# ---- Store.edit_task -------------------------------------------------------------------------


async def _store_with_two_tasks(db: Path) -> Store:
    store = await Store.open(db)
    for name in ("backup", "report"):
        spec = build_spec({"name": name, "every": "1h", "command": ["true"]}, T0)
        await store.add_task(spec, T0)
    return store


async def test_edit_task_bumps_generation_recomputes_next_and_leaves_runs_alone(
    tmp_db: Path,
) -> None:
    store = await _store_with_two_tasks(tmp_db)
    try:
        before = await store.get_task("backup")
        got = await store.acquire_lease("me", T0, 60 * MICROS, ("h", 1, None), lambda *_: False)
        assert got.held and got.lease is not None
        occ = await store.claim_manual(before, "me", got.lease.token, T0)
        now = T0 + 90 * MICROS
        spec = build_spec(
            {"name": "nightly", "cron": "0 9 * * 1", "tz": "Europe/Berlin", "command": ["x"]},
            now,
        )
        edited = await store.edit_task("backup", spec, now)
        assert edited.id == before.id and edited.name == "nightly"
        assert edited.generation == before.generation + 1
        assert edited.spec == spec
        # Monday 2027-01-18 09:00 in Berlin is 08:00 UTC; computed from `now`, not the anchor.
        assert edited.next_run_at == spec.schedule(0).next_after(now)
        assert iso(edited.next_run_at).startswith("2027-01-18T08:00:00")
        assert (await store.get_occurrence(occ.id)).state == "claimed"  # still active
        assert await store.find_task("backup") is None
    finally:
        await store.close()


async def test_edit_task_refuses_a_taken_name_and_a_bad_value_changing_nothing(
    tmp_db: Path,
) -> None:
    store = await _store_with_two_tasks(tmp_db)
    try:
        before = await store.get_task("backup")
        taken = build_spec({"name": "report", "every": "5m", "command": ["true"]}, T0)
        with pytest.raises(BadInput, match="exists already"):
            await store.edit_task("backup", taken, T0 + MICROS)
        bad = build_spec({"name": "backup", "every": "5m", "command": ["true"]}, T0)
        bad.misfire = "sometimes"
        with pytest.raises(BadInput, match="misfire"):
            await store.edit_task("backup", bad, T0 + MICROS)
        after = await store.get_task("backup")
        assert (after.spec, after.generation, after.next_run_at, after.updated_at) == (
            before.spec,
            before.generation,
            before.next_run_at,
            before.updated_at,
        )
        assert (await store.get_task("report")).spec.kind == "interval"
    finally:
        await store.close()


async def test_edit_keeps_a_config_task_working(tmp_db: Path) -> None:
    store = await Store.open(tmp_db)
    try:
        declared = build_spec({"name": "sync", "every": "1h", "command": ["true"]}, T0)
        await store.sync_tasks([declared], T0)
        spec = build_spec({"name": "sync", "every": "10m", "command": ["true"]}, T0)
        edited = await store.edit_task("sync", spec, T0 + MICROS)
        assert edited.source == "config" and edited.enabled
        assert edited.spec.expr == str(600 * MICROS)
        assert edited.next_run_at is not None and edited.next_run_at > T0 + MICROS
    finally:
        await store.close()


# ---- the add/edit form -----------------------------------------------------------------------


def form_host(task=None, size=(120, 50)) -> Host:
    return Host(AddTaskScreen(lambda: T0, task=task))


def shown(screen: Screen, widget_id: str) -> str:
    """The plain text a Static shows (wrapped lines joined back)."""
    return str(screen.query_one(f"#{widget_id}").render())


async def fill(pilot, form, **values: str) -> None:
    for key, value in values.items():
        form.query_one(f"#{key}").value = value
    await pilot.pause()


async def test_form_shows_no_error_before_typing_and_labels_every_field(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    text = screen_text(app)
    assert "✗" not in text and "To fill in: name, schedule, command" in text
    for label in ("Name", "Schedule", "Misfire", "Concurrency", "Time zone", "Command"):
        assert label in text, label
    assert shown(form, "misfire-help") == MISFIRE_HELP["run_once"]
    assert shown(form, "concurrency-help") == CONCURRENCY_HELP["forbid"]
    assert "Late (after downtime)" in text and "Still running at the next" in text
    assert form.query_one("#add").disabled
    await pilot.press(*"Bad Name")
    await until(pilot, lambda: "✗ name" in screen_text(app))
    await fill(pilot, form, concurrency="replace", misfire="skip")
    assert shown(form, "misfire-help") == MISFIRE_HELP["skip"]
    assert shown(form, "concurrency-help") == CONCURRENCY_HELP["replace"]


async def test_form_reads_cron_and_lists_5_dated_fire_times_in_the_task_zone(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    await fill(pilot, form, name="weekly", kind="cron", expr="0 9 * * 1")
    await fill(pilot, form, tz="Europe/Berlin", command="echo hi")
    text = screen_text(app)
    assert "At 09:00, only on Monday" in text
    assert "Europe/Berlin" in text
    mondays = ["2027-01-18", "2027-01-25", "2027-02-01", "2027-02-08", "2027-02-15"]
    for day in mondays:
        assert f"Mon {day} 09:00 CET" in text, day
    assert "2027-02-22" not in text
    assert not form.query_one("#add").disabled
    await pilot.press("ctrl+s")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer.kind == "cron" and app.answer.tz == "Europe/Berlin"


async def test_fire_times_also_in_the_dashboard_zone_when_it_differs(run_app) -> None:
    app = Host(AddTaskScreen(lambda: T0, zone_for_preview=UTC))
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    await fill(pilot, form, name="weekly", kind="cron", expr="0 9 * * 1", command="true")
    assert "also in" not in screen_text(app)  # the task's zone is UTC too: one column
    assert "Mon 2027-01-18 09:00 UTC" in screen_text(app)
    await fill(pilot, form, tz="Europe/Berlin")
    text = screen_text(app)
    assert "Next 5 fire times (Europe/Berlin) · also in UTC" in text
    assert "Mon 2027-01-18 09:00 CET  (Mon 2027-01-18 08:00 UTC)" in text


async def test_cron_typed_into_the_every_field_gets_a_hint(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    await fill(pilot, form, name="x", expr="*/5 * * * *", command="true")
    text = screen_text(app)
    assert "looks like cron: choose cron" in text
    assert form.query_one("#add").disabled
    await fill(pilot, form, expr="5m")
    assert "looks like cron" not in screen_text(app)


async def test_edit_prefills_from_the_task_and_round_trips_to_an_equal_spec(
    tmp_db: Path, run_app
) -> None:
    store = await Store.open(tmp_db)
    try:
        raw = {
            "name": "backup",
            "every": "90s",
            "tz": "Europe/Berlin",
            "timeout": "1500ms",
            "jitter": "7s",
            "misfire": "run_all",
            "concurrency": "replace",
            "command": ["sh", "-c", "echo 'a b' && exit 3"],
            "anchor": "2027-01-15T08:00:30Z",
        }
        task = await store.add_task(build_spec(raw, T0), T0)
    finally:
        await store.close()
    app = form_host(task)
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    text = screen_text(app)
    assert "Edit task backup" in text and "Save (ctrl+s)" in text
    assert form.query_one("#command").value == "sh -c 'echo '\"'\"'a b'\"'\"' && exit 3'"
    assert form.query_one("#misfire").value == "run_all"
    assert not form.query_one("#add").disabled
    await pilot.press("ctrl+s")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer == task.spec
    app = form_host(task)
    pilot = await run_app(app, size=(80, 24))  # valid from the start: it opens at
    await pilot.pause(0.1)  # the top, on the name, and does not jump to the buttons
    form = app.screen
    assert form.query_one("#add-box").scroll_y == 0
    assert "Edit task backup" in screen_text(app)


async def test_at_80x24_the_form_scrolls_to_its_verdict_and_buttons(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    form = app.screen
    box = form.query_one("#add-box")
    assert box.max_scroll_y > 0  # too tall for 24 lines: it scrolls
    assert box.scroll_y == 0
    await fill(pilot, form, name="x", expr="30s", command="true")
    add = form.query_one("#add")
    # Valid now: the form scrolled its verdict and buttons into view by itself.
    await until(pilot, lambda: box.region.contains_region(add.region))
    assert box.scroll_y > 0 and "✓" in screen_text(app)
    box.scroll_home(animate=False)
    await until(pilot, lambda: not box.region.contains_region(add.region))
    add.scroll_visible(animate=False)
    await until(pilot, lambda: box.region.contains_region(add.region))
    assert "Add (ctrl+s)" in screen_text(app)
    await pilot.click("#add")
    await until(pilot, lambda: app.answer is not _UNSET)
    assert app.answer is not None and app.answer.name == "x"


async def test_at_80x24_an_error_shows_under_its_field_without_scrolling_it_away(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(80, 24))
    await pilot.pause()
    form = app.screen
    box, tz = form.query_one("#add-box"), form.query_one("#tz")
    await fill(pilot, form, name="x", expr="30s", command="true")
    tz.focus()
    await until(pilot, lambda: box.region.contains_region(tz.region))
    await pilot.press(*"Mars/Base")
    await until(pilot, lambda: form.query_one("#tz-error").display)
    assert shown(form, "tz-error").startswith("✗ unknown time zone 'Mars/Base'")
    assert "✗ unknown time" in screen_text(app)
    assert box.region.contains_region(tz.region)  # still in view
    assert form.query_one("#add").disabled
    await pilot.press(*["backspace"] * 9, *"UTC")
    await until(pilot, lambda: not form.query_one("#tz-error").display)
    assert not form.query_one("#add").disabled


# ---- the task detail ---------------------------------------------------------------------------

LONG_ERROR = "exit 3: " + "permission denied on /var/backups/" * 9  # over 300 characters


def insert_runs(db: Path, task_id: int, runs: list[dict[str, Any]]) -> None:
    """Occurrences as the engine leaves them, written straight into the real file."""
    with sqlite3.connect(db) as conn:
        for index, run in enumerate(runs):
            slot = T0 - (len(runs) - index) * 3600 * MICROS
            row = {"task_id": task_id, "task": "backup", "kind": "scheduled"}
            row.update(scheduled_for=slot, claimed_at=slot, finished_at=slot, **run)
            if "took" in row:  # started 0.1 s late, ran `took` seconds
                took = row.pop("took")
                row.update(started_at=slot + MICROS // 10)
                row.update(finished_at=row["started_at"] + int(took * MICROS))
            names = ", ".join(row)
            conn.execute(
                f"INSERT INTO occurrences ({names}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )


def ran(state: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"state": state, "took": seconds, **extra}


DETAIL_RUNS = [
    ran("succeeded", 1, exit_code=0),
    ran("failed", 4, exit_code=3, detail=LONG_ERROR),
    {"state": "skipped", "detail": "concurrency_forbid"},
    {"state": "skipped", "detail": "concurrency_forbid"},
    {"state": "skipped", "detail": "misfire_skipped: 3 missed", "missed": 3, "covers": 3},
    ran("succeeded", 2, exit_code=0, missed=2, covers=3, detail="misfire_coalesced: 2 missed"),
    ran("cancelled", 8, exit_code=-15, detail="cancelled by user"),
    ran("failed", 2, exit_code=3, detail=LONG_ERROR),
]


async def detail_app(db: Path) -> tuple[Host, Store]:
    store = await Store.open(db)
    spec = build_spec(
        {"name": "backup", "cron": "0 9 * * 1", "tz": "Europe/Berlin", "command": ["true"]}, T0
    )
    task = await store.add_task(spec, T0)
    insert_runs(db, task.id, DETAIL_RUNS)
    task = await store.get_task("backup")

    async def cancel(occ) -> None:
        return None

    source = DetailSource(
        current_task=lambda t: t,
        history=lambda name, limit: store.history(name, limit=limit),
        now=lambda: T0 + 60 * MICROS,
        cancel=cancel,
        view=lambda: TimeView("task"),
        reasons=store.miss_reasons,
    )
    return Host(DetailScreen(task, source)), store


async def test_detail_sparkline_bars_take_the_outcome_colours(tmp_db: Path, run_app) -> None:
    app, store = await detail_app(tmp_db)
    try:
        pilot = await run_app(app, size=(120, 40))
        screen = app.screen
        await until(pilot, lambda: len(screen.runs) == len(DETAIL_RUNS))
        line = sparkline(screen.runs, T0)
        started = [r for r in DETAIL_RUNS if "took" in r]  # skips have no bar
        bars = line.plain.split()[0]
        assert len(bars) == len(started)
        styles = [str(line.get_style_at_offset(Console(), i)) for i in range(len(bars))]
        expected = {"succeeded": "green", "failed": "red", "cancelled": "magenta"}
        assert styles == [expected[r["state"]] for r in started]
        assert bars[-2] == "█" and bars[0] == "▁"  # 8 s is the longest, 1 s the shortest
        await until(pilot, lambda: bars in screen_text(app))
    finally:
        await run_app.stop(app)  # before its store closes
        await store.close()


async def test_detail_counts_missed_and_skipped_runs_with_their_reasons(
    tmp_db: Path, run_app
) -> None:
    app, store = await detail_app(tmp_db)
    try:
        assert await store.miss_reasons((await store.get_task("backup")).id) == {
            "concurrency_forbid": (2, 0),
            "misfire_skipped": (1, 3),
            "misfire_coalesced": (0, 2),
        }
        pilot = await run_app(app, size=(120, 40))
        await until(pilot, lambda: "misfire_coalesced 2" in screen_text(app))
        text = screen_text(app)
        assert "missed    5: misfire_skipped 3, misfire_coalesced 2" in text
        assert "skipped   3: concurrency_forbid 2, misfire_skipped 1" in text
    finally:
        await run_app.stop(app)  # before its store closes
        await store.close()


async def test_missed_slots_of_a_run_that_failed_keep_their_misfire_reason(tmp_db: Path) -> None:
    """A run that covered missed slots and then failed: its detail says how it failed, and
    the slots it covered are still counted under the misfire policy, not 'exit 3'."""
    _app, store = await detail_app(tmp_db)
    try:
        task_id = (await store.get_task("backup")).id
        with sqlite3.connect(tmp_db) as conn:
            conn.execute(
                "UPDATE occurrences SET state = 'failed', detail = 'exit 3: boom'"
                " WHERE task_id = ? AND detail LIKE 'misfire_coalesced%'",
                (task_id,),
            )
        reasons = await store.miss_reasons(task_id)
        assert reasons["misfire_coalesced"] == (0, 2)
        assert not [r for r in reasons if r.startswith("exit")], reasons
    finally:
        await store.close()


async def test_detail_times_in_the_view_zone_named_in_the_titles(tmp_db: Path, run_app) -> None:
    app, store = await detail_app(tmp_db)
    try:
        pilot = await run_app(app, size=(120, 40))
        await until(pilot, lambda: "Next 10 fire times (Europe/Berlin)" in screen_text(app))
        text = screen_text(app)
        assert "2027-01-18 09:00:00" in text  # Monday 09:00 in Berlin, not 08:00 UTC
        assert "2027-01-18 08:00:00" not in text
        assert "Recent runs, times Europe/Berlin" in text
        assert " 08:00:00   +0.10s " in text  # the newest run's 07:00 UTC slot
    finally:
        await run_app.stop(app)  # before its store closes
        await store.close()


async def test_detail_runs_table_keeps_id_state_and_code_beside_a_long_error(
    tmp_db: Path, run_app
) -> None:
    app, store = await detail_app(tmp_db)
    try:
        pilot = await run_app(app, size=(80, 24))
        screen = app.screen
        await until(pilot, lambda: len(screen.recent) == len(DETAIL_RUNS))
        newest = screen.recent[0]
        assert newest.state == "failed" and len(newest.detail) > 300
        rows = screen_text(app).splitlines()
        [header] = [r for r in rows if "STATE" in r and "CODE" in r]
        assert "ID" in header and "DETAIL" in header
        [row] = [r for r in rows if f" {newest.id} " in r and "failed" in r]
        assert " 3 " in row and "exit 3: p" in row and "…" in row
        cancelled = [r for r in rows if "CANCELLED" in r]
        assert cancelled  # outcome_code, not -15
    finally:
        await run_app.stop(app)  # before its store closes
        await store.close()


async def test_dialogs_over_the_dashboard_show_their_own_keys(tmp_db: Path, run_app) -> None:
    app = make_app(tmp_db, ManualClock(T0))
    pilot = await run_app(app, size=(120, 40))
    await app.ready.wait()
    await pilot.pause()
    for key, screen, words in (
        ("a", AddTaskScreen, ("Cancel", "Save")),
        ("question_mark", HelpScreen, ("Close",)),
    ):
        await pilot.press(key)
        await until(pilot, lambda screen=screen: isinstance(app.screen, screen))
        await until(pilot, lambda words=words: all(w in footer_line(app) for w in words))
        footer = footer_line(app)
        assert "Quit" not in footer and "Run now" not in footer, footer
        await pilot.press("escape")
        await until(pilot, lambda screen=screen: not isinstance(app.screen, screen))


async def test_a_bad_name_is_said_under_it_while_another_field_is_bad_too(run_app) -> None:
    app = form_host()
    pilot = await run_app(app, size=(120, 50))
    await pilot.pause()
    form = app.screen
    await fill(pilot, form, name="Bad Näme", expr="30s", command="sh -c 'unclosed")
    name_error = str(form.query_one("#name-error").render())
    command_error = str(form.query_one("#command-error").render())
    assert "not a valid task name" in name_error
    assert "No closing quotation" in command_error
    assert form.spec is None and form.query_one("#add").disabled
    await fill(pilot, form, name="good-name")
    assert not form.query_one("#name-error").display
    assert "No closing quotation" in str(form.query_one("#command-error").render())


async def test_the_ticks_sparkline_shows_publish_time_over_the_last_60_ticks(dashboard):
    """README: the Ticks pane has a sparkline of publish time over the last 60 ticks."""
    app, pilot = await dashboard(size=(140, 40))
    pane = app.dashboard.query_one(TicksPane)
    metrics = dataclasses.replace(
        app.host.ticker.metrics(), bus="memory",
        publish_recent_ms=tuple(float(n) for n in range(100)),
    )  # fmt: skip
    pane.metrics = metrics
    spark = pane.query_one("#tick-spark", Sparkline)
    label = pane.query_one("#tick-spark-label")
    await until(pilot, lambda: "publish ms, last 60" in str(label.render()))
    assert list(spark.data) == [float(n) for n in range(40, 100)]
