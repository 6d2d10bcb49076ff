"""The dashboard in a real terminal: tmux runs `tickui --db X`, keys go in, the screen comes out."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from helpers import cli, cli_json, poll
from ui_support import wait_for

pytestmark = pytest.mark.slow


def test_run_now_stop_engine_and_quit_in_a_real_terminal(tmux, tmp_path: Path) -> None:
    db = tmp_path / "tmux.db"
    added = cli("task", "add", "greet", "--cron", "0 0 1 1 *", "--", "sh", "-c", "echo hi", db=db)
    assert added.returncode == 0, added.stderr
    exit_file = tmp_path / "exit"
    command = (
        f"TERM=xterm-256color {sys.executable} -m tickui --db {db}; echo $? > {exit_file}; sleep 5"
    )
    tmux("new-session", "-d", "-s", "ui", "-x", "120", "-y", "40", command)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "ui")

    wait_for(screen, "engine running")
    shown = wait_for(screen, "greet")
    lines = shown.splitlines()
    tasks = next(i for i, line in enumerate(lines) if "Tasks" in line)
    ticks = next(i for i, line in enumerate(lines) if "Ticks" in line)
    assert tasks < ticks, shown  # at 120 columns the side panes are under the tables
    tmux("send-keys", "-t", "ui", "r")
    shown = wait_for(screen, "succeeded")
    assert "greet" in shown.split("Occurrences", 1)[1]
    [occ] = cli_json("history", "greet", db=db)
    assert occ["kind"] == "manual" and occ["state"] == "succeeded"

    tmux("send-keys", "-t", "ui", "s")
    wait_for(screen, "Stop the engine?")
    tmux("send-keys", "-t", "ui", "y")
    wait_for(screen, "engine stopped")
    tmux("send-keys", "-t", "ui", "q")
    deadline = time.monotonic() + 15
    # the shell makes the file, then writes the code: wait for the code
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, "no exit code in 15 s"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"


@pytest.mark.parametrize("entry", [[], ["demo"]])
def test_without_a_terminal_the_dashboard_says_so_and_makes_nothing(
    tmux, tmp_path: Path, entry: list[str]
) -> None:
    """In a terminal, but with stdout to a file: one line on stderr, exit 2 at once, no
    database and no folder made, and no process left behind."""
    db = tmp_path / "new" / "x.db"
    out, err, exit_file = tmp_path / "out", tmp_path / "err", tmp_path / "exit"
    args = " ".join(entry)
    command = (
        f"{sys.executable} -m tickui --db {db} {args} > {out} 2> {err}; echo $? > {exit_file}"
        "; sleep 5"
    )
    started = time.monotonic()
    tmux("new-session", "-d", "-s", "ui", "-x", "80", "-y", "24", command)
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() - started < 2, "still running after 2 s"
        time.sleep(0.02)
    assert exit_file.read_text().strip() == "2"
    said = err.read_text().strip().splitlines()
    assert len(said) == 1 and "terminal" in said[0] and "tickui run" in said[0], said
    assert out.read_text() == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["err", "exit", "out"]
    panes = tmux("list-panes", "-t", "ui", "-F", "#{pane_pid}").split()
    children = Path(f"/proc/{panes[0]}/task/{panes[0]}/children").read_text().split()
    assert all("tickui" not in Path(f"/proc/{c}/cmdline").read_text() for c in children)


def test_ctrl_c_in_a_form_field_asks_before_the_typed_form_is_lost(tmux, tmp_path: Path) -> None:
    """In a field, ctrl+c still quits (the field does not keep it to copy), but a form with
    something typed asks first: n keeps the form and what was typed, y quits."""
    db = tmp_path / "form.db"
    exit_file = tmp_path / "exit"
    command = (
        f"TERM=xterm-256color {sys.executable} -m tickui --db {db}; echo $? > {exit_file}; sleep 5"
    )
    tmux("new-session", "-d", "-s", "ui", "-x", "100", "-y", "30", command)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "ui")

    wait_for(screen, "engine running")
    tmux("send-keys", "-t", "ui", "a")
    wait_for(screen, "Add a task")
    tmux("send-keys", "-t", "ui", "-l", "halfway")
    wait_for(screen, "halfway")
    tmux("send-keys", "-t", "ui", "C-c")
    wait_for(screen, "Quit and discard the form?")
    tmux("send-keys", "-t", "ui", "n")
    poll(lambda: "discard" not in screen(), 15, "the question to close")
    assert "halfway" in screen() and "Add a task" in screen()
    tmux("send-keys", "-t", "ui", "C-c")
    wait_for(screen, "Quit and discard the form?")
    tmux("send-keys", "-t", "ui", "y")
    deadline = time.monotonic() + 15
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, "no exit code in 15 s"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
    assert cli_json("task", "list", db=db) == []
