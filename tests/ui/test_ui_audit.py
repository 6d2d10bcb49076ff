"""The operator audit from the dashboard: its changes are recorded with origin dashboard
(who: the OS user and TICKUI_HOST), `tickui audit` lists them, and a task's detail shows its
recent actions."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

from helpers import T0, cli
from tickui.ui.screens.detail import DetailScreen
from ui_support import pick, screen_text, until


async def test_dashboard_changes_are_audited_as_the_dashboards(
    tmp_db: Path, dashboard, monkeypatch
) -> None:
    monkeypatch.setenv("TICKUI_HOST", "board-host")
    app, pilot = await dashboard()
    store = app.host.store
    pick(app, "alpha")
    await pilot.press("e")  # disable
    assert not (await store.get_task("alpha")).enabled
    await pilot.press("e")  # enable
    assert (await store.get_task("alpha")).enabled
    await pilot.press("r")  # run now: this dashboard's engine holds the lease
    (occ,) = await store.history("alpha")
    entries = await store.audit_entries("alpha")
    assert [(e.action, e.origin, e.user, e.host) for e in reversed(entries)] == [
        ("disable", "dashboard", getpass.getuser(), "board-host"),
        ("enable", "dashboard", getpass.getuser(), "board-host"),
        ("run-now", "dashboard", getpass.getuser(), "board-host"),
    ]
    assert entries[0].occurrence_id == occ.id
    # the dashboard's clock (a manual one here), not the machine's
    assert all(T0 <= e.at <= app.host.clock.now() for e in entries)

    await pilot.press("enter")  # the task's detail shows who did what
    await until(pilot, lambda: isinstance(app.screen, DetailScreen))
    await until(pilot, lambda: "Recent actions" in screen_text(app))
    text = screen_text(app)
    assert f"{getpass.getuser()}@board-host (dashboard)  run-now" in text
    assert f"{getpass.getuser()}@board-host (dashboard)  disable" in text

    listed = cli("audit", "--json", db=tmp_db)
    assert listed.returncode == 0, listed.stderr
    assert [(e["action"], e["origin"]) for e in json.loads(listed.stdout)] == [
        ("run-now", "dashboard"), ("enable", "dashboard"), ("disable", "dashboard"),
    ]  # fmt: skip
