"""The dashboard kept open in a real terminal: tmux runs `tickui --db X`, real runs arrive,
keys go in and the screen comes out. Selection by identity, the run output view, resizes."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from helpers import cli, cli_json, poll
from ui_support import wait_for

pytestmark = pytest.mark.slow


def _start(tmux, tmp_path: Path, db: Path, width: int = 120, height: int = 40):
    command = f"TERM=xterm-256color {sys.executable} -m tickui --db {db}; sleep 30"
    tmux("new-session", "-d", "-s", "ui", "-x", str(width), "-y", str(height), command)
    tmux("set-option", "-t", "ui", "window-size", "manual")

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "ui")

    wait_for(screen, "engine running")
    return screen


def _keys(tmux, *keys: str) -> None:
    for key in keys:
        tmux("send-keys", "-t", "ui", key)
        time.sleep(0.15)  # a person's pace: each key lands on the screen the last one left


def _box(tmux, screen) -> None:
    """`/`, then wait for its input box (its tall top edge) to show: keys sent before the
    box has focus would go to the table behind it."""
    poll(lambda: "▊▔" not in screen(), 20, "the last input box to close")
    _keys(tmux, "/")
    wait_for(screen, "▊▔")


def _add(db: Path, name: str, *args: str) -> None:
    added = cli("task", "add", name, *args, db=db)
    assert added.returncode == 0, added.stderr


def test_cancel_acts_on_the_run_picked_while_new_runs_arrive(tmux, tmp_path: Path) -> None:
    """The cursor stays on the long run while a task every second adds rows on top; `c`
    names that run and `y` cancels exactly it."""
    db = tmp_path / "live.db"
    _add(db, "long", "--cron", "0 0 1 1 *", "--", "sleep", "300")
    _add(db, "often", "--every", "1s", "--", "true")
    screen = _start(tmux, tmp_path, db)
    _box(tmux, screen)
    _keys(tmux, *"long", "Enter", "r")
    # the header already says "running" (engine, ticker): the store says when `r` landed
    [long_run] = poll(
        lambda: [o for o in cli_json("history", "long", db=db) if o["state"] == "running"],
        20, "the long run to start",
    )  # fmt: skip
    # Occurrences pane: filtered to long's run the cursor is on it; clearing the filter
    # brings every row back and the cursor stays on that run, wherever it now is
    _keys(tmux, "Tab")
    _box(tmux, screen)
    _keys(tmux, *"long", "Enter")
    wait_for(screen, "task ~ 'long'")
    _box(tmux, screen)
    _keys(tmux, "Escape")
    poll(lambda: "task ~" not in screen(), 20)
    before = len(cli_json("history", "often", db=db))
    poll(lambda: len(cli_json("history", "often", db=db)) >= before + 4, 20)
    _keys(tmux, "c")
    shown = wait_for(screen, f"run {long_run['id']} (long")
    assert "started" in shown
    _keys(tmux, "y")
    poll(lambda: cli_json("history", "long", db=db)[0]["state"] == "cancelled", 20)
    often = cli_json("history", "often", db=db)
    assert not [o for o in often if o["state"] == "cancelled"]
    _keys(tmux, "q")


def test_enter_on_a_run_opens_its_whole_output(tmux, tmp_path: Path) -> None:
    db = tmp_path / "out.db"
    _add(db, "chatty", "--cron", "0 0 1 1 *", "--", "sh", "-c", "seq -f 'line %g' 1 2000")
    screen = _start(tmux, tmp_path, db)
    _keys(tmux, "r")
    wait_for(screen, "succeeded")
    _keys(tmux, "Tab", "Enter")
    wait_for(screen, "Run 1 of chatty")
    # the title shows before the output is read; its status line says when all of it is
    shown = wait_for(screen, "of 2,000")  # a finished run opens at its first line
    assert re.search(r"line 1(?!\d)", shown) and "line 2000" not in shown
    assert "scheduled" in shown and "started" in shown  # labels are never cut
    _keys(tmux, "G")
    wait_for(screen, "line 2000")
    _keys(tmux, "g")
    poll(lambda: re.search(r"line 1(?!\d)", screen()), 20)
    _box(tmux, screen)
    _keys(tmux, *"line 1234", "Enter")
    wait_for(screen, "line 1234")
    _keys(tmux, "Escape")
    _keys(tmux, "q")


def _side_by_side(shown: str) -> bool:
    return any("Tasks" in line and "Ticks" in line for line in shown.splitlines())


def test_each_size_gets_its_own_layout(tmux, tmp_path: Path) -> None:
    db = tmp_path / "size.db"
    _add(db, "greet", "--cron", "0 0 1 1 *", "--", "true")
    screen = _start(tmux, tmp_path, db, 200, 60)
    poll(lambda: _side_by_side(screen()), 20)
    for width, height, wide in ((80, 24, False), (200, 60, True), (80, 24, False)):
        tmux("resize-window", "-t", "ui", "-x", str(width), "-y", str(height))

        def laid_out(wide=wide) -> bool:
            shown = screen()
            last = shown.rstrip("\n").splitlines()[-1]
            # the side panes where this size puts them, and help and quit still in the footer
            return (
                _side_by_side(shown) == wide
                and "greet" in shown
                and "? Help" in last
                and "q Quit" in last
            )

        poll(laid_out, 20)
        assert max(len(line) for line in screen().splitlines()) <= width
    _keys(tmux, "q")


def test_a_task_says_running_in_its_row_within_a_second_of_its_start(tmux, tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    _add(db, "busy", "--cron", "0 0 1 1 *", "--", "sleep", "20")  # runs when r says
    screen = _start(tmux, tmp_path, db)
    wait_for(screen, "busy")
    _keys(tmux, "r")
    deadline = time.monotonic() + 15
    while True:
        row = next((line for line in screen().splitlines() if "│busy " in line), "│busy ")
        if "running" in row.split("busy", 1)[1]:
            seen = time.time()
            break
        assert time.monotonic() < deadline, screen()
        time.sleep(0.05)
    [run] = cli_json("history", "busy", db=db)
    started = datetime.fromisoformat(run["started_at"].replace("Z", "+00:00")).timestamp()
    assert seen - started < 1.0, (seen, run)


@pytest.mark.slow
def test_a_moved_cursor_keeps_its_row_while_next_reorders_the_tasks(tmux, tmp_path: Path) -> None:
    """Sorted by NEXT, tasks every 2 to 5 s swap places every second: the row the user
    moved to stays where it is for 10 s, and enter opens that task; home lets them move."""
    db = tmp_path / "order.db"
    for name, every in (("t2", "2s"), ("t3", "3s"), ("t4", "4s"), ("t5", "5s")):
        _add(db, name, "--every", every, "--", "true")
    screen = _start(tmux, tmp_path, db)

    def order() -> list[str]:
        lines = screen().split("Occurrences", 1)[0].splitlines()
        return [m.group(1) for line in lines if (m := re.match(r"│(t\d) ", line))]

    poll(lambda: len(order()) == 4, 20, "the four tasks")
    _keys(tmux, "Down", "Down")
    held = order()
    picked = held[2]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert order() == held, screen()
        time.sleep(0.25)
    assert "order held" in screen()
    _keys(tmux, "Enter")
    wait_for(screen, f"Task {picked}")
    _keys(tmux, "Escape", "Home")
    poll(lambda: order() != held, 10, "the order to move again")
    _keys(tmux, "q")
