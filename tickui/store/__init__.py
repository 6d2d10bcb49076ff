"""The SQLite store: one connection to one tickui database file.

All I/O goes through aiosqlite so the event loop never waits on the disk. Hot paths
(claims, acceptances, settlements, event appends) are batched: a handful of calls per
transaction, whatever the number of rows. The queries live in groups by what they are
about; `Store` is all of them on one connection.
"""

from __future__ import annotations

from tickui.store.base import (
    BUSY_TIMEOUT_MS,
    DEFAULT_KEEP,
    SQLITE_MAGIC,
    LeaseLost,
    NewEvent,
    StoreBase,
    inspect_file,
)
from tickui.store.claims import ClaimQueries
from tickui.store.coordination import Coordination
from tickui.store.events import EventLog
from tickui.store.hooks import HookQueries
from tickui.store.queue import QueueQueries
from tickui.store.tasks import SyncReport, TaskQueries, default_anchor
from tickui.store.workers import Beat, WorkerQueries

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DEFAULT_KEEP",
    "SQLITE_MAGIC",
    "Beat",
    "LeaseLost",
    "NewEvent",
    "Store",
    "SyncReport",
    "default_anchor",
    "inspect_file",
]


class Store(
    TaskQueries,
    ClaimQueries,
    QueueQueries,
    EventLog,
    Coordination,
    HookQueries,
    WorkerQueries,
    StoreBase,
):
    """One connection to one tickui database file, with every query group."""
