"""The SQLite store: one connection to one tickui database file.

All I/O goes through aiosqlite so the event loop never waits on the disk. Hot paths
(claims, acceptances, settlements, event appends) are batched: a handful of calls per
transaction, whatever the number of rows. The queries live in groups by what they are
about (tickui.store.groups), each over `StoreBase` (the connection and the state they
share); `SQLiteStore` is all of them on one connection.
"""

from __future__ import annotations

from tickui.store.base import StoreBase
from tickui.store.groups import QUERY_GROUPS


class SQLiteStore(*QUERY_GROUPS, StoreBase):
    """One connection to one tickui database file, with every query group."""
