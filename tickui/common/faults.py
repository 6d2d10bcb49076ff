"""Failures as one line: what the status shows and the log says once per outage.

What a database's own errors mean is the store's to say: it adds a test with `recognize`
(this module sits below the store and knows none of them)."""

from __future__ import annotations

import errno
from collections.abc import Callable

from tickui.common.redact import redact

DISK_FULL = "disk full"
OUTAGE = "outage"  # the storage is locked or failing: expected to pass, not a bug

_tests: list[Callable[[BaseException], str | None]] = []


def recognize(kind_of: Callable[[BaseException], str | None]) -> None:
    """Add a test that answers DISK_FULL, OUTAGE or None for a failure."""
    if kind_of not in _tests:
        _tests.append(kind_of)


def fault_kind(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return DISK_FULL
    for kind_of in _tests:
        if (kind := kind_of(exc)) is not None:
            return kind
    return None


def is_disk_full(exc: BaseException) -> bool:
    return fault_kind(exc) == DISK_FULL


def is_outage(exc: BaseException) -> bool:
    """A full disk or a storage failure: logged as one line, without a traceback."""
    return fault_kind(exc) is not None


def fault_text(exc: BaseException) -> str:
    """One redacted line for a failure; a full disk says so first, for the status line."""
    text = redact(f"{type(exc).__name__}: {exc}").splitlines()[0][:512] if str(exc) else ""
    text = text or type(exc).__name__
    return f"disk full: {text}" if is_disk_full(exc) else text
