"""The run output view in a real terminal, as a user reads a run: tmux runs `tickui --db X`,
keys go in, the screen comes out. The view holds still while lines arrive until told to
follow, and search behaves as in less."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from helpers import cli, poll
from ui_support import wait_for

pytestmark = pytest.mark.slow

ROW = re.compile(r"^│\s*\d+\s+(row \d+)", re.M)  # a line of the output pane


def _open_run(tmux, db: Path, script: str, height: int = 30):
    """Add a task running `script`, start tickui, run the task and open its output view."""
    added = cli("task", "add", "ticker", "--cron", "0 0 1 1 *", "--", "sh", "-c", script, db=db)
    assert added.returncode == 0, added.stderr
    command = f"TERM=xterm-256color {sys.executable} -m tickui --db {db}; sleep 30"
    tmux("new-session", "-d", "-s", "ui", "-x", "120", "-y", str(height), command)
    tmux("set-option", "-t", "ui", "window-size", "manual")

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "ui")

    wait_for(screen, "engine running")
    _keys(tmux, "r")
    wait_for(screen, "ticker")
    _keys(tmux, "Tab", "Enter")
    wait_for(screen, "Run 1 of ticker")
    return screen


def _keys(tmux, *keys: str) -> None:
    for key in keys:
        tmux("send-keys", "-t", "ui", key)
        time.sleep(0.15)  # a person's pace


def _rows(shown: str) -> list[str]:
    return ROW.findall(shown)


def _total(shown: str) -> int:
    found = re.search(r"lines \d+-\d+ of ([\d,]+)", shown)
    assert found, shown
    return int(found.group(1).replace(",", ""))


def _holds(screen, seconds: float) -> list[str]:
    """The same lines stay in view (exactly: no tolerance) for `seconds` while new lines
    arrive (the count in the status grows); those lines."""
    shown = screen()
    rows, total = _rows(shown), _total(shown)
    assert rows, shown
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = screen()
        assert _rows(now) == rows, f"the view moved:\n{now}"
    assert _total(screen()) > total, "no new lines arrived meanwhile"
    return rows


@pytest.mark.slow
def test_a_running_runs_output_holds_still_when_scrolled_back(tmux, tmp_path: Path) -> None:
    """k stops following and the view holds for 4 s while a line arrives every 0.5 s;
    pgup and g hold too; G follows again."""
    script = "seq -f 'row %g' 1 60; i=60; while :; do i=$((i+1)); echo row $i; sleep 0.5; done"
    screen = _open_run(tmux, tmp_path / "hold.db", script)
    footer = wait_for(screen, "following (f)").rstrip("\n").splitlines()[-1]
    assert "c Cancel run" in footer and "? Help" in footer and "q Quit" in footer, footer
    poll(lambda: "row 61" in screen(), 20, "the run's lines to arrive")
    _keys(tmux, "k")
    wait_for(screen, "paused (G or f follows)")
    _holds(screen, 4)
    for key in ("PageUp", "g"):
        _keys(tmux, "G")
        wait_for(screen, "following (f)")
        _keys(tmux, key)
        wait_for(screen, "paused")
        rows = _holds(screen, 1.5)
        assert key != "g" or rows[0] == "row 1"
    _keys(tmux, "G")  # follows again: the newest line shows as it comes
    wait_for(screen, "following (f)")

    def newest_in_view() -> bool:
        shown = screen()
        rows = _rows(shown)
        return bool(rows) and int(rows[-1].split()[1]) == _total(shown)

    poll(newest_in_view, 10, "the newest line in view")
    last = _total(screen())
    poll(lambda: _total(screen()) >= last + 2 and newest_in_view(), 10, "following")
    _keys(tmux, "q")


def test_search_wraps_ignores_case_when_lowercase_and_counts(tmux, tmp_path: Path) -> None:
    screen = _open_run(tmux, tmp_path / "search.db", "seq -f 'row %g' 1 300; echo all done")
    wait_for(screen, "succeeded")
    _keys(tmux, "G")
    wait_for(screen, "all done")
    _search(tmux, screen, "row 5")  # nothing below the end: from the top, and said
    shown = wait_for(screen, "search hit BOTTOM, continuing at TOP")
    assert "/row 5: match 1/11" in shown and "row 5" in _rows(shown)
    _keys(tmux, "n")
    wait_for(screen, "/row 5: match 2/11")
    _keys(tmux, "N", "N")  # back over the top
    wait_for(screen, "match 11/11 · search hit TOP, continuing at BOTTOM")
    _search(tmux, screen, "DONE")  # a capital, found nowhere as typed: any case
    wait_for(screen, "/DONE (any case): match 1/1")
    _search(tmux, screen, "re:^row 29\\d$")
    wait_for(screen, "match 1/10")
    _keys(tmux, "q")


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def _foreground(line: str, word: str) -> int | None:
    """The 256-colour foreground `word` is drawn in on a `capture-pane -e` line (None for
    the default), from the SGR sequences tmux writes before it."""
    fg = None
    for match in SGR.finditer(line[: line.index(word)]):
        codes = match[1].split(";")
        i = 0
        while i < len(codes):
            code = codes[i]
            if code in ("", "0", "39"):
                fg = None
            elif code == "38" and codes[i + 1 : i + 2] == ["5"]:
                fg, i = int(codes[i + 2]), i + 2
            elif code in ("48",) and codes[i + 1 : i + 2] == ["5"]:
                i += 2
            elif len(code) == 2 and code[0] == "3" and code[1] in "01234567":
                fg = int(code[1])
            i += 1
    return fg


def _reddish(colour: int | None) -> bool:
    if colour is None:
        return False
    if colour < 16:
        return colour in (1, 9)
    if colour >= 232:
        return False
    level = (0, 95, 135, 175, 215, 255)
    r, g, b = (level[(colour - 16) // 36], level[(colour - 16) // 6 % 6], level[(colour - 16) % 6])
    return r >= 175 and g <= r // 2 and b <= r // 2


def _search(tmux, screen, text: str) -> None:
    """`/`, then the words once the box shows (keys sent before it has focus go elsewhere)."""
    poll(lambda: "▊▔" not in screen(), 20, "the last search box to close")
    _keys(tmux, "/")
    wait_for(screen, "▊▔")
    tmux("send-keys", "-t", "ui", "-l", text)
    _keys(tmux, "Enter")


def test_search_finds_what_is_shown_not_the_secret_behind_it(tmux, tmp_path: Path) -> None:
    """`***` and an escaped `\\x1b` are found as the view shows them; the password they
    stand for is found nowhere and never shown. A colour shows as a colour; the title
    sequence beside it shows escaped and never sets the title."""
    script = (
        "seq -f 'row %g' 1 100; echo 'db postgres://app:hunter2@db/x';"
        " printf '\\033[31mred\\033[0m \\033]0;title\\007done\\n'; seq -f 'row %g' 101 200"
    )
    screen = _open_run(tmux, tmp_path / "shown.db", script)
    wait_for(screen, "succeeded")
    _search(tmux, screen, "***")
    shown = wait_for(screen, "/***: match 1/1")
    assert "postgres://app:***@db/x" in shown
    _search(tmux, screen, "\\x1b]0;title")
    shown = wait_for(screen, "title: match 1/1")
    assert "red \\x1b]0;title\\x07done" in shown and "[31m" not in shown
    coloured = tmux("capture-pane", "-p", "-e", "-t", "ui")
    line = next(row for row in coloured.splitlines() if "title" in row and "done" in row)
    # the pane's own escapes: "red" drawn in a red (the theme's), "done" in the default
    assert _reddish(_foreground(line, "red")), line
    assert _foreground(line, "done") is None, line
    assert tmux("display-message", "-p", "-t", "ui", "#{pane_title}").strip() != "title"
    _search(tmux, screen, "hunter2")
    shown = wait_for(screen, "/hunter2: no match")
    assert shown.count("hunter2") == 1  # only what was typed, on the status line
    _keys(tmux, "q")
