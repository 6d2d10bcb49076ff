"""Pilot tests for the screens: the dialogs, the add/edit form, the task detail, and the
store's edit_task they save through (real SQLite file, manual clock)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.app import App
from textual.screen import Screen

from tickui.ui.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from ui_support import screen_text, until

_UNSET = object()


class Host(App[None]):
    """A bare app that shows one screen and keeps what it was dismissed with."""

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


async def test_confirm_enter_answers_no_and_focus_starts_on_no() -> None:
    app = Host(ConfirmScreen("Cancel run 7 (backup, started 08:00:01)?"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("tab")  # the destructive button never takes the focus
        assert app.focused is not None and app.focused.id == "no"
        await pilot.press("enter")
        await until(pilot, lambda: app.answer is not _UNSET)
        assert app.answer is False


async def test_confirm_y_answers_yes_and_the_footer_shows_the_dialog_keys() -> None:
    app = Host(ConfirmScreen("Delete task beta?", yes_label="Delete (y)", no_label="Keep (n)"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "Delete (y)" in text and "Keep (n)" in text
        footer = footer_line(app)
        assert "Yes" in footer and "No" in footer and "^q" not in footer
        await pilot.press("y")
        await until(pilot, lambda: app.answer is not _UNSET)
        assert app.answer is True


@pytest.mark.parametrize("key", ["escape", "n"])
async def test_confirm_escape_and_n_answer_no(key: str) -> None:
    app = Host(ConfirmScreen("Delete task beta?"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press(key)
        await until(pilot, lambda: app.answer is not _UNSET)
        assert app.answer is False


async def test_quit_dialog_enter_never_cancels_runs() -> None:
    app = Host(QuitScreen(2))
    async with app.run_test(size=(80, 24)) as pilot:
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
    async with app.run_test(size=(80, 24)) as pilot:
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


async def test_help_renders_groups_and_scrolls_to_the_last_at_80x24() -> None:
    app = Host(HelpScreen(HELP_GROUPS))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
        assert "Runs" in text and "Run the selected task now" in text
        assert "Quit (asks when runs are active)" not in text  # below the fold
        assert "Close" in footer_line(app)
        await pilot.press("end")
        await pilot.pause()
        assert "Quit (asks when runs are active)" in screen_text(app)
        await pilot.press("question_mark")
        await until(pilot, lambda: app.answer is not _UNSET)


async def test_help_group_titles_are_bold() -> None:
    from tickui.ui.dialogs import help_text

    table = help_text(HELP_GROUPS[:2])
    first = table.columns[0]
    titles = [cell for cell in first._cells if getattr(cell, "plain", None) in ("Runs", "Tasks")]
    assert len(titles) == 2 and all(str(t.style) == "bold" for t in titles)
