"""One source of keys: the help screens, the README table and each screen's bindings agree."""

from __future__ import annotations

import re
from pathlib import Path

from tickui.ui.keys import DETAIL_KEYS, KEY_GROUPS, RUN_VIEW_KEYS, keys_markdown
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.dialogs import HelpScreen
from tickui.ui.screens.run import RunScreen
from tickui.ui.widgets.log_view import LogView
from ui_support import screen_text, until

README = Path(__file__).resolve().parents[2] / "README.md"
SHOWN = {
    "escape": "esc",
    "backspace": "esc",  # an alias of esc
    "up": "↑",
    "down": "↓",
    "pageup": "pgup",
    "pagedown": "pgdn",
    "slash": "/",
    "left": "←",
    "right": "→",
}


def test_readme_keys_table_is_the_help_screens_source() -> None:
    text = README.read_text()
    block = re.search(r"<!-- keys:start[^\n]*-->\n(.*?)<!-- keys:end -->", text, re.S)
    assert block is not None, "README lost its keys table markers"
    assert block.group(1) == keys_markdown(), "README's keys table is stale: paste keys_markdown()"


def _listed(keys: list[tuple[str, str]]) -> set[str]:
    return {word for shown, _ in keys for word in shown.replace("/", " / ").split()}


def _bound(bindings) -> set[str]:
    names = set()
    for binding in bindings:
        for key in binding.key.split(","):
            names.add(SHOWN.get(key, key))
    return names


def test_every_binding_of_the_detail_and_run_views_is_in_their_help() -> None:
    assert _bound(DetailScreen.BINDINGS) <= _listed(DETAIL_KEYS)
    assert _bound(RunScreen.BINDINGS) | _bound(LogView.BINDINGS) <= _listed(RUN_VIEW_KEYS)
    dashboard = {k.key for _, keys in KEY_GROUPS for k in keys}
    assert {"question_mark", "q", "E", "S", "F", "T", "z", "H"} <= dashboard


async def test_help_lists_the_keys_of_the_screen_it_is_opened_on(dashboard) -> None:
    app, pilot = await dashboard(size=(120, 40), started=False)
    await until(pilot, lambda: app.ready.is_set())
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    shown = screen_text(app)
    assert "Runs" in shown and "Engine" in shown and "Run output view" not in shown
    await pilot.press("escape")
    occ = await app.host.engine.run_now("alpha")
    await until(pilot, lambda: occ.id in app.board.occ_rows.by_id)
    app.board.occ_table.focus()
    app.board.occ_table.select_key(occ.id)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen))
    shown = screen_text(app)
    assert "Run output view" in shown and "Open the log in $PAGER" in shown
    assert "Engine" not in shown


async def test_the_detail_footer_shows_its_own_keys_and_keeps_help_and_quit(dashboard) -> None:
    app, pilot = await dashboard(size=(120, 40), started=False)
    await until(pilot, lambda: app.ready.is_set())
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, DetailScreen))
    await pilot.pause(0.1)
    footer = screen_text(app).rstrip("\n").splitlines()[-1]
    for key in ("Back", "Run now", "Cancel run", "Enable/disable", "Edit", "Help", "Quit"):
        assert key in footer, footer
    for other in ("Add", "Delete", "Filter", "Start/stop engine"):  # the dashboard's
        assert other not in footer, footer
