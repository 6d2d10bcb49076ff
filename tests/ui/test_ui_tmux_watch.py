"""A dashboard anywhere: `tickui --watch` in a real terminal on a PostgreSQL store whose
lease another process holds. It shows a run within half a second of its start, and `r`
starts a run through the holder; it never takes the lease itself."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from engine_procs import Engine, lease_owner, rows, wait_for

from helpers import cli, poll

pytestmark = pytest.mark.slow

SHOWN_WITHIN = 0.5  # s from a run's start to the watching dashboard showing it running
CAPTURE_SLACK = 0.1  # s: this test looks at the pane every 20 ms, and a capture takes time


def test_a_watching_dashboard_shows_runs_at_once_and_runs_now_through_the_holder(
    pg_url: str, tmux, tmp_path: Path
) -> None:
    added = cli("task", "add", "beat", "--every", "2s", "--", "sleep", "1.2", db=pg_url)
    assert added.returncode == 0, added.stderr
    added = cli("task", "add", "asked", "--cron", "0 0 1 1 *", "--", "true", db=pg_url)
    assert added.returncode == 0, added.stderr
    holder = Engine(pg_url, tmp_path / "holder.err")
    try:
        owner = wait_for(lambda: lease_owner(pg_url), 20, "the holder to take the lease")
        command = f"TERM=xterm-256color {sys.executable} -m tickui --db {pg_url} --watch"
        tmux("new-session", "-d", "-s", "ui", "-x", "120", "-y", "40", f"{command}; sleep 30")

        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", "ui")

        poll(lambda: "watching" in screen(), 20, "the watching header")
        up_at = time.time()  # runs started from here on are timed (the first picture is up)
        seen: dict[int, float] = {}
        deadline = time.monotonic() + 30

        def started() -> dict[int, float]:
            found = rows(pg_url, "SELECT id, started_at FROM occurrences WHERE kind = 'scheduled'")
            return {r["id"]: r["started_at"] / 1e6 for r in found if r["started_at"]}

        while time.monotonic() < deadline:
            shown, at = screen(), time.time()
            for found in re.finditer(r"^│\s*(\d+) running\s+beat", shown, re.M):
                seen.setdefault(int(found.group(1)), at)
            if len([i for i, t in started().items() if t > up_at and i in seen]) >= 3:
                break
            time.sleep(0.02)
        starts = {i: t for i, t in started().items() if t > up_at}
        late = {i: round(seen[i] - t, 3) for i, t in starts.items() if i in seen}
        assert len(late) >= 3, f"runs shown running: {seen}, started: {starts}\n{screen()}"
        assert all(d <= SHOWN_WITHIN + CAPTURE_SLACK for d in late.values()), late

        # r on a task: a request the holder answers with a manual run of its own
        tmux("send-keys", "-t", "ui", "/")
        poll(lambda: "▊▔" in screen(), 10, "the filter box")
        tmux("send-keys", "-t", "ui", "asked", "Enter")
        poll(lambda: "▊▔" not in screen() and "beat " not in screen().split("Occurr")[0], 10)
        tmux("send-keys", "-t", "ui", "r")
        poll(lambda: "queued run-now of asked" in screen(), 10, "the run-now to be queued")
        manual = poll(
            lambda: rows(pg_url, "SELECT owner, state FROM occurrences WHERE kind = 'manual'"),
            20, "the holder to start the run-now",
        )  # fmt: skip
        assert manual[0]["owner"] == owner
        poll(lambda: re.search(r"succeeded asked\s+manual", screen()), 10, "the run shown")
        assert lease_owner(pg_url) == owner  # the dashboard never took the lease
        assert holder.stop() == 0, holder.stderr()[-2000:]
    finally:
        holder.kill()


def test_the_header_says_the_store_is_down_while_it_is(tmux, tmp_path: Path) -> None:
    """The PostgreSQL server stopped under a dashboard: its header says the store is down
    within seconds, and stops saying so once the server is back."""
    import services

    server = services.PrivatePostgres()
    try:
        server.start_with_retries(same_port=False)
        added = cli("task", "add", "t", "--every", "1m", "--", "true", db=server.url)
        assert added.returncode == 0, added.stderr
        command = f"TERM=xterm-256color {sys.executable} -m tickui --db {server.url} --watch"
        tmux("new-session", "-d", "-s", "ui", "-x", "160", "-y", "30", f"{command}; sleep 30")

        def header() -> str:
            return tmux("capture-pane", "-p", "-t", "ui").splitlines()[0]

        poll(lambda: "watching" in header(), 20, "the dashboard")
        assert "store down" not in header()
        server.stop()
        shown = poll(lambda: "store down" in header() and header(), 10, "the outage said")
        assert "watching" in shown
        server.start_with_retries(same_port=True)
        poll(lambda: "store down" not in header(), 20, "the outage gone from the header")
    finally:
        server.close()
