"""Reading /proc: every process, who leads to whom, and what an orphan carries of its run
(its `TICKUI_*` environment, the pipes it holds open)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping

from tickui.common.procs import Proc, read_proc

HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")

Snapshot = dict[int, Proc]


def scan() -> dict[int, Proc]:
    """Every process in /proc (this costs about 7 us a process; run it in a thread)."""
    found: dict[int, Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if name.isdigit():
            proc = read_proc(int(name))
            if proc is not None:
                found[proc.pid] = proc
    return found


def links(snap: Mapping[int, Proc]) -> dict[int, list[int]]:
    """Who leads to whom: pid -> its children and, for a group or session leader, the
    members of its group and session; -pid -> the same members (when the leader is gone)."""
    out: dict[int, list[int]] = {}
    for p in snap.values():
        out.setdefault(p.ppid, []).append(p.pid)
        for leader in {p.pgrp, p.session}:
            if leader != p.pid and leader > 1:
                if leader in snap:
                    out.setdefault(leader, []).append(p.pid)
                out.setdefault(-leader, []).append(p.pid)
    return out


def pipes_of(pid: int) -> frozenset[int]:
    """The inodes of the pipes among a process's open files (empty when unreadable)."""
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return frozenset()
    for name in names:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{name}")
            if target.startswith("pipe:["):
                with contextlib.suppress(ValueError):
                    found.add(int(target[6:-1]))
    return frozenset(found)


def tickui_environ(pid: int) -> frozenset[bytes]:
    """The `TICKUI_*` entries of a process's environment (empty when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return frozenset()
    return frozenset(e for e in data.split(b"\0") if e.startswith(b"TICKUI_"))


def same_process(proc: Proc | None, start: int | None) -> bool:
    """`proc` is the process that started at `start` (an unknown start proves nothing)."""
    return proc is not None and start is not None and proc.start == start
