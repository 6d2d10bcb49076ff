"""A blocking, read-only reader of a SQLite database file, for the listings (`task list`,
`history`) a command line prints and exits after: no event loop, no aiosqlite thread.

It runs the store's own queries and decoders (tickui.store.reads) after the same file
checks as a read-only `Store` (dbfile.check_readable), so it reads the same values and
refuses the same files with the same words. Anything but a SQLite file (is_sqlite_file)
goes through the `Store` contract."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path

from tickui.model.records import Occurrence, Task, occurrence_from_row
from tickui.model.spec import TaskSpec
from tickui.store import dbfile, reads

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Self

    from tickui.model.audit import AuditEntry

# A store named by a URL (scheme://...), not a file: a path keeps one slash of the two.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+:/")


def is_sqlite_file(db: str | os.PathLike[str]) -> bool:
    """Whether `db` names a SQLite file (a path), not a store given by URL."""
    return _URL.match(os.fspath(db)) is None


class Reader:
    """One read-only sqlite3 connection to a tickui database file."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._specs: dict[str, TaskSpec] = {}

    @classmethod
    def open(cls, path: Path) -> Self:
        """Open as `Store.open(path, readonly=True)` does: the file checked, SQLite's
        `mode=ro` (or `immutable` where that cannot work), nothing written or created."""
        db = Path(path).expanduser()
        uri = dbfile.check_readable(db)
        conn = None
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {dbfile.BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = 1")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()
        except sqlite3.Error as exc:
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            raise dbfile.database_failure(exc, db) from None
        return cls(db, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_tasks(self, with_stats: bool = True) -> list[Task]:
        rows = self._conn.execute(reads.LIST_TASKS).fetchall()
        stats = self._stats(None) if with_stats else {}
        return [reads.task_from_row(row, stats.get(row[0]), self._specs) for row in rows]

    def find_task(self, name: str) -> Task | None:
        row = self._conn.execute(reads.FIND_TASK, (name,)).fetchone()
        if row is None:
            return None
        stats = self._stats([row[0]]).get(row[0])
        return reads.task_from_row(row, stats, self._specs)

    def history(self, task: str | None = None, limit: int = 50) -> list[Occurrence]:
        rows = self._conn.execute(*reads.history_query(task, limit)).fetchall()
        return [occurrence_from_row(row) for row in rows]

    def audit(self, task: str | None = None, limit: int = 50) -> list[AuditEntry]:
        """Newest first; none in a file from before the audit (read-only: not migrated)."""
        from tickui.model.audit import entry_from_row  # for `audit` only

        if self._conn.execute(reads.HAS_AUDIT).fetchone() is None:
            return []
        rows = self._conn.execute(*reads.audit_query(task, limit)).fetchall()
        return [entry_from_row(row) for row in rows]

    def _stats(self, ids: list[int] | None) -> dict:
        query = reads.stats_query(ids)
        if query is None:
            return {}
        return reads.stats_from(self._conn.execute(*query).fetchall())
