"""The lease file a run's owner (an engine, a worker) renews while it can still act on the
run: one line, the deadline in seconds on CLOCK_MONOTONIC (`time.monotonic()` on Linux,
one clock for every process of the host, not stopped by a frozen process). A run whose
deadline has passed is fenced by its supervisor. Writing `0` fences at once; `inf` never.
"""

from __future__ import annotations

import math
import os


def write_lease(path: str, deadline: float) -> None:
    """Replace the lease atomically (a reader sees the old line or the new one, never a
    part). Not fsynced: a monotonic deadline means nothing after a reboot."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, f"{deadline!r}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        try:  # noqa: SIM105 - contextlib costs milliseconds to import in a supervisor
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_lease(path: str) -> float | None:
    """The deadline the file holds, or None when it is missing or unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(128)
    except OSError:
        return None
    try:
        deadline = float(data.strip() or b"x")
    except ValueError:
        return None
    return None if math.isnan(deadline) else deadline


def fence_lease(path: str) -> None:
    """Set the lease to 0 (its runs fenced at their next look), even on a full disk: when
    the atomic replace cannot get space, the line is overwritten in place at its own
    length (`0` and spaces), which needs no new block. Raises OSError when neither works
    (the file is gone or cannot be written)."""
    try:
        write_lease(path, 0.0)
        return
    except OSError:
        pass  # no space for the new file: in place
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        length = len(os.pread(fd, 128, 0).rstrip(b"\n")) or 1
        os.pwrite(fd, b"0" + b" " * (length - 1), 0)
    finally:
        os.close(fd)
