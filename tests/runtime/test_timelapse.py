"""Time-lapse (`--time-scale` other than 1) works on a copy with simulated runs: the real
database keeps its bytes, no command runs (unless --real-commands, still on the copy), and
real time runs on afterwards. Real files, real processes, manual clocks."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from helpers import T0, cli, wait_for
from tickui.common.clock import ManualClock, ScaledClock, SystemClock
from tickui.common.timeutil import MICROS
from tickui.dispatch import Job, NotStarted, Receipt, SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.spec import build_spec
from tickui.runtime.assembly import build_ticker_for
from tickui.runtime.settings import Settings
from tickui.runtime.simulate import TEMP_PREFIX, Profile, SimulatedDispatcher, TimeLapse, succeeds
from tickui.store import Store
from tickui.ticks.bus import MemoryBus
from tickui.ticks.sequence import SqliteSequenceStore
from tickui.ui.launch import dashboard_session

MARK = "touch {dir}/ran-$TICKUI_OCCURRENCE_ID"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def beside(path: Path) -> list[str]:
    return sorted(os.listdir(path.parent))


def scratch_env(tmp: Path) -> dict[str, str]:
    """The time-lapse folder goes under TMPDIR: point it somewhere the test can watch."""
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp)}


def final_json(stderr: str) -> dict:
    return json.loads(stderr.strip().splitlines()[-1])


def add_history(db: Path, task: str, rows: list[tuple[str, float, int | None]]) -> None:
    """Record finished runs (state, seconds, exit code) of `task` as if they had happened."""
    conn = sqlite3.connect(db)
    with conn:
        (task_id,) = conn.execute("SELECT id FROM tasks WHERE name = ?", (task,)).fetchone()
        for i, (state, seconds, code) in enumerate(rows):
            start = T0 - (len(rows) - i) * 3600 * MICROS
            conn.execute(
                "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
                " started_at, finished_at, exit_code) VALUES (?, ?, 'manual', ?, ?, ?, ?, ?, ?)",
                (task_id, task, start, state, start, start, start + round(seconds * MICROS), code),
            )
    conn.close()


# ---- the CLI on a real database ----------------------------------------------------------


def test_time_lapse_run_never_touches_the_real_database_nor_runs_commands(tmp_path):
    db = tmp_path / "real" / "tickui.db"
    marks = tmp_path / "marks"
    marks.mkdir()
    cmd = ["--", "sh", "-c", MARK.format(dir=marks)]
    assert cli("task", "add", "minutely", "--every", "1m", *cmd, db=db).returncode == 0
    assert cli("task", "add", "once", "--at", "2099-01-01T00:00:00Z", *cmd, db=db).returncode == 0
    in_two_hours = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 7200))
    assert cli("task", "add", "soon", "--at", in_two_hours, *cmd, db=db).returncode == 0
    next_before = {t["name"]: t["next_run_at"] for t in json.loads(
        cli("task", "list", "--json", db=db).stdout)}  # fmt: skip
    before, files = digest(db), beside(db)
    scratch = tmp_path / "scratch"

    run = cli("run", "--time-scale", "3600", "--for", "3", db=db, env=scratch_env(scratch))

    assert run.returncode == 0, run.stderr
    assert (
        f"time-lapse x3600 on a copy of {db}; simulated runs; the real database is untouched"
        in (run.stderr)
    )
    lapse = final_json(run.stderr)["time_lapse"]
    assert lapse["runs"] == "simulated"
    assert lapse["tasks"]["minutely"]["succeeded"] >= 60  # an hour of minutes, at least
    assert lapse["tasks"]["soon"]["succeeded"] == 1  # its two hours passed in the copy
    assert list(marks.iterdir()) == []  # no command ran
    assert digest(db) == before and beside(db) == files  # no byte, -wal, -shm or logs
    assert list(scratch.iterdir()) == []  # the copy's folder is gone

    # Real time runs on: the next slot of each task is where it was.
    after = {t["name"]: t["next_run_at"] for t in json.loads(
        cli("task", "list", "--json", db=db).stdout)}  # fmt: skip
    assert after == next_before
    asyncio.run(_normal_engine_runs_the_next_slot(db, marks))


async def _normal_engine_runs_the_next_slot(db: Path, marks: Path) -> None:
    store = await Store.open(db)
    task = await store.get_task("minutely")
    soon = await store.get_task("soon")
    assert task.next_run_at is not None and soon.next_run_at is not None
    assert task.next_run_at - SystemClock().now() <= 60 * MICROS  # not a day ahead
    clock = ManualClock(task.next_run_at)
    engine = SchedulerEngine(store, SubprocessDispatcher(store, clock), clock, EngineConfig())
    try:
        await engine.start()
        (occ,) = await store.history("minutely", 5)
        assert occ.scheduled_for == task.next_run_at
        await wait_for(lambda: (marks / f"ran-{occ.id}").exists(), what="the real run")
        assert await store.history("soon", 5) == []  # the one-shot still waits for its time
    finally:
        await engine.stop(grace=5)
        await store.close()


def test_real_commands_run_on_the_copy_on_time(tmp_path):
    db = tmp_path / "real" / "tickui.db"
    out = tmp_path / "slots.txt"
    script = f'echo "$TICKUI_SCHEDULED_FOR" >> {out}'
    assert cli("task", "add", "minutely", "--every", "1m", "--", "sh", "-c", script, db=db)
    (shown,) = json.loads(cli("task", "show", "minutely", "--json", db=db).stdout)
    first_due = datetime.fromisoformat(shown["next_run_at"])
    before, files = digest(db), beside(db)
    scratch = tmp_path / "scratch"

    run = cli(
        # 300x: a minute is 200 ms here, so "late by less than one slot" leaves a loaded
        # machine room to fork a shell (at 900x it was 67 ms)
        "run", "--for", "8", "--time-scale", "300", "--real-commands",
        db=db, env=scratch_env(scratch),
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    assert "real commands on the copy; the real database is untouched" in run.stderr

    slots = sorted(datetime.fromisoformat(s) for s in out.read_text().split())
    # 40 minutes of engine time; a loaded machine's slow start or fork leaves some
    # counted missed (below), so half is asked: at 1x not even one would have run
    assert len(slots) >= 20, f"only {len(slots)} minutes ran in 8 s at 300x"
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(slots)]
    assert all(gap > 0 and gap % 60 == 0 for gap in gaps), gaps  # on the grid, none twice
    task = final_json(run.stderr)["time_lapse"]["tasks"]["minutely"]
    assert task["succeeded"] == len(slots) and task.get("failed", 0) == 0
    # A slot a loaded machine scanned too late is counted missed, never lost: every slot from
    # the first due (a late first scan counts the slots before its first run) to the last run
    # either ran or is counted. A late run is counted too (run_once: it ran past its grace),
    # so the counted may exceed the slots that did not run, never the slots there were.
    # A slot that came while the run before still ran (a slow fork) is skipped, and counted.
    span = round((slots[-1] - first_due).total_seconds() / 60) + 1
    counted = len(slots) + task["missed"] + task.get("skipped", 0)
    assert span <= counted <= 2 * span, (len(slots), task, span)
    assert task["late_max_s"] < 60  # late by less than one slot, in engine time
    assert digest(db) == before and beside(db) == files
    assert list(scratch.iterdir()) == []


def test_no_database_starts_from_an_empty_copy_and_creates_nothing(tmp_path):
    db = tmp_path / "nowhere" / "tickui.db"
    run = cli("run", "--time-scale", "600", "--for", "0.5", db=db, env=scratch_env(tmp_path / "s"))
    assert run.returncode == 0, run.stderr
    assert f"on an empty database ({db} does not exist and is not created)" in run.stderr
    assert not db.parent.exists()


def test_a_foreign_file_is_refused_in_one_line_and_left_alone(tmp_path):
    db = tmp_path / "real" / "other.db"
    db.parent.mkdir()
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE photos (x)")
    conn.commit()
    conn.close()
    before, files = digest(db), beside(db)
    scratch = tmp_path / "s"
    run = cli("run", "--time-scale", "600", "--for", "1", db=db, env=scratch_env(scratch))
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"tickui: database {db} belongs to another program (tables: photos); left untouched"
    )
    assert digest(db) == before and beside(db) == files and list(scratch.iterdir()) == []


def test_sigterm_removes_the_copy(tmp_path):
    db = tmp_path / "tickui.db"
    assert cli("task", "add", "tick", "--every", "1s", "--", "true", db=db).returncode == 0
    before = digest(db)
    scratch = tmp_path / "scratch"
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"} | scratch_env(scratch)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), "run", "--time-scale", "60"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        while not list(scratch.glob(f"{TEMP_PREFIX}*/*.db.logs/*.log")):
            assert time.monotonic() < deadline, "no simulated run within 20 s"
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert list(scratch.iterdir()) == []
    assert digest(db) == before


def test_a_database_in_use_is_copied_with_its_wal_and_real_runs_are_never_signalled(tmp_path):
    """An engine has the database open (WAL not checkpointed), holds the lease and has a
    run in flight: the copy sees the newest rows, takes over at once in the copy, and the
    copy's recovery cannot kill the real run's process group."""
    db = tmp_path / "tickui.db"
    assert cli("task", "add", "tick", "--every", "1s", "--", "true", db=db).returncode == 0
    assert cli("task", "add", "late", "--every", "1s", "--", "true", db=db).returncode == 0
    real_run = subprocess.Popen(["sleep", "60"], start_new_session=True)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode = WAL")
        holder.execute("PRAGMA wal_autocheckpoint = 0")
        far = (time.time_ns() // 1000) + 3600 * MICROS
        holder.execute(
            "INSERT INTO lease (name, owner, token, expires_at, host, pid, pid_start) "
            "VALUES ('engine', 'real-engine', 7, ?, NULL, ?, NULL)",
            (far, os.getpid()),
        )
        holder.execute(
            "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
            " owner, lease_token, pid, pgid) SELECT id, name, 'manual', 1, 'running', 1,"
            " 'real-engine', 7, ?, ? FROM tasks WHERE name = 'tick'",
            (real_run.pid, real_run.pid),
        )
        holder.execute("UPDATE tasks SET note = 'only in the wal' WHERE name = 'late'")
        assert Path(f"{db}-wal").stat().st_size > 0
        files = beside(db)
        before = digest(db)
        with TimeLapse(db, 600) as lapse:
            copy = sqlite3.connect(lapse.copy)
            assert copy.execute("SELECT note FROM tasks WHERE name = 'late'").fetchone() == (
                "only in the wal",
            )
            assert copy.execute("SELECT token, expires_at, pid FROM lease").fetchone() == (
                7,
                0,
                None,
            )
            assert copy.execute("SELECT pid, pgid FROM occurrences").fetchall() == [(None, None)]
            copy.close()
        assert beside(db) == files and digest(db) == before
        run = cli(
            "run", "--time-scale", "600", "--for", "2", db=db, env=scratch_env(tmp_path / "s")
        )
        assert run.returncode == 0, run.stderr
        assert final_json(run.stderr)["time_lapse"]["tasks"]["tick"].get("succeeded", 0) > 10, (
            run.stderr
        )
        assert real_run.poll() is None, "the time-lapse killed a real run"
        assert holder.execute("SELECT owner FROM lease").fetchone() == ("real-engine",)
    finally:
        holder.close()
        real_run.kill()
        real_run.wait()


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie nobody reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# ---- the simulated dispatcher -----------------------------------------------------------


async def _add(store: Store, name: str, **fields) -> None:
    fields.setdefault("command", ["sh", "-c", "exit 99"])
    await store.add_task(build_spec({"name": name, **fields}, T0), T0)


@pytest.fixture
async def recorded(tmp_path):
    """A real database with tasks and their recorded history, closed again."""
    db = tmp_path / "real.db"
    store = await Store.open(db)
    await _add(store, "steady", every="10m")
    await _add(store, "flaky", every="10m")
    await _add(store, "fresh", every="10m")
    await _add(store, "slow", every="10m", timeout="30s")
    await store.close()
    add_history(db, "steady", [("succeeded", s, 0) for s in (2, 3, 7)] + [("failed", 9, 1)])
    flaky = [("succeeded", 5, 0)] * 4 + [("failed", 5, 4)] * 5 + [("failed", 5, 2)]
    add_history(db, "flaky", flaky)
    add_history(db, "slow", [("succeeded", 120, 0)])
    return db


def test_profiles_are_the_median_duration_and_success_rate(recorded):
    with TimeLapse(recorded, 60) as lapse:
        profiles = lapse.profiles
    assert profiles["steady"] == Profile(5 * MICROS, 0.75, 1, 4)  # median of 2, 3, 7, 9
    assert profiles["flaky"] == Profile(5 * MICROS, 0.4, 4, 10)
    assert "fresh" not in profiles  # no history: 1 s, succeeds (the default Profile)
    assert Profile() == Profile(MICROS, 1.0, 1, 0)


async def test_simulated_runs_take_the_median_and_end_as_the_rate_says(recorded):
    before = digest(recorded)
    with TimeLapse(recorded, 60) as lapse:
        store = await Store.open(lapse.copy)
        clock = ManualClock(T0)
        dispatcher = SimulatedDispatcher(store, clock, lapse.profiles)
        engine = SchedulerEngine(
            store, dispatcher, clock, EngineConfig(misfire_grace=3600 * MICROS)
        )
        try:
            await engine.start()  # the first slot of every task is now
            for slot in range(20):  # twenty slots of each task, ten minutes apart
                clock.advance(60)  # every simulated run (1 s to 30 s) is over by now
                await wait_for(_settled(engine, store), what="the simulated runs to end")
                if slot < 19:
                    clock.advance(540)
                    await engine.tick(clock.now())
            runs = [o for o in await store.history(None, 1000) if o.id > lapse.baseline]
        finally:
            await engine.stop(grace=0)
            await store.close()
        logs = {p.name: p.read_text() for p in (lapse.copy.parent / "timelapse.db.logs").iterdir()}
    assert digest(recorded) == before
    by_task: dict[str, list] = {}
    for occ in runs:
        by_task.setdefault(occ.task, []).append(occ)
    assert {t: len(v) for t, v in by_task.items()} == {
        "steady": 20,
        "flaky": 20,
        "fresh": 20,
        "slow": 20,
    }
    took = {t: {o.finished_at - o.started_at for o in v} for t, v in by_task.items()}
    assert took == {
        "steady": {5 * MICROS},
        "flaky": {5 * MICROS},
        "fresh": {MICROS},
        "slow": {30 * MICROS},  # the median (2 min) is past its timeout
    }
    for name, rate, code in (("steady", 0.75, 1), ("flaky", 0.4, 4), ("fresh", 1.0, 0)):
        for occ in by_task[name]:
            expected = succeeds(name, occ.id, rate)
            assert occ.state == ("succeeded" if expected else "failed"), (name, occ.id)
            assert occ.exit_code == (0 if expected else code)
    flaky_ok = sum(o.state == "succeeded" for o in by_task["flaky"])
    assert 0 < flaky_ok < 20  # both outcomes happen
    assert {o.state for o in by_task["fresh"]} == {"succeeded"}
    assert {(o.state, o.error_code) for o in by_task["slow"]} == {("failed", "TIMEOUT")}
    occ = by_task["flaky"][0]
    assert "simulated run (time-lapse): the command was not run" in logs[f"{occ.id}.log"]
    assert occ.log_path and occ.log_path.endswith(f"{occ.id}.log")


def _settled(engine: SchedulerEngine, store: Store):
    async def check() -> bool:
        await engine.reconcile()
        return not await store.active_occurrences()

    return check


async def test_cancel_and_shutdown_end_simulated_runs(recorded):
    with TimeLapse(recorded, 60) as lapse:
        store = await Store.open(lapse.copy)
        clock = ManualClock(T0 - 60 * MICROS)  # before the first slot: nothing is due
        dispatcher = SimulatedDispatcher(store, clock, {"steady": Profile(3600 * MICROS)})
        engine = SchedulerEngine(store, dispatcher, clock, EngineConfig())
        try:
            await engine.start()
            first = await engine.run_now("steady")
            assert first.state == "running" and dispatcher.active() == 1
            assert await engine.cancel(first.id) is True
            assert await engine.cancel(first.id) is False  # nothing left to cancel
            done = await store.get_occurrence(first.id)
            assert (done.state, done.detail) == ("cancelled", "cancelled_by_user")
            assert dispatcher.active() == 0
            second = await engine.run_now("steady")
            await engine.stop(grace=0)
            stopped = await store.get_occurrence(second.id)
            assert (stopped.state, stopped.detail) == ("cancelled", "engine_stopped")
            clock.advance(7200)  # the cancelled runs' ends pass: nothing more is recorded
            await asyncio.sleep(0.2)
            assert (await store.get_occurrence(first.id)).state == "cancelled"
        finally:
            await engine.stop(grace=0)
            await store.close()


async def test_the_fence_stops_the_rest_of_the_batch(recorded):
    with TimeLapse(recorded, 60) as lapse:
        store = await Store.open(lapse.copy)
        clock = ManualClock(T0)
        dispatcher = SimulatedDispatcher(store, clock, lapse.profiles)
        try:
            task = await store.get_task("steady")
            occs = (await store.history("steady", 3))[:3]
            answers = iter([True, False, True])

            async def fence() -> bool:
                return next(answers)

            results = await dispatcher.dispatch([Job(task, o) for o in occs], fence)
            assert isinstance(results[0], Receipt)
            assert results[1:] == [NotStarted("lease lost"), NotStarted("lease lost")]
            assert dispatcher.active() == 1
            await dispatcher.shutdown(0)
            assert dispatcher.active() == 0
        finally:
            await store.close()


# ---- the dashboard and the ticker --------------------------------------------------------


def _args(scale: float, real: bool = False) -> argparse.Namespace:
    return argparse.Namespace(time_scale=scale, real_commands=real)


async def test_dashboard_time_lapse_uses_a_copy_with_simulated_runs(
    recorded, tmp_path, monkeypatch
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    before, files = digest(recorded), beside(recorded)
    with dashboard_session(_args(600), Settings(), recorded, demo=False) as session:
        assert session.path.parent.parent == scratch
        assert session.path.parent.name.startswith(TEMP_PREFIX)
        assert oct(session.path.parent.stat().st_mode & 0o777) == "0o700"
        assert oct(session.path.stat().st_mode & 0o777) == "0o600"
        host = await session.factory()
        try:
            assert isinstance(host.engine.dispatcher, SimulatedDispatcher)
            assert isinstance(host.ticker.bus, MemoryBus)
            await host.start()

            async def ran() -> bool:
                return any(o.state == "failed" for o in await host.store.history("flaky", 50))

            await wait_for(ran, timeout=20, what="a simulated run of flaky")
        finally:
            await host.close(grace=0)
    assert digest(recorded) == before and beside(recorded) == files
    assert list(scratch.iterdir()) == []


async def test_dashboard_real_commands_and_demo_keep_the_subprocess_dispatcher(
    recorded, tmp_path, monkeypatch
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    for args, demo in ((_args(600, real=True), False), (_args(600), True), (_args(1), False)):
        with dashboard_session(args, Settings(), recorded, demo=demo) as session:
            assert (session.path == recorded) is (args.time_scale == 1 and not demo)
            host = await session.factory()
            try:
                assert isinstance(host.engine.dispatcher, SubprocessDispatcher)
            finally:
                await host.close(grace=0)
        assert list(scratch.iterdir()) == []


def test_time_lapse_ticks_stay_in_the_process(tmp_path, caplog):
    async def build(clock):
        store = await Store.open(tmp_path / "t.db")
        config = dataclasses.replace(
            Settings().ticker, kafka_bootstrap="localhost:1", valkey_url="redis://localhost:1/0"
        )
        try:
            return build_ticker_for(store, clock, config)
        finally:
            await store.close()

    with caplog.at_level(logging.INFO, logger="tickui"):
        lapse = asyncio.run(build(ScaledClock(60)))
    assert isinstance(lapse.bus, MemoryBus)
    assert isinstance(lapse.sequence.store, SqliteSequenceStore)
    assert [r.getMessage() for r in caplog.records if "time-lapse" in r.getMessage()] == [
        "time-lapse: ticks go to an in-process bus, not Kafka; "
        "tick sequence numbers stay in the copy, not in Valkey"
    ]
    real = asyncio.run(build(SystemClock()))
    assert not isinstance(real.bus, MemoryBus)
    assert not isinstance(real.sequence.store, SqliteSequenceStore)


@pytest.mark.slow
def test_dashboard_time_lapse_in_a_terminal_and_sigterm_removes_the_copy(tmux, tmp_path):
    db = tmp_path / "real" / "tickui.db"
    marks = tmp_path / "marks"
    marks.mkdir()
    cmd = ["--", "sh", "-c", MARK.format(dir=marks)]
    assert cli("task", "add", "minutely", "--every", "1m", *cmd, db=db).returncode == 0
    before, files = digest(db), beside(db)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    command = (
        f"exec env TERM=xterm-256color TMPDIR={scratch} {sys.executable} -m tickui "
        f"--db {db} --time-scale 600"
    )
    tmux("new-session", "-d", "-s", "ui", "-x", "120", "-y", "40", command)
    pid = int(tmux("display", "-p", "-t", "ui", "#{pane_pid}").strip())

    deadline = time.monotonic() + 30
    while "succeeded" not in tmux("capture-pane", "-p", "-t", "ui"):
        assert time.monotonic() < deadline, tmux("capture-pane", "-p", "-t", "ui")
        time.sleep(0.1)
    (folder,) = scratch.iterdir()
    assert folder.name.startswith(TEMP_PREFIX)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while list(scratch.iterdir()) or _running(pid):
        assert time.monotonic() < deadline, "the dashboard did not end and clean up"
        time.sleep(0.1)
    assert list(marks.iterdir()) == []
    assert digest(db) == before and beside(db) == files
