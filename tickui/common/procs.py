"""Process identity and process-group signals, so a reused PID is never killed by mistake."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio


def host() -> str:
    """The host this process says it runs on: TICKUI_HOST (tickui.common.options), or the
    machine's name (gethostname's: uname's node name, which the settings read without
    loading socket). Who may look at a PID is decided by it: only on the same host."""
    return os.environ.get("TICKUI_HOST") or os.uname().nodename


def whoami() -> tuple[str, str, int]:
    """This process's OS user (getpass's: LOGNAME, USER, ... or the password entry), its
    host (as host() says) and its pid."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # a uid with no name and no LOGNAME/USER
        user = str(os.getuid())
    return user, host(), os.getpid()


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    pgrp: int
    session: int
    start: int
    zombie: bool


def read_proc(pid: int) -> Proc | None:
    """One process's stat line, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return Proc(
            pid, int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0] == b"Z"
        )
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None if it is gone."""
    proc = read_proc(pid)
    return None if proc is None or proc.zombie else proc.start


def alive(pid: int | None, started: int | None) -> bool:
    """True when `pid` runs and is the same process that was recorded (same start time)."""
    if not pid:
        return False
    now_start = start_ticks(pid)
    if now_start is None:
        return False
    return started is None or now_start == started


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int | None, sig: signal.Signals) -> bool:
    """Send `sig` to a process group; False when the group no longer exists."""
    if not pgid or pgid <= 1:
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_reading(loop: asyncio.AbstractEventLoop, fd: int | None) -> None:
    """Take `fd` out of `loop`'s readers and close it, quietly: every way a reader ends
    (EOF, an error, a stop) comes here, and some come twice."""
    if fd is None:
        return
    with contextlib.suppress(Exception):
        loop.remove_reader(fd)
    with contextlib.suppress(OSError):
        os.close(fd)


def _noted(signum: int, frame: object) -> None:
    """The signal's number already reached the wakeup socket; nothing else to do here."""


@contextlib.contextmanager
def stop_on_signals(
    loop: asyncio.AbstractEventLoop, stop: Callable[[], object], signals: Sequence[int]
) -> Iterator[None]:
    """Inside, `signals` call `stop` (a clean stop). On leaving they are ignored until the
    process exits: a supervisor repeating SIGTERM must not kill it halfway through its exit
    with -15. The loop's own signal handlers are not used because removing one restores the
    default action, and a signal sent to the process may be taken by any of its threads,
    so no mask held by this one thread closes that gap. Here each signal goes from a no-op
    handler straight to SIG_IGN; its number reaches the loop through the wakeup socket."""
    wanted = frozenset(int(sig) for sig in signals)
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)

    def woken() -> None:
        try:
            numbers = reader.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        if wanted.intersection(numbers):
            stop()

    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    loop.add_reader(reader.fileno(), woken)
    try:
        for sig in signals:
            signal.signal(sig, _noted)
        yield
    finally:
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        loop.remove_reader(reader.fileno())
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
