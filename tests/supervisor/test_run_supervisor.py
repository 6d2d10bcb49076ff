"""The run supervisor keeps a run's gate, output, end and lease without the process that
started it: real supervisors, commands, parents frozen and killed, no fakes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tickui.common.boundedlog import BoundedLog
from tickui.dispatch.process import ProcessRunner
from tickui.supervisor import journal as j
from tickui.supervisor.launch import supervisor_argv
from tickui.supervisor.lease import read_lease, write_lease
from tickui.supervisor.main import (
    EXIT_NOT_STARTED,
    EXIT_START_FAILED,
    LEASE_CHECK,
    ended_by_itself,
)
from tickui.supervisor.tree import survives_term

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

HEAD, TAIL = 64 * 1024, 1024 * 1024
# Slack on top of a fence's own bound (deadline + LEASE_CHECK + grace) for a loaded
# 2-core machine: waking up, scanning /proc, the signalled processes exiting.
TOLERANCE = 0.6


def until(predicate, timeout: float = 5.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def gone(pid: int, start: int | None) -> bool:
    """The process that started at `start` no longer runs (exited or a zombie)."""
    now = j.start_ticks(pid)
    return now is None or now != start


class Run:
    """One supervised run in `tmp_path`: the supervisor's process, its files."""

    def __init__(self, tmp_path: Path, argv: list[str], **options) -> None:
        self.dir = tmp_path
        self.journal = tmp_path / "run.json"
        self.log = tmp_path / "run.log"
        self.argv = supervisor_argv(argv, journal=self.journal, log=self.log, **options)
        self.proc: subprocess.Popen | None = None

    def spawn(self, go: bool = True) -> Run:
        # in the test's own session and group: the supervisor leaves them itself
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, cwd=self.dir)
        if go:
            self.go()
        return self

    def go(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()

    def record(self) -> dict:
        return j.read_journal(str(self.journal)) or {}

    def state(self) -> str | None:
        return self.record().get("state")

    def wait_state(self, *states: str, timeout: float = 5.0) -> dict:
        until(lambda: self.state() in states, timeout, f"the journal to say {states}")
        return self.record()

    def wait(self, timeout: float = 8.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def runs():
    started: list[Run] = []
    yield started
    for run in started:
        command = run.record().get("command") or {}
        if command.get("pid") and not gone(command["pid"], command.get("start")):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(command["pid"], signal.SIGKILL)
        run.kill()


def supervised(runs, tmp_path, argv, go=True, **options) -> Run:
    run = Run(tmp_path, argv, **options)
    runs.append(run)
    return run.spawn(go)


# ---- gate, exit, output ------------------------------------------------------------------


def test_gate_closed_first_means_125_and_the_command_never_ran(runs, tmp_path):
    run = supervised(runs, tmp_path, ["touch", str(tmp_path / "ran")], go=False)
    assert run.wait_state(j.WAITING)["supervisor"]["pid"] == run.proc.pid
    assert os.getsid(run.proc.pid) == run.proc.pid != os.getsid(0)  # left its starter's
    assert j.verdict(run.record()) == j.WAITING
    run.proc.stdin.close()
    assert run.wait() == EXIT_NOT_STARTED
    record = run.record()
    assert record["state"] == j.NOT_STARTED and record["reason"] == "gate_closed"
    assert record["status"] == EXIT_NOT_STARTED and "command" not in record
    assert j.verdict(record) == j.NOT_STARTED
    assert not (tmp_path / "ran").exists()


def test_cancel_at_the_gate_means_125_unrun(runs, tmp_path):
    run = supervised(runs, tmp_path, ["touch", str(tmp_path / "ran")], go=False)
    run.wait_state(j.WAITING)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait() == EXIT_NOT_STARTED
    assert run.record()["reason"] == "cancelled"
    assert not (tmp_path / "ran").exists()


def test_a_command_that_cannot_start_is_told_apart_from_its_exit_127(runs, tmp_path):
    run = supervised(runs, tmp_path, [str(tmp_path / "missing")])
    assert run.wait() == EXIT_START_FAILED
    record = run.record()
    assert record["state"] == j.START_FAILED
    assert record["error"] == f"{tmp_path / 'missing'}: No such file or directory"
    (tmp_path / "plain").write_text("not a program")
    again = supervised(runs, tmp_path, [str(tmp_path / "plain")])
    assert again.wait() == EXIT_START_FAILED
    assert again.record()["error"].endswith("Permission denied")


def test_a_log_that_cannot_be_opened_means_122_unrun(runs, tmp_path):
    run = Run(tmp_path, ["touch", str(tmp_path / "ran")])
    run.argv[run.argv.index("--log") + 1] = str(tmp_path / "no" / "such" / "dir.log")
    runs.append(run.spawn())
    assert run.wait() == EXIT_START_FAILED
    record = run.record()
    assert record["state"] == j.START_FAILED and "No such file or directory" in record["error"]
    assert not (tmp_path / "ran").exists()


def test_a_malformed_command_line_is_refused(tmp_path):
    argv = supervisor_argv([], journal=tmp_path / "j", log=tmp_path / "l")
    out = subprocess.run(argv, input=b"go\n", capture_output=True, timeout=10)
    assert out.returncode == 2 and b"a command after --" in out.stderr
    assert not (tmp_path / "j").exists()


def test_exit_code_and_times_are_recorded(runs, tmp_path):
    before = time.time_ns() // 1000
    run = supervised(runs, tmp_path, ["sh", "-c", "sleep 0.2; exit 7"])
    assert run.wait() == 7
    after = time.time_ns() // 1000
    record = run.record()
    assert record["state"] == j.ENDED and j.verdict(record) == j.ENDED
    assert (record["exit_code"], record["signal"], record["status"]) == (7, None, 7)
    assert not record["fenced"] and not record["cancelled"]
    started, ended = record["command"]["started_us"], record["ended_us"]
    assert before <= started < ended <= after
    assert ended - started >= 200_000


def test_death_by_signal_is_recorded(runs, tmp_path):
    run = supervised(runs, tmp_path, ["sh", "-c", "kill -USR1 $$"])
    assert run.wait() == 128 + signal.SIGUSR1
    record = run.record()
    assert (record["exit_code"], record["signal"]) == (None, signal.SIGUSR1)
    assert record["ended_us"] >= record["command"]["started_us"]


def test_the_command_gets_the_environment_as_given(runs, tmp_path):
    """Not the interpreter's version of it (Python coerces a C locale to LC_CTYPE=C.UTF-8)."""
    run = Run(tmp_path, ["env"])
    runs.append(run)
    env = {"PATH": os.environ["PATH"], "TICKUI_OCCURRENCE_ID": "7", "PYTHONPATH": "/nowhere"}
    run.proc = subprocess.Popen(run.argv, stdin=subprocess.PIPE, cwd=tmp_path, env=env)
    run.go()
    assert run.wait() == 0
    assert sorted(run.log.read_text().splitlines()) == sorted(f"{k}={v}" for k, v in env.items())


def _tickui_log(argv: list[str], path: Path) -> bytes:
    """The log tickui's own process runner writes for `argv`."""

    async def go() -> None:
        runner = ProcessRunner(kill_grace=1.0, head_bytes=HEAD, tail_bytes=TAIL)
        run = await runner.spawn(1, argv, cwd=str(path.parent), env=dict(os.environ), log_path=path)
        await runner.wait(run, None)
        await runner.finish(run)
        await runner.shutdown()

    asyncio.run(go())
    return path.read_bytes()


def test_10_mb_of_output_and_stderr_land_in_the_log_as_tickui_keeps_them(runs, tmp_path):
    script = "echo START; head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END >&2"
    argv = ["sh", "-c", script]
    run = supervised(runs, tmp_path, argv, head=HEAD, tail=TAIL)
    assert run.wait() == 0
    data = run.log.read_bytes()
    marker = re.search(rb"\n\[tickui: [0-9.]+ MiB of output dropped here \((\d+) bytes\)\]\n", data)
    assert marker and marker.start() == HEAD
    assert int(marker[1]) == len("START\n") + 10_000_000 + len("\nEND\n") - HEAD - TAIL
    assert data[:HEAD] == b"START\n" + b"x" * (HEAD - 6)
    assert data[-TAIL:] == b"x" * (TAIL - 5) + b"\nEND\n"
    assert data == _tickui_log(argv, tmp_path / "tickui.log")


# ---- the starter frozen or killed ------------------------------------------------------

PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(b"go\\n")
    proc.stdin.flush()
    print(proc.pid, flush=True)
    time.sleep(60)
    """
)


def _parent(run: Run) -> subprocess.Popen:
    """A small tickui stand-in that starts the supervisor (holding its gate and its
    stderr pipe) and then does nothing."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, *run.argv],
        stdout=subprocess.PIPE,
        cwd=run.dir,
        start_new_session=True,
    )
    assert parent.stdout is not None
    assert int(parent.stdout.readline()) > 0
    return parent


def test_a_frozen_starter_does_not_stop_the_run_nor_its_output(runs, tmp_path):
    lines = 20_000  # 20,000 lines written after the freeze: more than a pipe holds
    script = f"sleep 0.3; seq 1 {lines}; echo to stderr >&2; sleep 0.2; exit 3"
    run = Run(tmp_path, ["sh", "-c", script])
    runs.append(run)
    parent = _parent(run)
    try:
        run.wait_state(j.RUNNING)
        os.kill(parent.pid, signal.SIGSTOP)
        record = run.wait_state(j.ENDED)
        assert parent.poll() is None  # still frozen: it did nothing for the run
        assert (record["exit_code"], record["status"]) == (3, 3)
        expected = "".join(f"{i}\n" for i in range(1, lines + 1)) + "to stderr\n"
        assert run.log.read_text() == expected
        sup = record["supervisor"]
        until(lambda: gone(sup["pid"], sup["start"]), what="the supervisor to exit")
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        os.kill(parent.pid, signal.SIGCONT)
        parent.wait()


def test_a_killed_starter_leaves_the_run_going_until_its_lease_ends(runs, tmp_path):
    deadline = time.monotonic() + 1.5
    write_lease(str(tmp_path / "lease"), deadline)
    script = "until [ -e starter-gone ]; do sleep 0.01; done; echo alive; exec sleep 30"
    run = Run(tmp_path, ["sh", "-c", script], lease=tmp_path / "lease", grace=1.0)
    runs.append(run)
    parent = _parent(run)
    command = run.wait_state(j.RUNNING)["command"]
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()
    sup = run.record()["supervisor"]
    (tmp_path / "starter-gone").touch()  # the command goes on, its output is still kept
    until(lambda: run.log.read_text() == "alive\n", what="the command to go on")
    assert time.monotonic() < deadline, "too slow to see the run outlive its starter"
    assert not gone(command["pid"], command["start"]) and not gone(sup["pid"], sup["start"])
    assert j.verdict(run.record()) == j.RUNNING
    record = run.wait_state(j.ENDED, timeout=1.5 + LEASE_CHECK + TOLERANCE + 1)
    ended = time.monotonic()
    assert record["fenced"] and record["signal"] == signal.SIGTERM
    assert deadline <= ended <= deadline + LEASE_CHECK + TOLERANCE
    assert gone(command["pid"], command["start"])


# ---- the lease ---------------------------------------------------------------------------

ESCAPE = "(setsid sh -c 'echo $$ > orphan.pid; exec sleep 30' &); "


def orphan_pid(tmp_path: Path) -> int:
    def written() -> str | None:
        with contextlib.suppress(FileNotFoundError):
            return (tmp_path / "orphan.pid").read_text().strip()
        return None

    return int(until(written, what="the orphan to start"))


def test_an_unrenewed_lease_ends_the_command_and_its_escaped_orphan(runs, tmp_path):
    lease = tmp_path / "lease"
    deadline = time.monotonic() + 1.0
    write_lease(str(lease), deadline)
    run = supervised(runs, tmp_path, ["sh", "-c", ESCAPE + "sleep 30"], lease=lease, grace=1.0)
    command = run.wait_state(j.RUNNING)["command"]
    orphan = orphan_pid(tmp_path)
    orphan_start = j.start_ticks(orphan)
    assert orphan_start is not None
    assert os.getsid(orphan) == orphan  # it left the run's session
    until(lambda: gone(command["pid"], command["start"]), 3, "the command to end")
    until(lambda: gone(orphan, orphan_start), 3, "the orphan to end")
    ended = time.monotonic()
    assert deadline <= ended <= deadline + LEASE_CHECK + TOLERANCE  # both took SIGTERM
    assert run.wait() == 128 + signal.SIGTERM
    record = run.record()
    assert record["fenced"] and not record["cancelled"] and record["signal"] == signal.SIGTERM


def test_a_lease_renewed_every_200_ms_keeps_a_3_s_run_to_its_end(runs, tmp_path):
    lease = str(tmp_path / "lease")
    write_lease(lease, time.monotonic() + 0.5)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.2):
            write_lease(lease, time.monotonic() + 0.5)

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        run = supervised(runs, tmp_path, ["sh", "-c", "sleep 3; echo done"], lease=lease)
        assert run.wait() == 0
    finally:
        stop.set()
        renewer.join()
    record = run.record()
    assert record["exit_code"] == 0 and not record["fenced"]
    assert record["ended_us"] - record["command"]["started_us"] >= 3_000_000
    assert run.log.read_text() == "done\n"


def test_a_command_ignoring_sigterm_is_killed_after_the_grace(runs, tmp_path):
    lease, grace = tmp_path / "lease", 1.0
    deadline = time.monotonic() + 0.5
    write_lease(str(lease), deadline)
    argv = ["sh", "-c", "trap '' TERM; sleep 30"]
    run = supervised(runs, tmp_path, argv, lease=lease, grace=grace)
    command = run.wait_state(j.RUNNING)["command"]
    until(lambda: gone(command["pid"], command["start"]), 4, "the command to end")
    ended = time.monotonic()
    assert deadline + grace <= ended <= deadline + LEASE_CHECK + grace + TOLERANCE
    assert run.wait() == 128 + signal.SIGKILL
    record = run.record()
    assert record["fenced"] and record["signal"] == signal.SIGKILL


def test_a_fenced_command_that_exits_0_on_its_sigterm_is_still_fenced(runs, tmp_path):
    """A command that catches SIGTERM may end cleanly because of it: its exit 0 is not
    taken for an end of its own, and the run is recorded fenced."""
    lease = tmp_path / "lease"
    write_lease(str(lease), time.monotonic() + 0.5)
    argv = ["sh", "-c", "trap 'exit 0' TERM; sleep 30 & wait"]
    run = supervised(runs, tmp_path, argv, lease=lease, grace=1.0)
    assert run.wait() == 0
    record = run.record()
    assert record["exit_code"] == 0 and record["fenced"] and not record["cancelled"]


def test_a_command_that_ended_before_the_signal_to_end_it_keeps_its_own_end():
    """The fence (or a cancel) decided as the command was ending: an exit of its own, not
    by a signal, from a command that could not outlive the SIGTERM (it was ending, or it
    neither catches nor ignores it), is its outcome; else the run was ended."""
    assert ended_by_itself(0, None) and ended_by_itself(0, False) and ended_by_itself(3, False)
    assert not ended_by_itself(0, True)  # it catches SIGTERM: the exit may be its answer
    assert not ended_by_itself(-signal.SIGTERM, False)  # killed
    assert not ended_by_itself(None, None)


def test_whether_a_process_could_outlive_a_sigterm_is_read_from_proc(tmp_path):
    ignoring = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30"])
    catching = subprocess.Popen(["sh", "-c", "trap 'exit 0' TERM; sleep 30"])
    plain = subprocess.Popen(["sleep", "30"])
    ended = subprocess.Popen(["true"])
    try:

        def traps_set() -> bool:  # sh sets its traps just after it starts
            return all(
                b"SigIgn" in Path(f"/proc/{p.pid}/status").read_bytes() and survives_term(p.pid)
                for p in (ignoring, catching)
            )

        until(traps_set, 5, "the shells to set their traps")
        assert not survives_term(plain.pid)
        until(lambda: Path(f"/proc/{ended.pid}/stat").read_bytes().split(b") ")[1][:1] == b"Z",
              5, "the ended process to be a zombie")  # fmt: skip
        assert not survives_term(ended.pid)  # it ended before any signal
        assert survives_term(2**22 + 12345)  # no such process: cannot be told, so assumed
    finally:
        for proc in (ignoring, catching, plain, ended):
            proc.kill()
            proc.wait()


def test_a_missing_lease_file_stands_on_the_initial_deadline(runs, tmp_path):
    deadline = time.monotonic() + 0.6
    run = supervised(
        runs, tmp_path, ["sleep", "30"], lease=tmp_path / "never", lease_deadline=deadline
    )
    assert run.wait() == 128 + signal.SIGTERM
    assert time.monotonic() >= deadline
    assert run.record()["fenced"]


def test_the_owner_fences_at_once_by_writing_0_and_never_with_inf(runs, tmp_path):
    lease = str(tmp_path / "lease")
    write_lease(lease, float("inf"))
    run = supervised(runs, tmp_path, ["sleep", str(3 * LEASE_CHECK)], lease=lease)
    assert run.wait() == 0 and not run.record()["fenced"]
    run = supervised(runs, tmp_path, ["sleep", "30"], lease=lease, grace=1.0)
    run.wait_state(j.RUNNING)
    write_lease(lease, 0)
    revoked = time.monotonic()
    assert run.wait() == 128 + signal.SIGTERM
    assert time.monotonic() - revoked <= LEASE_CHECK + TOLERANCE
    assert run.record()["fenced"]


def test_a_lease_running_out_at_the_gate_means_never_started(runs, tmp_path):
    lease = tmp_path / "lease"
    write_lease(str(lease), time.monotonic() + 0.3)
    run = supervised(runs, tmp_path, ["touch", "ran"], go=False, lease=lease)
    assert run.wait() == EXIT_NOT_STARTED
    assert run.record()["reason"] == "fenced"
    assert not (tmp_path / "ran").exists()


def test_the_lease_file_format(tmp_path):
    path = str(tmp_path / "lease")
    assert read_lease(path) is None
    write_lease(path, 12.5)
    assert Path(path).read_text() == "12.5\n" and read_lease(path) == 12.5
    write_lease(path, float("inf"))
    assert read_lease(path) == float("inf")
    for bad in ("", "soon\n", "nan\n"):
        Path(path).write_text(bad)
        assert read_lease(path) is None


# ---- cancel, lost ----------------------------------------------------------------------


def test_sigterm_to_the_supervisor_ends_the_tree_and_is_recorded(runs, tmp_path):
    run = supervised(runs, tmp_path, ["sh", "-c", ESCAPE + "sleep 30"], grace=1.0)
    command = run.wait_state(j.RUNNING)["command"]
    orphan = orphan_pid(tmp_path)
    orphan_start = j.start_ticks(orphan)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait() == 128 + signal.SIGTERM
    record = run.record()
    assert record["cancelled"] and not record["fenced"]
    assert gone(command["pid"], command["start"]) and gone(orphan, orphan_start)


def test_what_the_command_leaves_behind_ends_with_it(runs, tmp_path):
    script = ESCAPE + "until [ -s orphan.pid ]; do sleep 0.01; done; exit 4"
    run = supervised(runs, tmp_path, ["sh", "-c", script], grace=1.0)
    assert run.wait() == 4
    orphan = int((tmp_path / "orphan.pid").read_text())
    with contextlib.suppress(ProcessLookupError):  # gone, as it should be
        assert os.getsid(orphan) != orphan  # or its number was taken by another process since
    assert not run.record()["fenced"]


def test_a_journal_whose_supervisor_vanished_reads_as_lost(runs, tmp_path):
    run = supervised(runs, tmp_path, ["sleep", "30"])
    record = run.wait_state(j.RUNNING)
    assert j.verdict(record) == j.RUNNING
    run.proc.kill()
    run.proc.wait()
    assert j.verdict(run.record()) == j.LOST
    os.killpg(record["command"]["pid"], signal.SIGKILL)
    waiting = dict(record, state=j.WAITING)
    assert j.verdict(waiting) == j.NEVER_STARTED
    assert j.verdict(None) == j.NEVER_STARTED


# ---- cost ------------------------------------------------------------------------------


def test_the_supervisor_loads_only_the_standard_library_and_the_bounded_log(tmp_path):
    argv = supervisor_argv(["true"], journal=tmp_path / "j", log=tmp_path / "l")
    argv.insert(1, "-Ximporttime")
    out = subprocess.run(argv, input=b"", capture_output=True, timeout=10)
    assert out.returncode == EXIT_NOT_STARTED, out.stderr
    loaded = {
        line.split("|")[-1].strip()
        for line in out.stderr.decode().splitlines()
        if line.startswith("import time:") and "|" in line
    } - {"imported package"}
    ours = {name for name in loaded if name.startswith("tickui")}
    assert ours == {
        "tickui",
        "tickui.common",
        "tickui.common.boundedlog",
        "tickui.supervisor",
        "tickui.supervisor.journal",
        "tickui.supervisor.lease",
        "tickui.supervisor.main",
        "tickui.supervisor.tree",
    }
    heavy = {"asyncio", "json", "logging", "typing", "enum", "re", "aiokafka", "textual"}
    assert not loaded & heavy


def test_the_bounded_log_module_is_the_one_tickui_uses():
    from tickui.dispatch import output

    assert output.BoundedLog is BoundedLog
