"""The database file: private permissions, read-only commands that never write, and one
line (never a traceback) with the README's exit code wherever the file cannot be used.

Real files and real `tickui` processes. Read-only media and a full disk are real mounts,
so those tests need root (they run as root in CI) and say so when skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import stat
import subprocess
import time
from pathlib import Path

import pytest

from helpers import cli
from services import cannot_here
from tickui.store import schema

READ_ONLY = [
    ["task", "list"],
    ["task", "list", "--json"],
    ["task", "show", "job"],
    ["task", "show", "job", "--json"],
    ["history"],
    ["history", "--json"],
    ["history", "job"],
]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _fingerprint(path: Path) -> tuple[str, int]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns


def _one_line(result, code: int, *words: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def _make_db(db: Path, failing: bool = True) -> None:
    """A database with a task and one recorded run (`history` has something to show)."""
    added = cli("task", "add", "job", "--every", "1h", "--", "sh", "-c", "exit 3", db=db)
    assert added.returncode == 0, added.stderr
    if failing:
        assert cli("task", "run-now", "job", db=db).returncode == 0
        run = cli("run", "--for", "1.5", db=db)
        assert run.returncode == 0, run.stderr
    # A clean stop checkpoints the WAL and removes -wal/-shm, as on a real machine.
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{db}{suffix}").exists()


def _root() -> None:
    if os.geteuid() != 0:
        cannot_here("needs root: mounts a read-only bind mount or a small tmpfs")


@contextlib.contextmanager
def _mount(*args: str, target: Path):
    target.mkdir(exist_ok=True)
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        cannot_here(f"cannot mount here ({done.stderr.strip()})")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@contextlib.contextmanager
def _read_only_copy(source: Path, target: Path):
    """`source` (a folder) seen read-only at `target` through a bind mount."""
    with _mount("--bind", str(source), target=target):
        done = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(target)], capture_output=True, text=True
        )
        if done.returncode != 0:
            cannot_here(f"cannot remount read-only ({done.stderr.strip()})")
        yield target


def _fill(folder: Path) -> None:
    """Fill the file system of `folder` to the last byte."""
    fd = os.open(folder / "filler", os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for chunk in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    assert os.statvfs(folder).f_bavail == 0


# ---- permissions -----------------------------------------------------------------------


def test_new_database_and_its_folders_are_private_whatever_the_umask(tmp_path):
    db = tmp_path / "a" / "b" / "t.db"
    old = os.umask(0)
    try:
        result = cli("task", "add", "job", "--every", "1h", "--", "true", db=db)
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    assert _mode(db) == 0o600
    assert _mode(tmp_path / "a") == 0o700 and _mode(tmp_path / "a" / "b") == 0o700


def test_an_existing_0666_database_is_made_owner_only_when_opened_for_writing(tmp_path):
    db = tmp_path / "t.db"
    _make_db(db, failing=False)
    logs = tmp_path / "t.db.logs"
    logs.mkdir(exist_ok=True)
    side = [Path(f"{db}-wal"), Path(f"{db}-shm")]
    other = sqlite3.connect(db)  # keeps -wal and -shm in place, as a running engine would
    other.execute("SELECT count(*) FROM tasks").fetchone()
    try:
        for path in [db, *side]:
            path.chmod(0o666)
        logs.chmod(0o777)
        # A read-only command changes nothing, not even the mode.
        assert cli("task", "list", db=db).returncode == 0
        assert _mode(db) == 0o666
        result = cli("task", "disable", "job", db=db)
        assert result.returncode == 0, result.stderr
        assert [_mode(p) for p in [db, *side]] == [0o600, 0o600, 0o600]
        assert _mode(logs) == 0o700
    finally:
        other.close()


def test_a_database_that_is_not_the_users_is_refused_with_the_fix(tmp_path):
    _root()
    db = tmp_path / "t.db"
    _make_db(db, failing=False)
    os.chown(db, 54321, 54321)
    db.chmod(0o666)
    before = _fingerprint(db)
    for args in (["task", "disable", "job"], ["task", "add", "b", "--every", "1s", "--", "true"]):
        _one_line(cli(*args, db=db), 1, str(db), "chmod 600", "54321")
    assert _fingerprint(db) == before and _mode(db) == 0o666
    # Reading someone else's file is harmless and still works.
    assert cli("task", "list", db=db).returncode == 0


# ---- read-only commands ----------------------------------------------------------------


def test_read_only_commands_leave_the_file_unchanged(tmp_path):
    db = tmp_path / "t.db"
    _make_db(db)
    before = _fingerprint(db)
    time.sleep(0.01)  # an mtime written now would differ
    for args in READ_ONLY:
        result = cli(*args, db=db)
        assert result.returncode == 0, (args, result.stderr)
    _one_line(cli("task", "show", "nope", db=db), 2, "nope")
    _one_line(cli("history", "nope", db=db), 2, "nope")
    assert _fingerprint(db) == before


def test_read_only_commands_work_beside_a_held_write_lock(tmp_path):
    db = tmp_path / "t.db"
    _make_db(db)
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("UPDATE tasks SET note = 'uncommitted'")
    try:
        for args in READ_ONLY:
            started = time.monotonic()
            result = cli(*args, db=db)
            assert result.returncode == 0, (args, result.stderr)
            assert time.monotonic() - started < 4, "a reader waited for the writer"
            assert "uncommitted" not in result.stdout
        # A write has to wait, and gives up in one line with exit 1.
        _one_line(cli("task", "disable", "job", db=db), 1, "locked")
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_read_only_commands_work_on_read_only_media_and_writes_fail_in_one_line(tmp_path):
    _root()
    source = tmp_path / "src"
    source.mkdir()
    _make_db(source / "t.db")
    with _read_only_copy(source, tmp_path / "ro") as ro:
        db = ro / "t.db"
        before = _fingerprint(db)
        for args in READ_ONLY:
            result = cli(*args, db=db)
            assert result.returncode == 0, (args, result.stderr)
        assert "job" in cli("task", "list", db=db).stdout
        _one_line(cli("task", "disable", "job", db=db), 1, str(db))
        new = ro / "new.db"
        _one_line(cli("task", "add", "x", "--every", "1s", "--", "true", db=new), 1, str(new))
        _one_line(cli("task", "add", "x", "--every", "1s", "--", "true", db=ro / "d" / "n.db"), 1)
        assert _fingerprint(db) == before
        assert sorted(p.name for p in ro.iterdir()) == sorted(p.name for p in source.iterdir())


def test_read_only_commands_work_on_a_full_disk_and_writes_fail_in_one_line(tmp_path):
    _root()
    with _mount("-t", "tmpfs", "-o", "size=400k", "tmpfs", target=tmp_path / "small") as small:
        db = small / "t.db"
        _make_db(db)
        _fill(small)
        before = _fingerprint(db)
        for args in READ_ONLY:
            result = cli(*args, db=db)
            assert result.returncode == 0, (args, result.stderr)
        assert "EXIT_NONZERO" in cli("history", db=db).stdout
        assert _fingerprint(db) == before
        _one_line(cli("task", "add", "b", "--every", "1s", "--", "true", db=db), 1, "full")
        new = small / "sub" / "new.db"
        _one_line(cli("task", "add", "b", "--every", "1s", "--", "true", db=new), 1, "full")
        assert not (small / "sub").exists(), "a failed create leaves nothing behind"


def test_a_missing_database_is_said_and_nothing_is_created(tmp_path):
    db = tmp_path / "deep" / "er" / "t.db"
    for args in (["task", "list"], ["history"]):
        result = cli(*args, db=db)
        assert result.returncode == 0, result.stderr
        assert "no database" in result.stderr and str(db) in result.stderr
    assert cli("task", "list", "--json", db=db).stdout.strip() == "[]"
    assert cli("history", "--json", db=db).stdout.strip() == "[]"
    for args in (
        ["task", "show", "job"],
        ["history", "job"],
        ["task", "enable", "job"],
        ["task", "disable", "job"],
        ["task", "rm", "job"],
        ["task", "run-now", "job"],
    ):
        _one_line(cli(*args, db=db), 2, "job", "no database")
    assert not (tmp_path / "deep").exists()


def test_an_older_schema_is_read_where_it_can_be_and_never_migrated_by_a_reader(tmp_path):
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    for statement in schema.MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    before = _fingerprint(db)
    _one_line(cli("task", "list", db=db), 1, "migrate", str(db))
    _one_line(cli("history", db=db), 1, "migrate")
    assert _fingerprint(db) == before
    # Any write command migrates it.
    assert cli("task", "add", "j", "--every", "1s", "--", "true", db=db).returncode == 0
    assert cli("history", db=db).returncode == 0


# ---- odd places ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "code"),
    [
        ("/proc/tickui-test.db", 1),  # cannot be created there
        ("/proc/self/nope/t.db", 1),
        ("FILE/t.db", 1),  # a folder under a regular file
        ("FILE/deeper/t.db", 1),
        ("/proc/self/status", 2),  # not a tickui database
        ("/proc/self/mem", 1),  # cannot be read
        ("DIR", 2),  # a directory is not a database
    ],
)
def test_odd_database_paths_give_one_line_not_a_traceback(tmp_path, where, code):
    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder\n")
    (tmp_path / "dir").mkdir()
    path = where.replace("FILE", str(plain)).replace("DIR", str(tmp_path / "dir"))
    _one_line(cli("task", "add", "job", "--every", "1s", "--", "true", db=Path(path)), code)
    run = cli("run", "--for", "1", db=Path(path))
    _one_line(run, code)
    listed = cli("task", "list", db=Path(path))
    assert "Traceback" not in listed.stderr
    assert plain.read_text() == "not a folder\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "plain.txt"]


def test_a_tilde_db_path_is_the_same_file_for_every_command(tmp_path):
    """`--db '~/t.db'` (quoted, or from TICKUI_DB): the readers look where the writer
    created it; a `~user` that does not exist is bad input, in one line."""
    env = {"HOME": str(tmp_path)}
    added = cli("--db", "~/t.db", "task", "add", "job", "--every", "1h", "--", "true", env=env)
    assert added.returncode == 0, added.stderr
    assert (tmp_path / "t.db").exists()
    for args in READ_ONLY:
        result = cli("--db", "~/t.db", *args, env=env, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
        assert "no database" not in result.stderr
    listed = cli("task", "list", env={**env, "TICKUI_DB": "~/t.db"}, cwd=tmp_path)
    assert "job" in listed.stdout
    assert not (tmp_path / "~").exists()
    for args in (["task", "list"], ["task", "add", "job", "--every", "1h", "--", "true"]):
        result = cli("--db", "~no_such_user_zz/t.db", *args, env=env, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
