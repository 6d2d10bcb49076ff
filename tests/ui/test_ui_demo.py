"""`tickui demo`: its tasks show every state within 15 s of schedule (manual clock), and
the real command opens, ticks and cleans up after itself in a real terminal."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from helpers import T0
from helpers import wait_for as wait_until
from tickui.common.clock import ManualClock
from tickui.ui.launch import DEMO_NOTE, seed_demo
from ui_support import screen_text, until, wait_for


async def _seed(store, clock: ManualClock) -> None:
    await seed_demo(store, clock.now())


async def test_demo_tasks_show_every_state_within_15_seconds(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, _seed, started=False)
    await app.ready.wait()

    async def dispatched() -> bool:
        """Every run this tick claimed has started (or already ended)."""
        active = await app.host.store.active_occurrences()
        return all(o.state == "running" for o in active)

    for _ in range(15):
        clock.advance(1)
        await app.host.engine.tick(clock.now())
        await wait_until(dispatched, what="the tick's runs to start")

    def states(task: str) -> set[str]:
        return {o.state for o in app.board.occ_rows.by_id.values() if o.task == task}

    def shown(task: str, state: str, detail: str = "") -> bool:
        return any(
            o.task == task and o.state == state and detail in (o.detail or "")
            for o in app.board.occ_rows.by_id.values()
        )

    await until(pilot, lambda: "succeeded" in states("hello"))
    await until(pilot, lambda: "failed" in states("flaky-export"))
    await until(pilot, lambda: shown("slow-report", "skipped", "forbid"))
    await until(pilot, lambda: shown("replace-cache", "cancelled"))
    await until(pilot, lambda: "succeeded" in states("cron-heartbeat"))
    assert not states("paused-sync") and not states("nightly-backup")
    await until(pilot, lambda: f"off {DEMO_NOTE}"[:9] in screen_text(app))


def _emitted(screen: str) -> int:
    found = re.search(r"emitted\s+(\d+)", screen)
    return int(found.group(1)) if found else -1


@pytest.mark.slow
def test_tickui_demo_in_a_real_terminal_ticks_and_removes_its_database(tmux, tmp_path):
    exit_file = tmp_path / "exit"
    command = f"TERM=xterm-256color {sys.executable} -m tickui demo; echo $? > {exit_file}; sleep 5"
    tmux("new-session", "-d", "-s", "demo", "-x", "160", "-y", "40", command)

    def screen() -> str:
        return tmux("capture-pane", "-p", "-t", "demo")

    wait_for(screen, "ticker running")
    # The header can be painted a frame before the tasks table is filled.
    shown = wait_for(screen, "paused-sync")
    assert "DEMO" in shown and "hello" in shown
    found = re.search(r"(/\S+/demo\.db)", shown)
    assert found, shown  # the header has room for the path at 160 columns
    db = Path(found.group(1))
    assert db.exists()
    wait_for(screen, "succeeded")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _emitted(screen()) < 2:
        time.sleep(0.2)
    assert _emitted(screen()) >= 2, screen()  # ticks flowing, one a second
    tmux("send-keys", "-t", "demo", "q")
    # q either quits at once or asks first while slow-report or replace-cache still runs.
    deadline = time.monotonic() + 15
    while not exit_file.exists() and time.monotonic() < deadline:
        if "Cancel them" in screen():
            tmux("send-keys", "-t", "demo", "c")
            break
        time.sleep(0.05)
    deadline = time.monotonic() + 15
    # the shell makes the file, then writes the code: wait for the code
    while not (exit_file.exists() and exit_file.read_text().strip()):
        assert time.monotonic() < deadline, "no exit code in 15 s"
        time.sleep(0.1)
    assert exit_file.read_text().strip() == "0"
    assert not db.parent.exists()
