"""The dashboard in a real terminal: tmux runs `tickui --db X`, keys go in, the screen comes out."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from helpers import cli, cli_json

pytestmark = pytest.mark.slow


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed (make test installs it)")
        pytest.skip("tmux is not installed")
    socket = f"tickui-test-{uuid.uuid4().hex[:8]}"

    def run(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=10
        ).stdout

    yield run
    run("kill-server")


def wait_for(screen, text: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    shown = ""
    while time.monotonic() < deadline:
        shown = screen()
        if text in shown:
            return shown
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never showed; the screen was:\n{shown}")


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
    wait_for(screen, "greet")
    tmux("send-keys", "-t", "ui", "r")
    shown = wait_for(screen, "succeeded")
    assert "greet" in shown.split("Occurrences", 1)[1]
    [occ] = cli_json("history", "greet", db=db)
    assert occ["kind"] == "manual" and occ["state"] == "succeeded"

    tmux("send-keys", "-t", "ui", "s")
    wait_for(screen, "engine stopped")
    tmux("send-keys", "-t", "ui", "q")
    deadline = time.monotonic() + 15
    while not exit_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
