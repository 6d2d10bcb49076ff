"""Run output: reading a run's log back."""

from __future__ import annotations

import os

TAIL_BYTES = 4096


def read_tail(path: str | os.PathLike[str] | None, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a run's output, decoded leniently."""
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
