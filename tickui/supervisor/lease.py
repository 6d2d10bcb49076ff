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
        os.write(fd, f"{deadline!r}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


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
