"""One run that cannot be started or watched fails alone; the rest of the batch, the
scan loop and `stop()` go on. Real processes, real SQLite files, a manual clock."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import sqlite3
import time

from helpers import T0, rig
from tickui.dispatch import DispatchFailure, Job, NotStarted, Receipt, SubprocessDispatcher
from tickui.model.records import Occurrence

HEALTHY = ("alpha", "bravo", "delta")


def _plant(db, name: str, **changes) -> None:
    """Rewrite a stored definition behind tickui's back, as an older tickui or a hand edit
    could have left it (`task add` refuses such values now)."""
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT spec FROM tasks WHERE name = ?", (name,)).fetchone()
        spec = json.loads(row[0])
        spec.update(changes)
        with conn:
            conn.execute("UPDATE tasks SET spec = ? WHERE name = ?", (json.dumps(spec), name))
    finally:
        conn.close()


async def _batch_with(tmp_path, name: str, **bad) -> tuple[dict[str, list[Occurrence]], float]:
    """Three healthy tasks and one bad one (added between them, so it sits mid-batch), run
    for three slots; returns each task's history and how long `stop()` took."""
    db = tmp_path / "t.db"
    out = tmp_path / "out.txt"
    async with rig(db) as r:
        for task in (HEALTHY[0], HEALTHY[1], name, HEALTHY[2]):
            await r.add(task, every="1m", command=["sh", "-c", f"echo {task} >> {out}"])
        _plant(db, name, **bad)
        await r.engine.start()
        await r.settle()
        for _ in range(2):
            await r.tick(60)
            await r.settle()
        began = time.monotonic()
        await asyncio.wait_for(r.engine.stop(), 10)
        stopped = time.monotonic() - began
        by_task: dict[str, list[Occurrence]] = {}
        for occ in await r.history():
            by_task.setdefault(occ.task, []).append(occ)
    lines = out.read_text().split()
    assert sorted(lines) == sorted(HEALTHY * 3), lines
    for task in HEALTHY:
        runs = by_task[task]
        assert [o.scheduled_for for o in runs] == [T0, T0 + 60_000_000, T0 + 120_000_000]
        assert {o.state for o in runs} == {"succeeded"}, [(o.state, o.detail) for o in runs]
        assert all(o.started_at and o.pid for o in runs), "a started run's transition is lost"
    bad_runs = by_task[name]
    assert len(bad_runs) == 3, "a failed start must not make later slots skip"
    for occ in bad_runs:
        assert occ.state == "failed" and occ.error_code == "DISPATCH_FAILED", occ
        assert occ.started_at is None and occ.pid is None
    return by_task, stopped


async def test_nul_in_argv_fails_alone_beside_healthy_runs(tmp_path):
    by_task, stopped = await _batch_with(tmp_path, "charlie", command=["ec\x00ho", "hi"])
    detail = by_task["charlie"][0].detail
    assert detail.startswith("ec\\x00ho: ValueError:") and "null" in detail, detail
    assert stopped < 2, f"stop() took {stopped:.1f}s"


async def test_nul_in_an_argument_fails_alone(tmp_path):
    by_task, _ = await _batch_with(tmp_path, "charlie", command=["echo", "a\x00b"])
    assert by_task["charlie"][0].detail.startswith("echo: ValueError:")


async def test_env_name_with_equals_sign_fails_alone(tmp_path):
    by_task, stopped = await _batch_with(tmp_path, "charlie", command=["true"], env={"A=B": "1"})
    detail = by_task["charlie"][0].detail
    assert detail.startswith("true: ValueError:") and "environment" in detail, detail
    assert stopped < 2


async def test_nul_in_env_value_fails_alone(tmp_path):
    by_task, _ = await _batch_with(tmp_path, "charlie", command=["true"], env={"A": "x\x00y"})
    assert "ValueError" in by_task["charlie"][0].detail


async def test_vanished_cwd_fails_alone(tmp_path):
    gone = tmp_path / "gone"
    by_task, _ = await _batch_with(tmp_path, "charlie", command=["true"], cwd=str(gone))
    detail = by_task["charlie"][0].detail
    assert detail == f"true: working directory {gone}: No such file or directory", detail


async def test_missing_executable_fails_alone(tmp_path):
    missing = str(tmp_path / "no-such-program")
    by_task, _ = await _batch_with(tmp_path, "charlie", command=[missing, "x"])
    assert by_task["charlie"][0].detail == f"{missing}: No such file or directory"


async def test_unopenable_log_file_fails_that_run_only(tmp_path):
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("first", every="1m", command=["true"])
        await r.add("second", every="1m", command=["true"])
        # occurrence 1 is "first"'s: a directory where its log file would go
        (r.store.log_dir / "1.log").mkdir(parents=True)
        await r.engine.start()
        await r.settle()
        by_task = {o.task: o for o in await r.history()}
    assert by_task["first"].id == 1
    assert by_task["first"].error_code == "DISPATCH_FAILED"
    assert "Is a directory" in by_task["first"].detail
    assert by_task["second"].state == "succeeded"


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def test_failed_starts_leak_no_descriptors(tmp_path):
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("nul", every="1m", command=["true"])
        await r.add("env", every="1m", command=["true"])
        await r.add("missing", every="1m", command=[str(tmp_path / "nope")])
        await r.add("fine", every="1m", command=["true"])
        _plant(db, "nul", command=["tr\x00ue"])
        _plant(db, "env", env={"A=B": "1"})
        await r.engine.start()
        await r.settle()
        before = _open_fds()
        for _ in range(10):
            await r.tick(60)
            await r.settle()
        after = _open_fds()
        assert after <= before, f"descriptors left open: {sorted(after - before)}"
        runs = await r.history()
        assert len(runs) == 44
        assert sum(o.error_code == "DISPATCH_FAILED" for o in runs) == 33


def _job(task, occ_id: int) -> Job:
    occ = Occurrence(
        occ_id, task.id, task.name, "scheduled", T0, "claimed", T0, command_id=f"cmd-{occ_id}"
    )
    return Job(task, occ)


async def test_out_of_descriptors_fails_the_run_and_closes_what_it_opened(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("x", every="1h", command=["true"])
        task = await r.store.get_task("x")
        dispatcher = SubprocessDispatcher(r.store, r.clock)
        r.store.log_dir.mkdir(parents=True, exist_ok=True)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        before = _open_fds()
        fillers = []  # take every free number below the highest open one
        while (fd := os.open(os.devnull, os.O_RDONLY)) < max(int(n) for n in before):
            fillers.append(fd)
        os.close(fd)
        # exactly one descriptor left: room for the log file, none for the pipe (EMFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd + 1, hard))
        try:
            results = await dispatcher.dispatch([_job(task, 901)])
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            for filler in fillers:
                os.close(filler)
        await dispatcher.shutdown(5)
        assert _open_fds() <= before
        assert results == [DispatchFailure("DISPATCH_FAILED", "true: Too many open files")]
        assert not (r.store.log_dir / "901.log").exists()
        assert dispatcher.active() == 0


async def test_fence_is_asked_before_each_start_and_no_stops_the_rest(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("x", every="1h", command=["sleep", "0.1"])
        task = await r.store.get_task("x")
        dispatcher = SubprocessDispatcher(r.store, r.clock)
        asked: list[int] = []

        async def may_start() -> bool:
            asked.append(dispatcher.active())  # how many had started when asked
            return len(asked) <= 4

        results = await dispatcher.dispatch([_job(task, i) for i in range(1, 6)], may_start)
        # Asked before each fork and again after it, just before the command may run.
        assert asked == [0, 1, 1, 2, 2]
        assert [type(x) for x in results] == [Receipt, Receipt, NotStarted, NotStarted, NotStarted]
        assert results[2:] == [NotStarted("lease lost")] * 3

        async def broken() -> bool:
            raise RuntimeError("store gone")

        results = await dispatcher.dispatch([_job(task, i) for i in range(6, 8)], broken)
        assert all(isinstance(x, NotStarted) and "store gone" in x.reason for x in results)
        await dispatcher.shutdown(5)
        assert dispatcher.active() == 0


async def test_outcome_waits_out_a_locked_database_and_is_recorded(tmp_path, caplog):
    db = tmp_path / "t.db"
    release = tmp_path / "release"
    async with rig(db) as r:
        await r.add(
            "job",
            every="1h",
            command=["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.02; done; echo done"],
        )
        await r.engine.start()
        assert (await r.history())[0].state == "running"
        dispatcher = r.engine.dispatcher
        await r.store._conn.execute("PRAGMA busy_timeout = 50")
        blocker = sqlite3.connect(db, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the database
        try:
            with caplog.at_level(logging.WARNING, logger="tickui.dispatch"):
                release.touch()
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 10
                while dispatcher.recording_problem is None and loop.time() < deadline:
                    await asyncio.sleep(0.02)
                assert "locked" in (dispatcher.recording_problem or "")
                await asyncio.sleep(0.6)  # several retries against the lock
                assert dispatcher.active() == 0  # the run is over, its outcome kept
        finally:
            blocker.execute("COMMIT")
            blocker.close()
        await r.settle()
        occ = (await r.history())[0]
        assert occ.state == "succeeded" and occ.exit_code == 0
        assert dispatcher.recording_problem is None
        warnings = [m.getMessage() for m in caplog.records if "cannot record" in m.getMessage()]
        assert len(warnings) == 1, warnings


async def test_outbox_keeps_order_and_retries_with_backoff(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("job", every="1h", command=["sh", "-c", "exit 4"])
        real = r.store.append_events
        failures = {"left": 6, "calls": 0}

        async def flaky(events):
            failures["calls"] += 1
            if failures["left"]:
                failures["left"] -= 1
                raise sqlite3.OperationalError("database or disk is full")
            await real(events)

        r.store.append_events = flaky
        await r.engine.start()  # the transition and the outcome both go to the outbox
        await r.settle()
        occ = (await r.history())[0]
        assert occ.state == "failed" and occ.error_code == "EXIT_NONZERO"
        assert occ.started_at is not None and occ.pid is not None, "transition lost"
        assert failures["left"] == 0
