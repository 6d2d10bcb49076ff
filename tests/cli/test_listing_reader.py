"""`task list` and `history` read a SQLite file through a blocking reader (no event loop);
the Store reads it for any other store. Both must read the same values and print the same
bytes, text and --json, for tasks with stats and runs in every state."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from pathlib import Path

import pytest

from helpers import T0, cli, write_schema_1_file
from tickui.cli import listing
from tickui.cli.main import build_parser
from tickui.cli.task import cmd_history, cmd_task
from tickui.common.errors import StoreError, Unavailable
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import STATES
from tickui.model.spec import build_spec
from tickui.store import Reader, Store, is_sqlite_file

S = MICROS


async def _fill(db: Path) -> None:
    """Tasks of each kind (interval, cron in a zone, disabled with a note, from a config
    file, hand-edited over one) and runs of every state, retries, workers, details."""
    store = await Store.open(db)
    try:
        for fields in (
            {"name": "every-minute", "every": "1m", "retries": "2"},
            {"name": "nightly", "cron": "30 2 * * *", "tz": "Asia/Tokyo", "timeout": "1h"},
            {"name": "quiet", "every": "5m", "jitter": "10s"},
            {"name": "never-ran", "at": "2099-01-01T00:00:00Z"},
        ):
            await store.add_task(build_spec({**fields, "command": ["true"]}, T0), T0)
        await store.set_enabled("quiet", False, T0, note="paused for the move")
        synced = [build_spec({"name": n, "every": "1h", "command": ["date"]}, T0) for n in "ab"]
        await store.sync_tasks(synced, T0)
        edited = build_spec({"name": "b", "every": "2h", "command": ["date"]}, T0)
        await store.edit_task("b", edited, T0)
        tasks = {t.name: t for t in await store.list_tasks()}
    finally:
        await store.close()
    rows = []
    slot = T0
    for n in range(3):
        for name in ("every-minute", "nightly", "a"):
            for state in STATES:
                slot += 60 * S
                started = slot + S if state not in ("queued", "claimed", "skipped") else None
                finished = started + (n + 1) * S if state in ("succeeded", "failed") else None
                attempt = 2 if state == "queued" and name == "every-minute" else 1
                rows.append((
                    tasks[name].id, name, "backfill" if n == 2 else "scheduled", slot, state,
                    slot, started, finished, 1 if state == "failed" else None,
                    "exit" if state == "failed" else None, f"run {n}\tof {state}",
                    attempt, T0 if attempt > 1 else None, "w1" if name == "a" else None,
                ))  # fmt: skip
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state, claimed_at,"
            " started_at, finished_at, exit_code, error_code, detail, attempt, retry_at,"
            " worker) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    conn.close()


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("listing") / "t.db"
    asyncio.run(_fill(path))
    return path


async def _store_reads(db: Path) -> tuple:
    store = await Store.open(db, readonly=True)
    try:
        return (
            await store.list_tasks(),
            await store.list_tasks(with_stats=False),
            await store.find_task("every-minute"),
            await store.find_task("gone"),
            await store.history(None, 1000),
            await store.history("nightly", 5),
        )
    finally:
        await store.close()


def test_the_reader_reads_what_the_store_reads(db):
    with Reader.open(db) as reader:
        read = (
            reader.list_tasks(),
            reader.list_tasks(with_stats=False),
            reader.find_task("every-minute"),
            reader.find_task("gone"),
            reader.history(None, 1000),
            reader.history("nightly", 5),
        )
    stored = asyncio.run(_store_reads(db))
    assert read == stored
    tasks = {t.name: t for t in read[0]}
    assert tasks["every-minute"].stats.retry_attempt == 2  # the stats were read
    assert tasks["every-minute"].stats.median_duration_us == 2 * S
    assert tasks["b"].overridden and tasks["quiet"].note == "paused for the move"
    assert {o.state for o in read[4]} == set(STATES)


def _args(*words: str) -> argparse.Namespace:
    return build_parser().parse_args(list(words))


def _printed(capsys, call) -> tuple[int, str, str]:
    code = call()
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("as_json", [(), ("--json",)], ids=["text", "json"])
@pytest.mark.parametrize(
    "words",
    [
        ("task", "list"),
        ("history",),
        ("history", "--limit", "7"),
        ("history", "a"),
        ("history", "nightly", "--limit", "4"),
    ],
    ids=" ".join,
)
def test_the_listings_print_the_same_bytes_either_way(db, capsys, monkeypatch, words, as_json):
    # one "now" for both paths: a queued run says "next in 40s", and a second may pass
    # between the two readings
    from tickui.common.clock import SystemClock

    fixed = SystemClock().now()
    monkeypatch.setattr(SystemClock, "now", lambda self: fixed)
    args = _args(*words, *as_json)
    if args.command == "task":
        fast = _printed(capsys, lambda: listing.list_now(args, db))
        slow = _printed(capsys, lambda: asyncio.run(cmd_task(args, None, db)))
    else:
        fast = _printed(capsys, lambda: listing.history_now(args, db))
        slow = _printed(capsys, lambda: asyncio.run(cmd_history(args, db)))
    assert fast == slow
    assert fast[0] == 0 and fast[1].count("\n") > 3


@pytest.mark.parametrize("as_json", [(), ("--json",)], ids=["text", "json"])
def test_no_database_reads_the_same_either_way(tmp_path, capsys, as_json):
    missing = tmp_path / "none.db"
    for command, fast, slow in (
        (("task", "list"), listing.list_now, lambda a, p: cmd_task(a, None, p)),
        (("history",), listing.history_now, cmd_history),
    ):
        args = _args(*command, *as_json)
        quick = _printed(capsys, lambda: fast(args, missing))  # noqa: B023
        stored = _printed(capsys, lambda: asyncio.run(slow(args, missing)))  # noqa: B023
        assert quick == stored
        assert "no database at" in quick[2]
    assert not missing.exists()


def test_the_reader_refuses_what_a_readonly_store_refuses(tmp_path):
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (id INTEGER)")
    conn.close()
    newer = tmp_path / "newer.db"
    asyncio.run(_fill(newer))
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 999")
    conn.close()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all, not even close to one")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    old = tmp_path / "old.db"
    write_schema_1_file(old)
    for path, kind in (
        (foreign, StoreError),
        (newer, StoreError),
        (garbage, StoreError),
        (empty, Unavailable),
        (old, Unavailable),  # to be migrated by a command that writes
        (tmp_path / "none.db", Unavailable),
    ):
        with pytest.raises(kind) as by_reader:
            Reader.open(path)
        with pytest.raises(kind) as by_store:
            asyncio.run(Store.open(path, readonly=True))
        assert str(by_reader.value) == str(by_store.value)


@pytest.mark.parametrize(
    "args, said",
    [
        (("task", "list"), "belongs to another program"),
        (("history", "--limit", "20"), "belongs to another program"),
        (("history", "--json"), "belongs to another program"),
    ],
)
def test_a_listing_of_a_foreign_file_is_one_line_exit_2(tmp_path, args, said):
    foreign = tmp_path / "other.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE notes (id INTEGER)")
    conn.close()
    before = foreign.read_bytes()
    done = cli(*args, db=foreign)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr
    assert foreign.read_bytes() == before


def test_only_a_file_path_is_read_by_the_reader():
    assert is_sqlite_file(Path("/tmp/t.db")) and is_sqlite_file("relative/t.db")
    assert is_sqlite_file("C:/tickui/t.db")  # a drive letter is not a scheme
    assert not is_sqlite_file("postgresql://tickui@db.example/tickui")
    assert not is_sqlite_file(str(Path("postgresql://tickui@db.example/tickui")))
