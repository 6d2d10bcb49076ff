"""The dashboard in a real terminal: tmux runs `tickui --db X`, keys go in, the screen comes out."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from helpers import cli, cli_json
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
    assert any("Tasks" in line and "Ticks" in line for line in shown.splitlines()), shown
    tmux("send-keys", "-t", "ui", "r")
    shown = wait_for(screen, "succeeded")
    assert "greet" in shown.split("Occurrences", 1)[1]
    [occ] = cli_json("history", "greet", db=db)
    assert occ["kind"] == "manual" and occ["state"] == "succeeded"

    tmux("send-keys", "-t", "ui", "s")
    wait_for(screen, "engine stopped")
    tmux("send-keys", "-t", "ui", "q")
    deadline = time.monotonic() + 15
    # the shell makes the file, then writes the code: wait for the code
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, "no exit code in 15 s"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
