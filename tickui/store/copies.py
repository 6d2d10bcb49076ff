"""A private copy of a database, made without writing a byte beside the original, and
what a time-lapse reads of it (blocking calls: the copy is made before any loop runs)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from tickui.common.errors import StoreError
from tickui.model.occurrence import ACTIVE
from tickui.store.abc import FinishedRun, OutcomeCount
from tickui.store.dbfile import SQLITE_MAGIC


def _same_file(before: os.stat_result, after: os.stat_result) -> bool:
    return (before.st_ino, before.st_size, before.st_mtime_ns) == (
        after.st_ino,
        after.st_size,
        after.st_mtime_ns,
    )


def _sidecars(path: Path) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal")]


def _backup(uri: str, target: Path) -> None:
    os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))  # owner-only
    source = sqlite3.connect(uri, uri=True)
    try:
        dest = sqlite3.connect(target)
        try:
            source.backup(dest)
        finally:
            dest.close()
    finally:
        source.close()


def copy_database(source: Path, target: Path) -> bool:
    """Copy `source` into `target` (which must not exist) without writing anything beside
    `source`. False when there is nothing to copy (no file, or an empty one).

    A WAL database opened read-only still creates -wal and -shm files beside itself. When
    none exist (nobody has the database open), the file alone is the whole database and is
    read as immutable, which creates nothing; the copy is kept only if the file did not
    change meanwhile. Otherwise (an engine has it open) it is read through the existing
    -wal/-shm, read-only.
    """
    if not source.exists():
        return False
    if source.is_dir():
        raise StoreError(f"database {source} is a directory")
    if source.stat().st_size == 0:
        return False
    with open(source, "rb") as handle:
        if handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise StoreError(
                f"database {source} is not a SQLite file (corrupt or foreign); left untouched"
            )
    from urllib.request import pathname2url  # urllib.request: slow to load, seldom needed

    url = "file:" + pathname2url(str(source.resolve()))
    try:
        if not any(p.exists() for p in _sidecars(source)):
            before = source.stat()
            _backup(url + "?mode=ro&immutable=1", target)
            if _same_file(before, source.stat()) and not any(p.exists() for p in _sidecars(source)):
                return True
            target.unlink()
        _backup(url + "?mode=ro", target)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"database {source} cannot be copied ({exc}); left untouched") from None
    return True


def neutralize(copy: Path) -> None:
    """Make the copy the simulation's own: the real engine's lease expired (nothing to wait
    out; its runs in flight end INTERRUPTED in the copy), and no process ids of real runs,
    so recovering them in the copy can never signal a real process group."""
    conn = sqlite3.connect(copy, isolation_level=None)
    try:
        states = ", ".join(f"'{s}'" for s in ACTIVE)
        conn.execute("BEGIN")
        # Expired, not deleted: the next token stays above every token in the history.
        conn.execute("UPDATE lease SET expires_at = 0, host = NULL, pid = NULL, pid_start = NULL")
        conn.execute(
            f"UPDATE occurrences SET pid = NULL, pgid = NULL, pid_start = NULL "
            f"WHERE state IN ({states})"
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[sqlite3.Connection]:
    from urllib.request import pathname2url

    conn = sqlite3.connect(f"file:{pathname2url(str(path.resolve()))}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def newest_occurrence_id(path: Path) -> int:
    """The highest occurrence id in the file at `path`; 0 when it has none."""
    with _read_only(path) as conn:
        return conn.execute("SELECT max(id) FROM occurrences").fetchone()[0] or 0


def finished_runs(path: Path) -> list[FinishedRun]:
    """Every succeeded and failed occurrence in the file at `path`."""
    with _read_only(path) as conn:
        rows = conn.execute(
            "SELECT task, state, started_at, finished_at, exit_code FROM occurrences "
            "WHERE state IN ('succeeded', 'failed')"
        ).fetchall()
    return [FinishedRun(*row) for row in rows]


def outcome_counts(path: Path, after_id: int) -> list[OutcomeCount]:
    """The occurrences with an id above `after_id`, counted by task and state (in that
    order)."""
    with _read_only(path) as conn:
        rows = conn.execute(
            "SELECT task, state, count(*), sum(missed), "
            "max(CASE WHEN kind = 'scheduled' THEN started_at - scheduled_for END) "
            "FROM occurrences WHERE id > ? GROUP BY task, state ORDER BY task, state",
            (after_id,),
        ).fetchall()
    return [
        OutcomeCount(task, state, count, missed or 0, late)
        for task, state, count, missed, late in rows
    ]
