"""The history grid in a real terminal, at 80x24 and 200x60: v shows it, the arrows move
between runs and the title says the run, enter opens it; v again shows the day timeline,
and v once more the table."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from helpers import cli, cli_json, poll
from tickui.ui.view.grid import fit_slots
from ui_support import wait_for

pytestmark = pytest.mark.slow


def _line(shown: str, name: str) -> str:
    """The Tasks pane's line of task `name`, inside its border."""
    line = next(line for line in shown.splitlines() if line.startswith(f"│{name} "))
    return line.split("│")[1].rstrip()


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_the_grid_in_a_real_terminal(tmux, tmp_path: Path, size: tuple[int, int]) -> None:
    db = tmp_path / "grid.db"
    for name, command in (("bad", "echo no; exit 3"), ("ok", "echo fine")):
        added = cli("task", "add", name, "--cron", "0 0 1 1 *", "--", "sh", "-c", command, db=db)
        assert added.returncode == 0, added.stderr
    exit_file = tmp_path / "exit"
    command = (
        f"TERM=xterm-256color {sys.executable} -m tickui --db {db}; echo $? > {exit_file}; sleep 5"
    )
    width, height = size
    tmux("new-session", "-d", "-s", "ui", "-x", str(width), "-y", str(height), command)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "ui")

    def keys(*names: str) -> None:
        tmux("send-keys", "-t", "ui", *names)

    wait_for(screen, "engine running")
    wait_for(screen, "│ok ")

    def ended(name: str) -> list[str]:
        runs = cli_json("history", name, db=db)
        return [o["state"] for o in runs if o["state"] in ("succeeded", "failed")]

    keys("r")  # bad, the first row (same next run, then by name), twice; then ok
    poll(lambda: ended("bad") == ["failed"], 15, "bad's first run to fail")
    keys("r")
    poll(lambda: ended("bad") == ["failed", "failed"], 15, "bad's second run to fail")
    keys("Down", "r")
    poll(lambda: ended("ok") == ["succeeded"], 15, "ok's run to succeed")

    keys("v")
    shown = wait_for(screen, "Tasks · grid · ok · run 3")
    assert "newer →" in shown
    poll(lambda: _line(screen(), "bad").endswith("✗ ✗"), 15, "bad's cells")
    poll(lambda: _line(screen(), "ok").endswith("■"), 15, "ok's cell")
    shown = screen()
    border = next(line for line in shown.splitlines() if "Tasks · grid" in line)
    inner = border.index("╮") - 1  # the pane's width inside its border
    # the newest cell ends the row; at most a scrollbar's column and a spare one after it
    assert 0 <= inner - len(_line(shown, "ok")) <= 2, shown
    assert fit_slots(inner).slots >= (25 if width == 80 else 60)

    keys("Up")
    wait_for(screen, "Tasks · grid · bad · run 2")
    keys("Left")
    shown = wait_for(screen, "Tasks · grid · bad · run 1")
    title = next(line for line in shown.splitlines() if "Tasks · grid" in line)
    if width >= 100:  # the whole description; at 80 it is cut with …
        assert "· failed (exit 3), manual · took " in title, title
    keys("Left")  # no older run: stays
    time.sleep(0.3)  # a key that changes nothing: nothing to wait for but its handling
    assert "Tasks · grid · bad · run 1" in screen()

    keys("Enter")
    shown = wait_for(screen, "Run 1 of bad")
    wait_for(screen, "no")  # its output
    keys("Escape")
    wait_for(screen, "Tasks · grid · bad · run 1")
    keys("v")  # the day timeline: a row per task, the runs a column, the zone named
    shown = wait_for(screen, "Tasks · timeline")
    assert "bad" in shown and "runs" in shown, shown
    keys("v")
    wait_for(screen, "Tasks · by NEXT")
    assert "NEXT" in screen() and "newer →" not in screen()
    keys("q")
    deadline = time.monotonic() + 15
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, "no exit code in 15 s"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
