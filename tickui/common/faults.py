"""Failures as one line: what the status shows and the log says once per outage."""

from __future__ import annotations

import errno
import sqlite3

from tickui.common.redact import redact


def is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or (
            "disk is full" in str(exc)
        )
    return False


def fault_text(exc: BaseException) -> str:
    """One redacted line for a failure; a full disk says so first, for the status line."""
    text = redact(f"{type(exc).__name__}: {exc}").splitlines()[0][:512] if str(exc) else ""
    text = text or type(exc).__name__
    return f"disk full: {text}" if is_disk_full(exc) else text
