"""The run supervisor's view of processes: becoming a subreaper, the tree below a process
(from /proc), the environment it was given, and exit statuses. Standard library only, and
as little of it as can be: a supervisor is started for every run."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs milliseconds to import
if TYPE_CHECKING:
    from collections.abc import Callable

PR_SET_CHILD_SUBREAPER = 36


def enable_subreaper() -> bool:
    """Orphans of the command re-parent to this process instead of init."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        # _ctypes itself: the ctypes package costs about 5 ms of CPU to import, a third of
        # what a whole supervisor costs; prctl takes only ints, so no types are needed
        import _ctypes

        prctl = _ctypes.dlsym(_ctypes.dlopen(None, os.RTLD_NOW), "prctl")  # own symbols
        return _ctypes.call_function(prctl, (PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (ImportError, OSError, AttributeError):
        return False


def descendants(root: int) -> dict[int, tuple[int, int, bool]]:
    """Every process below `root` in /proc: pid -> (start ticks, pgrp, zombie)."""
    children: dict[int, list[int]] = {}
    info: dict[int, tuple[int, int, bool]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
            fields = data[data.rfind(b")") + 2 :].split()
            pid = int(name)
            info[pid] = (int(fields[19]), int(fields[2]), fields[0] == b"Z")
            children.setdefault(int(fields[1]), []).append(pid)
        except (OSError, IndexError, ValueError):
            continue
    found: dict[int, tuple[int, int, bool]] = {}
    stack = list(children.get(root, ()))
    while stack:
        pid = stack.pop()
        if pid not in found and pid in info:
            found[pid] = info[pid]
            stack.extend(children.get(pid, ()))
    return found


def survives_term(pid: int) -> bool:
    """Whether `pid` could go on to exit by itself after a SIGTERM now: it catches or
    ignores SIGTERM (/proc's SigCgt, SigIgn), or it cannot be told (then assumed). A
    process that has ended already (a zombie) is False: its end came first."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return True
    fields = dict(line.split(b":", 1) for line in lines if b":" in line)
    try:
        if fields[b"State"].split()[0] in (b"Z", b"X"):
            return False
        bit = 1 << 14  # SIGTERM (15): bit 14 of the masks
        return bool((int(fields[b"SigCgt"], 16) | int(fields[b"SigIgn"], 16)) & bit)
    except (KeyError, IndexError, ValueError):
        return True


def environment_given() -> dict[bytes, bytes]:
    """The environment this process was started with: Python's start-up may have changed
    os.environ (the C locale is coerced to C.UTF-8 in LC_CTYPE), and the command must get
    the run's environment as it was given."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            data = handle.read()
    except OSError:
        return dict(os.environb)
    env = {}
    for entry in data.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:
            env[key] = value
    return env


def attempt(call: Callable[..., object], *args: int) -> bool:
    """A system call whose failure means there is nothing left to do (contextlib costs
    milliseconds to import)."""
    try:
        call(*args)
    except OSError:
        return False
    return True


def exit_status(code: int) -> int:
    """The supervisor's exit status for the command's `os.waitstatus_to_exitcode`."""
    return code if code >= 0 else 128 - code
