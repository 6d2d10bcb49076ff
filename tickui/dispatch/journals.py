"""What a run's journal says once the process that started it cannot: the outcome it
records, the last word for whoever takes over (ending a run still going), the runs'
lease file of each process and how whoever takes over from a gone one fences its runs,
and the arithmetic of fencing runs by a hold (a lease) so that they are over before it
ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from tickui.common import procs
from tickui.common.boundedlog import last_line_of
from tickui.model.occurrence import RUN_COMPLETED, RUN_FAILED, bound
from tickui.supervisor import journal as j
from tickui.supervisor.lease import fence_lease, read_lease
from tickui.supervisor.main import KILL_WAIT, LEASE_CHECK

FENCE_SLACK = 1.0  # seconds for SIGKILL to land, the last scan and the journal's end
RENEWED_BY = 0.6  # of a hold's length: renewed at half of it, plus time for the renewal
JOURNAL_POLL = 0.1  # seconds between looks at a journal whose run is being ended
ENGINE_LEASES = "engine"  # the prefix of an engine's runs' lease file in its log folder
FENCED_KEPT = 3600.0  # seconds a gone process's zeroed lease file is kept before removal


def journal_exit_code(record: dict[str, Any] | None, status: int | None) -> int | None:
    """The command's exit code (negative: the signal that ended it) as its journal says;
    `status` (its supervisor's) when it recorded no end; None when it never ran."""
    record = record or {}
    state = record.get("state")
    if state == j.ENDED:
        sig = record.get("signal")
        return -sig if isinstance(sig, int) else record.get("exit_code")
    if state in (j.NOT_STARTED, j.START_FAILED):
        return None
    return status


def journal_outcome(
    record: dict[str, Any] | None, status: int | None, log_path: Path | str | None
) -> tuple[str, dict[str, Any]]:
    """A run's outcome event (type, payload) from its journal's last record, for a run
    that was neither cancelled nor timed out; `status`: its supervisor's exit status."""
    record = record or {}
    state = record.get("state")
    code = journal_exit_code(record, status)
    payload: dict[str, Any] = {"exit_code": code}
    if state == j.START_FAILED:
        payload.update(error_code="DISPATCH_FAILED", detail=bound(str(record.get("error"))))
        return RUN_FAILED, payload
    if state == j.NOT_STARTED:
        payload.update(error_code="INTERRUPTED", detail=f"not started: {record.get('reason')}")
        return RUN_FAILED, payload
    if state == j.RUNNING and status is not None and status >= 0:
        # it exited by itself with the command's status but could not record the end (a
        # full disk): its starter, which saw it exit, has the outcome from the status
        if status == 0:
            return RUN_COMPLETED, payload
        payload.update(
            error_code="EXIT_NONZERO", detail=f"exit {status} (its end could not be recorded)"
        )
        return RUN_FAILED, payload
    if state != j.ENDED:
        payload.update(
            exit_code=None,
            error_code="INTERRUPTED",
            detail=f"its run supervisor ended (status {status}) without recording the end",
        )
        return RUN_FAILED, payload
    if record.get("fenced"):
        payload.update(error_code="INTERRUPTED", detail="fenced: its lease ran out")
        return RUN_FAILED, payload
    if code == 0:
        return RUN_COMPLETED, payload
    last = last_line_of(log_path) if log_path else ""
    said = f": {last}" if last else ""
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
        payload.update(error_code="KILLED", detail=bound(f"killed by {name}{said}"))
    else:
        payload.update(error_code="EXIT_NONZERO", detail=bound(f"exit {code}{said}"))
    return RUN_FAILED, payload


async def last_word(path: Path, by_lease: bool) -> tuple[str, dict[str, Any] | None]:
    """A run's verdict and journal (see journal.verdict) once its supervisor has ended or
    is gone, for whoever takes over from the process that started it, which is gone and
    watches nothing. A run still waiting or going is ended now: `by_lease`, its lease file
    is set to 0 (the lease was only the gone process's); else (or without one) its
    supervisor is told to stop. Waited for as long as ending a tree takes."""
    record = await asyncio.to_thread(j.read_journal, str(path))
    verdict = j.verdict(record)
    if verdict not in (j.WAITING, j.RUNNING) or record is None:
        return verdict, record
    lease, grace = record.get("lease"), record.get("grace")
    if by_lease and isinstance(lease, str):
        with contextlib.suppress(OSError):
            fence_lease(lease)
    else:
        sup = record.get("supervisor")
        with contextlib.suppress(OSError, TypeError, ValueError):
            if isinstance(sup, dict) and j.supervisor_alive(record):
                os.kill(int(sup["pid"]), signal.SIGTERM)
    grace = float(grace) if isinstance(grace, int | float) else 3.0
    limit = time.monotonic() + LEASE_CHECK + grace + KILL_WAIT + FENCE_SLACK
    while time.monotonic() < limit:
        await asyncio.sleep(JOURNAL_POLL)
        record = await asyncio.to_thread(j.read_journal, str(path))
        verdict = j.verdict(record)
        if verdict not in (j.WAITING, j.RUNNING):
            break
    return verdict, record


def fence_lead(grace: float) -> float:
    """How long before a hold ends its runs are fenced: SIGTERM after at most one look
    at the lease (LEASE_CHECK), SIGKILL after the grace, then FENCE_SLACK to be over."""
    return grace + LEASE_CHECK + FENCE_SLACK


def fence_deadline(
    asked: float, ttl: float, grace: float, renewed_by: float | None = None
) -> float:
    """The deadline (time.monotonic()) for runs under a hold granted for `ttl` seconds
    from `asked`: early enough that a run fenced then is over before the hold ends. Never
    before `renewed_by` seconds (default RENEWED_BY of the hold: the engine renews at
    half of it), by when the next renewal comes: a TTL too short for the grace must not
    fence every run between two renewals (it then breaks the bound instead: `fence_fits`
    says whether it holds)."""
    floor = ttl * RENEWED_BY if renewed_by is None else renewed_by
    return asked + max(floor, ttl - fence_lead(grace))


def fence_fits(ttl: float, grace: float, renewed_by: float | None = None) -> bool:
    """Whether runs fenced under a `ttl` hold are surely over before it ends."""
    floor = ttl * RENEWED_BY if renewed_by is None else renewed_by
    return ttl - fence_lead(grace) >= floor


def runs_lease_path(folder: Path, prefix: str) -> Path:
    """This process's runs' lease file in `folder`, named by its pid and the kernel's start
    time of it: whoever takes over from it once it is gone finds it (`fence_gone`)."""
    pid = os.getpid()
    return folder / f"{prefix}-{pid}-{procs.start_ticks(pid) or 0}.lease"


def fence_gone(folder: Path, prefix: str) -> int:
    """Fence the runs of every gone process whose lease file (`runs_lease_path`) lies in
    `folder`: its deadline set to 0, so a supervisor of theirs that has not let its command
    go yet never will (it looks at the lease once more at its go line), whether or not it
    had written its journal yet. To be called before their journals are read: a journal
    missing then means a command that never runs. A zeroed file is removed once it has
    been so for FENCED_KEPT. Blocking (a directory listing): call it in a thread. Returns
    how many were fenced now."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    fenced = 0
    for name in names:
        if not name.endswith(".lease"):
            continue
        parts = name.removesuffix(".lease").rsplit("-", 2)
        if len(parts) != 3 or parts[0] != prefix:
            continue
        pid, start = parts[1], parts[2]
        if not pid.isdigit() or not start.isdigit():
            continue
        if procs.alive(int(pid), int(start) or None):
            continue  # its owner still acts on it (or a pid without a start: not known gone)
        path = str(folder / name)
        with contextlib.suppress(OSError):
            if read_lease(path) == 0.0:
                if time.time() - os.stat(path).st_mtime > FENCED_KEPT:
                    os.unlink(path)
                continue
            fence_lease(path)
            fenced += 1
    return fenced
