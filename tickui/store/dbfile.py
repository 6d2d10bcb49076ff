"""The database file on disk: private permissions, read-only opening, and one-line errors.

Whoever can write the database decides what runs, so tickui keeps it (and its -wal, -shm
and log folder) readable by its owner only, and refuses a file that is not the user's.
Every opening inspects the file first (inspect_file: SQLite, tickui's, not newer).
Read-only commands open it with SQLite's `mode=ro` and never write a byte; on media where
even that needs a write (a read-only mount or a full disk without a -shm file), and only
when no write-ahead log is pending, they read it as `immutable`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from tickui.common import faults
from tickui.common.errors import NotSetUp, StoreError, TickuiError, Unavailable
from tickui.store import schema

SIDE_FILES = ("-wal", "-shm")
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 5000
DATABASE_ERRORS = (sqlite3.Error,)  # what SQLite raises of its own: never tickui's errors
MIN_FREE = 1024 * 1024  # below this, a reader does not try to create a -shm file
OLDEST_READABLE = 8  # read-only commands read every column (worker, deadline, ...) from 8 on


def lookup(path: Path) -> os.stat_result | None:
    """The file's status, None when nothing is there (also under a regular file)."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise os_failure(exc, f"database {path}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise StoreError(f"database path {path!r}: {exc}") from None


def os_failure(exc: OSError, what: str) -> Unavailable:
    reason = exc.strerror or str(exc)
    if exc.errno == errno.EROFS:
        reason = "the file system is read-only"
    elif exc.errno == errno.ENOSPC:
        reason = "the disk is full"
    return Unavailable(f"{what}: {reason}")


def ro_uri(path: Path, immutable: bool = False) -> str:
    """A `file:` URI that opens `path` read-only; `?`, `#` and `%` in the path are quoted."""
    query = "mode=ro&immutable=1" if immutable else "mode=ro"
    return f"file:{quote(str(path.absolute()))}?{query}"


def _pending_wal(path: Path) -> bool:
    wal = lookup(Path(f"{path}-wal"))
    return wal is not None and wal.st_size > 0


def _cannot_make_shm(path: Path) -> bool:
    """No -shm file exists and none could be made: read-only media or a full disk."""
    if lookup(Path(f"{path}-shm")) is not None:
        return False
    folder = path.absolute().parent
    try:
        info = os.statvfs(folder)
    except OSError:
        return True
    return (
        bool(info.f_flag & os.ST_RDONLY)
        or not os.access(folder, os.W_OK)
        or info.f_bavail * info.f_frsize < MIN_FREE
    )


def read_only_uri(path: Path) -> str:
    """The URI a reader should use: `immutable` only when nothing is pending in a WAL and
    plain `mode=ro` could not work (it would need to create a -shm file)."""
    immutable = not _pending_wal(path) and _cannot_make_shm(path)
    return ro_uri(path, immutable)


def connect_ro(path: Path, timeout: float = 5.0) -> sqlite3.Connection:
    """A blocking read-only connection (used to inspect a file before anything else)."""
    uri = read_only_uri(path)
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=timeout)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError:
        if "immutable" in uri or _pending_wal(path):
            raise
        conn = sqlite3.connect(ro_uri(path, immutable=True), uri=True, timeout=timeout)
        return conn


def inspect_file(path: Path) -> int | None:
    """Check a database file before using it; return its schema version.

    None means the file is new or empty. A file that is not SQLite, belongs to another
    program, or was written by a newer tickui raises StoreError and is left untouched.
    Reads only (a read-only connection), so it works on read-only media and beside a writer.
    """
    info = lookup(path)
    if info is None:
        return None
    if stat.S_ISDIR(info.st_mode):
        raise StoreError(f"database {path} is a directory")
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"database {path} is not a regular file")
    try:
        with open(path, "rb") as handle:  # read even when the size says 0 (/proc files)
            header = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise os_failure(exc, f"cannot read database {path}") from None
    if not header:
        return None
    if header != SQLITE_MAGIC:
        raise StoreError(
            f"database {path} is not a SQLite file (corrupt or foreign); left untouched"
        )
    try:
        conn = connect_ro(path, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            conn.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as exc:
        raise database_failure(exc, path) from None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"database {path} is unreadable ({exc}); left untouched") from None
    if app_id != schema.APPLICATION_ID:
        if not tables and app_id == 0:
            return None
        shown = ", ".join(tables[:4]) or "none"
        raise StoreError(
            f"database {path} belongs to another program (tables: {shown}); left untouched"
        )
    if version > schema.VERSION:
        raise StoreError(
            f"database {path} has schema {version}, newer than this tickui's {schema.VERSION}; "
            "upgrade tickui (the file was left untouched)"
        )
    return version


def check_readable(db: Path) -> str:
    """The checks before a read-only command reads `db` (inspect_file's, then: a file
    is there, set up, and of a schema it can read); the URI to open it with."""
    if lookup(db) is None:
        raise NotSetUp(f"no database at {db} (tickui task add or tickui run creates one)")
    version = inspect_file(db)
    if version is None:
        raise NotSetUp(f"database {db} is empty (tickui task add or tickui run sets it up)")
    if version < OLDEST_READABLE:
        raise Unavailable(
            f"database {db} has schema {version}, older than this tickui's {schema.VERSION};"
            " run `tickui run` (or any task change) once to migrate it"
        )
    return read_only_uri(db)


def create_private(path: Path) -> list[Path]:
    """Create the missing folders (0700) and the file (0600); return what was created,
    deepest last, so a failed open can remove exactly that."""
    created: list[Path] = []
    missing: list[Path] = []
    folder = path.parent
    while lookup(folder) is None and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    try:
        for item in reversed(missing):
            try:
                os.mkdir(item, 0o700)
            except FileExistsError:
                continue
            created.append(item)
            os.chmod(item, 0o700)  # whatever the umask
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return created  # made by someone else meanwhile: inspected like any other
        created.append(path)
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    except OSError as exc:
        remove_created(created)
        where = f"cannot create database {path}"
        if exc.filename and Path(exc.filename) != path:
            where = f"cannot create folder {exc.filename} for database {path}"
        raise os_failure(exc, where) from None
    return created


def remove_created(created: list[Path]) -> None:
    """Undo create_private after a failed open: the file, its side files, new folders."""
    for item in reversed(created):
        with contextlib.suppress(OSError):
            if item.is_dir():
                os.rmdir(item)
            else:
                for suffix in ("", *SIDE_FILES):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{item}{suffix}")


def secure_existing(path: Path, log_dir: Path) -> None:
    """Make an existing database owner-only (0600; -wal, -shm too; its log folder 0700),
    or refuse it when it is not the user's file."""
    info = lookup(path)
    if info is None:
        return
    if not stat.S_ISREG(info.st_mode):
        raise StoreError(f"database {path} is not a regular file")
    me = os.geteuid()
    if info.st_uid != me:
        raise Unavailable(
            f"database {path} belongs to uid {info.st_uid}, not to you (uid {me}); whoever can"
            " write it decides what runs, so tickui will not use it: run tickui as its owner"
            f" (who can `chmod 600 {path}`) or use your own --db"
        )
    for item, mode in (
        [(path, 0o600)] + [(Path(f"{path}{s}"), 0o600) for s in SIDE_FILES] + [(log_dir, 0o700)]
    ):
        found = lookup(item)
        if found is None or found.st_uid != me or stat.S_IMODE(found.st_mode) & ~mode == 0:
            continue
        try:
            os.chmod(item, stat.S_IMODE(found.st_mode) & mode)
        except OSError as exc:
            raise os_failure(exc, f"cannot make {item} private (`chmod 600 {item}`)") from None


def _disk_full(path: Path) -> bool:
    try:
        info = os.statvfs(path.absolute().parent)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < MIN_FREE


def fault_kind(exc: BaseException) -> str | None:
    """SQLite's errors for `faults`: a full disk, or an outage (locked, I/O) to wait out."""
    if not isinstance(exc, sqlite3.Error):
        return None
    full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    if full or "disk is full" in str(exc):
        return faults.DISK_FULL
    return faults.OUTAGE if isinstance(exc, sqlite3.OperationalError) else None


def database_failure(exc: BaseException, path: Path) -> TickuiError:
    """One line for a SQLite error: a damaged file is bad input (2); a locked, full,
    read-only or unopenable one is a failure to retry or fix elsewhere (1)."""
    text = str(exc)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        return Unavailable(f"database {path} is locked by another process; try again")
    if "full" in lowered:
        return Unavailable(f"database {path}: the disk is full")
    if "readonly" in lowered or "read-only" in lowered:
        return Unavailable(f"database {path} cannot be written (read-only file or media)")
    if "i/o" in lowered and _disk_full(path):
        return Unavailable(f"database {path}: the disk is full")
    if isinstance(exc, sqlite3.OperationalError) or "i/o" in lowered:
        return Unavailable(f"database {path}: {text}")
    return StoreError(f"database {path} cannot be used ({text}); left untouched")
