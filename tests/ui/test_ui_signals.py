"""Hang-up: SIGHUP, SIGTERM or the terminal going away do what `q`
then "cancel them" does. Real processes: the dashboard runs under tmux, a run of `sleep`
is in flight, the signal goes to the tickui process (or the tmux session is killed, a real
hang-up); afterwards the process is gone, the run's whole tree is gone, the run is recorded
cancelled and the demo's temp folder is removed."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from helpers import cli, poll
from tickui.store.dbfile import connect_ro
from ui_support import wait_for

pytestmark = pytest.mark.slow

# Seconds from the signal to the dashboard's exit: runs are cancelled at once, as `q` then
# "cancel them" does, not waited for (the engine's stop grace is 10 s).
EXIT_WITHIN = 8.0
TREE = "sleep 300 & sleep 300; wait"  # a run with a child: the whole tree must go


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; its parent just has not reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            out.append(int(entry.name))
    return out


def _tree(pid: int) -> set[int]:
    found, todo = {pid}, [pid]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _whole(pid: int) -> set[int] | None:
    tree = _tree(pid)
    return tree if len(tree) >= 3 else None


def _tickui_pid(tmux, session: str) -> int:
    """The tickui process: the python child of the pane's shell."""
    shell = int(tmux("display-message", "-p", "-t", session, "#{pane_pid}").strip())

    def find() -> int | None:
        for child in _children(shell):
            if "tickui" in Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace"):
                return child
        return None

    return poll(find, 10, "the tickui process")


def _running(db: Path, task: str | None = None) -> list[tuple[int, int]]:
    """(occurrence id, pid) of runs with a process, read through a read-only connection."""
    try:
        conn = connect_ro(db)
    except Exception:
        return []
    try:
        rows = conn.execute(
            "SELECT id, pid, task FROM occurrences WHERE state = 'running' AND pid IS NOT NULL"
        ).fetchall()
    except Exception:
        return []
    finally:
        conn.close()
    return [(i, pid) for i, pid, name in rows if task is None or name == task]


def _states(db: Path, ids: list[int]) -> dict[int, tuple[str, str | None]]:
    conn = connect_ro(db)
    try:
        marks = ",".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT id, state, error_code FROM occurrences WHERE id IN ({marks})", ids
        ).fetchall()
    finally:
        conn.close()
    return {i: (state, code) for i, state, code in rows}


# A session leader that outlives the terminal's hang-up, as `make demo`'s make does (it
# waits for its child): the kernel then sends SIGHUP to no one else.
_LEADER = (
    "import signal, subprocess, sys; signal.signal(signal.SIGHUP, lambda *a: None);"
    " sys.exit(subprocess.call(sys.argv[1:]))"
)


def _hang_up(tmux, pid: int, how: str) -> None:
    if how.startswith("kill-session"):  # the terminal itself goes away, writes fail
        tmux("kill-session", "-t", "ui")
    else:
        os.kill(pid, getattr(signal, how))


def _exited_and_restored(tmux, exit_file: Path, how: str) -> None:
    """Exit code 128 + the signal (launch.py's convention for an exit on a signal), and
    the terminal given back: main screen, no mouse reporting, cursor shown."""
    code = poll(lambda: exit_file.exists() and exit_file.read_text().strip(), 5, "exit")
    assert code == str(128 + getattr(signal, how)), f"exit code {code} after {how}"
    modes = tmux(
        "display-message", "-p", "-t", "ui", "#{alternate_on} #{mouse_any_flag} #{cursor_flag}"
    ).split()
    assert modes == ["0", "0", "1"], f"terminal left in alternate/mouse/cursor modes {modes}"


def _start(tmux, tmp_path: Path, args: str, under_leader: bool = False) -> tuple[Path, Path]:
    """tickui ARGS in a 120x40 pane; its exit code lands in a file; TMPDIR is the test's.
    `under_leader`: started by a session leader that outlives the hang-up (_LEADER)."""
    exit_file, scratch = tmp_path / "exit", tmp_path / "tmp"
    scratch.mkdir()
    tickui = f"{sys.executable} -m tickui {args}"
    if under_leader:
        tickui = f'exec {sys.executable} -c "{_LEADER}" {tickui}'
    command = (
        f"cd {tmp_path} && TMPDIR={scratch} TERM=xterm-256color {tickui};"
        f" echo $? > {exit_file}; sleep 30"
    )
    tmux("new-session", "-d", "-s", "ui", "-x", "120", "-y", "40", command)
    return exit_file, scratch


def _screen(tmux):
    return lambda: tmux("capture-pane", "-p", "-t", "ui")


@pytest.mark.parametrize("how", ["SIGHUP", "SIGTERM", "kill-session"])
def test_a_hang_up_cancels_and_records_the_runs_and_ends_their_processes(
    tmux, tmp_path: Path, how: str
) -> None:
    db = tmp_path / "hup.db"
    added = cli("task", "add", "sleeper", "--cron", "0 0 1 1 *", "--", "sh", "-c", TREE, db=db)
    assert added.returncode == 0, added.stderr
    exit_file, _ = _start(tmux, tmp_path, f"--db {db}")
    wait_for(_screen(tmux), "engine running")
    asked = cli("task", "run-now", "sleeper", db=db)
    assert asked.returncode == 0, asked.stderr
    [(occ_id, run_pid)] = poll(lambda: _running(db, "sleeper"), 15, "the run's process")
    tree = poll(lambda: _whole(run_pid), 10, "the run's tree (sh and two sleeps)")
    tickui = _tickui_pid(tmux, "ui")

    _hang_up(tmux, tickui, how)

    poll(lambda: not _alive(tickui), EXIT_WITHIN, "tickui to exit")
    poll(lambda: not any(_alive(p) for p in tree), 5, f"the run's processes {tree} to end")
    state = _states(db, [occ_id])[occ_id]
    assert state[0] == "cancelled", f"run {occ_id} recorded {state} after {how}"
    if not how.startswith("kill-session"):  # the terminal lives on: exit code and its state
        _exited_and_restored(tmux, exit_file, how)


@pytest.mark.parametrize("how", ["SIGHUP", "kill-session", "kill-session-leader-lives"])
def test_a_hang_up_of_the_demo_removes_its_folder_and_ends_its_runs(
    tmux, tmp_path: Path, how: str
) -> None:
    exit_file, scratch = _start(tmux, tmp_path, "demo", how == "kill-session-leader-lives")
    folder = poll(lambda: next(scratch.glob("tickui-demo-*"), None), 15, "the demo's folder")
    db = folder / "demo.db"
    wait_for(_screen(tmux), "engine running")
    runs = poll(lambda: _running(db), 15, "a demo run with a process")
    trees = set().union(*(_tree(pid) for _, pid in runs))
    tickui = _tickui_pid(tmux, "ui")

    _hang_up(tmux, tickui, how)

    poll(lambda: not _alive(tickui), EXIT_WITHIN, "tickui to exit")
    poll(lambda: not any(_alive(p) for p in trees), 5, f"the demo's runs {trees} to end")
    assert not folder.exists(), f"the demo's folder {folder} was left behind"
    if not how.startswith("kill-session"):  # the terminal lives on: exit code and its state
        _exited_and_restored(tmux, exit_file, how)
