"""`tickui audit`: what people did from the command line, read back by the real CLI on a
real SQLite file and on PostgreSQL, with who (user, TICKUI_HOST), when and from where."""

from __future__ import annotations

import getpass
import json
import re
import time
from datetime import datetime

from helpers import cli


def _run(store, *args: str, host: str = "audit-host-1"):
    env = {"TICKUI_HOST": host}
    if isinstance(store, str):  # a PostgreSQL URL
        env["TICKUI_STORE"] = store
        result = cli(*args, env=env)
    else:
        result = cli(*args, db=store, env=env)
    assert result.returncode == 0, result.stderr
    return result


def test_command_line_changes_are_listed_with_who_when_and_where(store_target):
    before = time.time()
    _run(store_target, "task", "add", "job", "--every", "10s", "--", "true")
    _run(store_target, "task", "disable", "job", "--note", "db migration")
    _run(store_target, "task", "enable", "job", host="audit-host-2")
    _run(store_target, "task", "run-now", "job")  # no engine runs: queued for one
    _run(store_target, "task", "edit", "job", "--every", "20s")
    _run(store_target, "task", "backfill", "job", "--from", "2026-01-01T00:00:00Z",
         "--to", "2026-01-01T00:01:00Z")  # fmt: skip
    _run(store_target, "task", "backfill", "job", "--cancel")
    _run(store_target, "task", "add", "other", "--every", "1h", "--", "true")
    _run(store_target, "task", "rm", "other")
    after = time.time()

    entries = json.loads(_run(store_target, "audit", "--json").stdout)
    assert [(e["action"], e["task"]) for e in reversed(entries)] == [
        ("add", "job"), ("disable", "job"), ("enable", "job"), ("run-now", "job"),
        ("edit", "job"), ("backfill", "job"), ("backfill-cancel", "job"), ("add", "other"),
        ("delete", "other"),
    ]  # fmt: skip
    assert {e["user"] for e in entries} == {getpass.getuser()}
    assert [e["host"] for e in reversed(entries)][:4] == [
        "audit-host-1", "audit-host-1", "audit-host-2", "audit-host-1"
    ]  # fmt: skip
    assert {e["origin"] for e in entries} == {"cli"}
    assert all(isinstance(e["pid"], int) and e["pid"] > 0 for e in entries)
    times = [datetime.fromisoformat(e["at"]).timestamp() for e in reversed(entries)]
    assert before <= times[0] and times[-1] <= after and times == sorted(times)
    details = {e["action"]: e["detail"] for e in entries}
    assert details["disable"] == "db migration"
    assert details["enable"] == "was: db migration"
    assert details["run-now"].startswith("request ")
    assert details["edit"] == "changed every"
    assert re.fullmatch(
        r"slots 2026-01-01T00:00:\d\d\+00:00 to 2026-01-01T00:0\d:\d\d\+00:00:"
        r" 3 queued, 0 had a run",
        details["backfill"],
    ), details["backfill"]
    assert details["backfill-cancel"] == "3 queued backfill run(s) cancelled"

    newest = json.loads(
        _run(store_target, "audit", "--task", "job", "--limit", "2", "--json").stdout
    )
    assert [e["action"] for e in newest] == ["backfill-cancel", "backfill"]
    text = _run(store_target, "audit", "--limit", "1").stdout.splitlines()
    assert text[0].split() == ["TIME", "USER@HOST", "ORIGIN", "ACTION", "TASK", "DETAIL"]
    assert text[1].split()[3:] == [f"{getpass.getuser()}@audit-host-1", "cli", "delete", "other",
                                   "every", "1h"]  # fmt: skip


def test_bad_input_is_one_line_exit_2(tmp_path):
    db = tmp_path / "t.db"
    _run(db, "task", "add", "job", "--every", "10s", "--", "true")
    for args in (("--limit", "-1"), ("--limit", "0"), ("--limit", "10001"), ("--task", "Bad Name")):
        result = cli("audit", *args, db=db)
        assert result.returncode == 2, args
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        assert result.stdout == ""
    assert cli("audit", "--limit", "-1", db=db).stderr.startswith(
        "tickui: argument --limit: -1 is out of range"
    )


def test_no_database_lists_nothing_and_creates_none(tmp_path):
    db = tmp_path / "none.db"
    result = cli("audit", "--json", db=db)
    assert result.returncode == 0 and json.loads(result.stdout) == []
    assert not db.exists()


def test_the_listing_reads_a_sqlite_file_without_writing_it(tmp_path):
    db = tmp_path / "t.db"
    _run(db, "task", "add", "job", "--every", "10s", "--", "true")
    before = db.stat().st_mtime_ns
    assert [e["action"] for e in json.loads(_run(db, "audit", "--json").stdout)] == ["add"]
    assert db.stat().st_mtime_ns == before
