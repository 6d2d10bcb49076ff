"""Whole `tickui run` processes on one database: exactly once, and recovery after kill -9."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from helpers import cli, cli_json, poll


def _spawn(db, *args) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    return subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), "run", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_two_engines_run_every_slot_exactly_once(tmp_path):
    db = tmp_path / "t.db"
    out = tmp_path / "slots.txt"
    added = cli(
        "task",
        "add",
        "beat",
        "--every",
        "1s",
        "--concurrency",
        "allow",
        "--",
        "sh",
        "-c",
        f"echo $TICKUI_SCHEDULED_FOR >> {out}",
        db=db,
    )
    assert added.returncode == 0, added.stderr
    first = _spawn(db, "--for", "22")
    time.sleep(0.5)
    second = _spawn(db, "--for", "21")
    outputs = [p.communicate(timeout=60) for p in (first, second)]
    assert [p.returncode for p in (first, second)] == [0, 0], outputs
    finals = [json.loads(err.strip().splitlines()[-1])["engine"] for _, err in outputs]
    assert sorted(f["was_standby"] for f in finals) == [False, True]
    standby_err = outputs[[f["was_standby"] for f in finals].index(True)][1]
    assert "standby: lease held by" in standby_err

    lines = out.read_text().split()
    assert len(lines) == len(set(lines)), "a slot ran twice"
    assert len(lines) >= 18
    history = [o for o in cli_json("history", "beat", "--limit", "1000", db=db)]
    recorded = sorted(o["scheduled_for"] for o in history)
    assert len(recorded) == len(set(recorded))
    assert sorted(lines) == sorted(o["scheduled_for"] for o in history if o["state"] == "succeeded")
    assert {o["state"] for o in history} == {"succeeded"}
    seconds = sorted(int(time.mktime(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S"))) for s in lines)
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds))), "a slot was lost"


def _running(db):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT id, pid, scheduled_for FROM occurrences WHERE state = 'running'"
        ).fetchone()
    finally:
        conn.close()


def test_kill_9_then_restart_interrupts_and_carries_on(tmp_path):
    db = tmp_path / "t.db"
    escaped = tmp_path / "escaped.pid"
    added = cli(
        "task",
        "add",
        "long",
        "--every",
        "2s",
        "--",
        "sh",
        "-c",
        # a setsid child leaves the run's process group and session: recovery finds it
        # by the occurrence's variables in its environment
        f"setsid sh -c 'echo $$ > {escaped}; exec sleep 60' & exec sleep 60",
        db=db,
    )
    assert added.returncode == 0, added.stderr
    engine = _spawn(db, "--for", "60")
    occ_id, child, _ = poll(lambda: _running(db), 15, "a running occurrence")
    setsid_child = int(poll(lambda: escaped.exists() and escaped.read_text(), 15, "pid"))
    assert _alive(child) and _alive(setsid_child)
    assert os.getsid(setsid_child) != os.getsid(child)
    engine.send_signal(signal.SIGKILL)
    engine.wait(10)
    assert _alive(child), "the run should outlive its engine (own process group)"
    assert _alive(setsid_child)

    restarted = _spawn(db, "--for", "5", "--stop-grace", "500ms")
    _, err = restarted.communicate(timeout=60)
    assert restarted.returncode == 0, err
    history = cli_json("history", "long", "--limit", "100", db=db)
    interrupted = next(o for o in history if o["id"] == occ_id)
    assert interrupted["state"] == "failed" and interrupted["error_code"] == "INTERRUPTED"
    assert not _alive(child), "the orphaned run was not terminated"
    assert not _alive(setsid_child), "the orphaned run's setsid child was not terminated"
    slots = [o["scheduled_for"] for o in history]
    assert len(slots) == len(set(slots)), "a slot ran twice"
    later = [o for o in history if o["scheduled_for"] > interrupted["scheduled_for"]]
    assert later, "the schedule did not carry on after the restart"
