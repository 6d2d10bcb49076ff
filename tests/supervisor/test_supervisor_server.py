"""Run supervisors forked by a supervisor server: real server, supervisors and commands;
the server killed, the runner's loop frozen, the command's environment and cwd."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tickui.dispatch.process import ProcessRunner, open_gate
from tickui.model.occurrence import RUN_COMPLETED, RUN_FAILED
from tickui.supervisor import journal as j
from tickui.supervisor.client import ForkUnknown, ServedProcess, SupervisorServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

PATH = os.environ.get("PATH", os.defpath)


async def spawn(runner: ProcessRunner, tmp_path: Path, key: int, script: str, **kw):
    return await runner.spawn(
        key,
        ["sh", "-c", script],
        cwd=kw.pop("cwd", str(tmp_path)),
        env=kw.pop("env", {"PATH": PATH}),
        log_path=tmp_path / f"run-{key}.log",
        **kw,
    )


async def ended(runner: ProcessRunner, run) -> tuple[str, dict]:
    await runner.wait(run, None)
    await runner.finish(run)
    return runner.outcome(run, None, False)


def journal_of(run) -> dict:
    return j.read_journal(str(run.journal_path)) or {}


async def test_concurrent_spawns_get_their_own_pids_and_statuses(tmp_path):
    runner = ProcessRunner()
    try:
        runs = await asyncio.gather(
            *(spawn(runner, tmp_path, k, f"echo {k}; exit {k % 7}") for k in range(60))
        )
        outcomes = await asyncio.gather(*(ended(runner, run) for run in runs))
        assert all(isinstance(run.process, ServedProcess) for run in runs)
        assert len({run.process.pid for run in runs}) == len(runs)
        for run, (_kind, payload) in zip(runs, outcomes, strict=True):
            assert journal_of(run)["supervisor"]["pid"] == run.process.pid
            assert run.process.returncode == run.key % 7
            assert payload["exit_code"] == run.key % 7
            assert run.log_path.read_text() == f"{run.key}\n"
    finally:
        await runner.shutdown()


async def test_runs_outlive_a_killed_server_and_the_next_spawn_gets_a_new_one(tmp_path):
    runner = ProcessRunner()
    try:
        going = [await spawn(runner, tmp_path, k, f"sleep 1; exit {k}") for k in range(3)]
        server = runner.server
        assert server is not None
        os.kill(server.process.pid, signal.SIGKILL)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(ended(runner, run) for run in going)), 20
        )
        assert outcomes[0][0] == RUN_COMPLETED
        for run, (kind, payload) in zip(going[1:], outcomes[1:], strict=True):
            assert (kind, payload["exit_code"], payload["error_code"]) == (
                RUN_FAILED,
                run.key,
                "EXIT_NONZERO",
            )
        assert not server.alive
        if runner.containment.subreaper:  # they were re-parented here: their own statuses
            assert [run.process.returncode for run in going] == [0, 1, 2]
        after = await spawn(runner, tmp_path, 10, "exit 4")
        assert isinstance(after.process, ServedProcess)
        assert runner.server is not server and runner.server.process.pid != server.process.pid
        kind, payload = await asyncio.wait_for(ended(runner, after), 20)
        assert (kind, payload["exit_code"], after.process.returncode) == (RUN_FAILED, 4, 4)
    finally:
        await runner.shutdown()


async def test_runs_end_while_the_runner_does_not_read_the_server(tmp_path):
    runner = ProcessRunner()
    try:
        runs = [await spawn(runner, tmp_path, k, f"exit {k % 3}", gated=True) for k in range(40)]
        for run in runs:
            open_gate(run)
        # the loop is frozen from here: the server's replies wait in the socket
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(journal_of(run).get("state") == j.ENDED for run in runs):
                break
            time.sleep(0.05)
        assert all(journal_of(run).get("state") == j.ENDED for run in runs)
        assert all(run.process.returncode is None for run in runs)  # nothing read yet
        outcomes = await asyncio.wait_for(asyncio.gather(*(ended(runner, run) for run in runs)), 20)
        assert [p["exit_code"] for _, p in outcomes] == [k % 3 for k in range(40)]
        assert [run.process.returncode for run in runs] == [k % 3 for k in range(40)]
        later = await spawn(runner, tmp_path, 99, "exit 0")
        assert (await ended(runner, later))[0] == RUN_COMPLETED
    finally:
        await runner.shutdown()


async def test_the_command_gets_exactly_the_given_environment_and_cwd(tmp_path, monkeypatch):
    monkeypatch.setenv("TICKUI_SERVER_ONLY", "not for the command")
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    env = {"PATH": PATH, "SPACED": "a b  c", "EMPTY": "", "LC_ALL": "C", "UNI": "é"}
    runner = ProcessRunner()
    try:
        run = await runner.spawn(
            1, ["env"], cwd=str(workdir), env=env, log_path=tmp_path / "env.log"
        )
        where = await runner.spawn(
            2, ["pwd"], cwd=str(workdir), env=env, log_path=tmp_path / "pwd.log"
        )
        assert isinstance(run.process, ServedProcess)
        assert (await ended(runner, run))[0] == RUN_COMPLETED
        assert (await ended(runner, where))[0] == RUN_COMPLETED
    finally:
        await runner.shutdown()
    lines = (tmp_path / "env.log").read_text(encoding="utf-8").splitlines()
    assert sorted(lines) == sorted(f"{k}={v}" for k, v in env.items())
    assert (tmp_path / "pwd.log").read_text() == f"{workdir}\n"


async def test_a_missing_cwd_is_refused_at_spawn_as_without_a_server(tmp_path):
    runner = ProcessRunner()
    try:
        with pytest.raises(FileNotFoundError):
            await spawn(runner, tmp_path, 1, "exit 0", cwd=str(tmp_path / "missing"))
        run = await spawn(runner, tmp_path, 2, "exit 0")
        assert (await ended(runner, run))[0] == RUN_COMPLETED
    finally:
        await runner.shutdown()


async def test_without_a_server_supervisors_are_started_as_programs(tmp_path, monkeypatch, caplog):
    async def refused(cls):
        raise OSError("no server here")

    monkeypatch.setattr(SupervisorServer, "start", classmethod(refused))
    runner = ProcessRunner()
    try:
        with caplog.at_level(logging.WARNING, logger="tickui.dispatch"):
            runs = [await spawn(runner, tmp_path, k, f"exit {k}") for k in range(3)]
        assert not any(isinstance(run.process, ServedProcess) for run in runs)
        outcomes = [await ended(runner, run) for run in runs]
        assert [p["exit_code"] for _, p in outcomes] == [0, 1, 2]
        said = [r for r in caplog.records if "supervisor server" in r.getMessage()]
        assert len(said) == 1
    finally:
        await runner.shutdown()


async def test_a_fork_that_fails_falls_back_to_a_program(tmp_path, monkeypatch):
    runner = ProcessRunner()
    try:
        first = await spawn(runner, tmp_path, 1, "exit 0")
        assert isinstance(first.process, ServedProcess)

        async def fails(*args, **kw):
            raise OSError(11, "Resource temporarily unavailable")

        monkeypatch.setattr(runner.server, "fork", fails)
        second = await spawn(runner, tmp_path, 2, "exit 3")
        assert not isinstance(second.process, ServedProcess)
        assert (await ended(runner, first))[0] == RUN_COMPLETED
        assert (await ended(runner, second))[1]["exit_code"] == 3
    finally:
        await runner.shutdown()


async def test_the_server_ends_when_its_runner_closes_and_leaves_runs_going(tmp_path):
    runner = ProcessRunner()
    run = await spawn(runner, tmp_path, 1, "sleep 1; exit 5")
    server = runner.server
    assert server is not None
    await server.close()  # EOF: the server ends, the run does not
    assert server.process.returncode == 0
    kind, payload = await asyncio.wait_for(ended(runner, run), 20)
    assert (kind, payload["exit_code"]) == (RUN_FAILED, 5)
    await runner.shutdown()


async def test_a_stuck_server_is_replaced_and_its_run_started_once(tmp_path, monkeypatch):
    monkeypatch.setattr("tickui.supervisor.client.REPLY_WAIT", 0.5)
    runner = ProcessRunner()
    try:
        first = await spawn(runner, tmp_path, 1, "exit 0")
        stuck = runner.server
        assert stuck is not None
        os.kill(stuck.process.pid, signal.SIGSTOP)
        run = await spawn(runner, tmp_path, 2, "echo once >> twice.txt; exit 6")
        assert not isinstance(run.process, ServedProcess)  # started as a program
        assert not stuck.alive and await stuck.process.wait() == -signal.SIGKILL
        assert (await ended(runner, first))[0] == RUN_COMPLETED
        assert (await ended(runner, run))[1]["exit_code"] == 6
        assert (tmp_path / "twice.txt").read_text() == "once\n"
        after = await spawn(runner, tmp_path, 3, "exit 0")
        assert isinstance(after.process, ServedProcess) and runner.server is not stuck
        assert (await ended(runner, after))[0] == RUN_COMPLETED
    finally:
        await runner.shutdown()


async def test_a_server_gone_after_forking_leaves_no_second_supervisor_beside_its_one(
    tmp_path, monkeypatch
):
    """The server ends after it was asked and before it answered, having forked (here: a
    process that holds the run's gate, as a forked supervisor would): no supervisor is
    started beside it on the same gate and journal; the run fails at spawn, in one line,
    and its command never runs."""
    runner = ProcessRunner()
    held: list[subprocess.Popen] = []
    try:
        first = await spawn(runner, tmp_path, 1, "exit 0")
        assert isinstance(first.process, ServedProcess)

        async def forked_then_gone(args, env, fds):
            held.append(subprocess.Popen(["sleep", "30"], stdin=fds[0]))
            raise ForkUnknown("the supervisor server has ended")

        monkeypatch.setattr(runner.server, "fork", forked_then_gone)
        with pytest.raises(OSError, match="its supervisor server ended while forking it"):
            await spawn(runner, tmp_path, 2, "echo ran > ran.txt")
        assert (await ended(runner, first))[0] == RUN_COMPLETED
        assert not (tmp_path / "ran.txt").exists()
        assert not (tmp_path / "run-2.journal").exists()  # no supervisor of its own
    finally:
        for process in held:
            process.kill()
            process.wait()
        await runner.shutdown()


async def test_a_server_gone_before_forking_has_its_run_started_as_a_program(tmp_path, monkeypatch):
    """Gone after it was asked, having forked nothing (no process holds the gate): the
    run's supervisor is started as a program, and the run runs once."""
    runner = ProcessRunner()
    try:
        await ended(runner, await spawn(runner, tmp_path, 1, "exit 0"))

        async def gone(args, env, fds):
            raise ForkUnknown("the supervisor server has ended")

        monkeypatch.setattr(runner.server, "fork", gone)
        run = await spawn(runner, tmp_path, 2, "echo ran >> ran.txt; exit 4")
        assert not isinstance(run.process, ServedProcess)
        assert (await ended(runner, run))[1]["exit_code"] == 4
        assert (tmp_path / "ran.txt").read_text() == "ran\n"
    finally:
        await runner.shutdown()
