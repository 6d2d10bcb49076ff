"""The SQLite store: one connection to one tickui database file.

All I/O goes through aiosqlite so the event loop never waits on the disk. Hot paths
(claims, acceptances, settlements, event appends) are batched: a handful of calls per
transaction, whatever the number of rows. The queries live in groups by what they are
about, each over `StoreBase` (the connection and the state they share); `SQLiteStore`
is all of them on one connection.
"""

from __future__ import annotations

from tickui.store.base import StoreBase
from tickui.store.claims import ClaimQueries
from tickui.store.coordination import Coordination
from tickui.store.events import EventLog
from tickui.store.hooks import HookQueries
from tickui.store.queue import QueueQueries
from tickui.store.tasks import TaskQueries
from tickui.store.workers import WorkerQueries


class SQLiteStore(
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
