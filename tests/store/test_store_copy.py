"""`tickui store copy`: a setup moved from a SQLite file to PostgreSQL and back answers the
same `task list`, `history` and `hooks`; a dry run writes nothing; a target that holds
tasks or runs is refused unless --replace."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from engine_procs import rows

from helpers import cli


def _out(*args: str, db) -> str:
    result = cli(*args, db=db)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _setup(db: Path, tmp_path: Path) -> None:
    """Two tasks with 5,000 backfilled slots each (10,000 occurrences), real runs with
    their events, a failure its hook recorded."""
    config = tmp_path / "tickui.toml"
    config.write_text(f'[engine]\ndb = "{db}"\n[[hook]]\non = ["failed"]\ncommand = ["true"]\n')
    _out("task", "add", "a", "--every", "1s", "--", "true", db=db)
    _out("task", "add", "b", "--every", "1s", "--", "false", db=db)
    for name in ("a", "b"):
        _out("task", "backfill", name, "--from", "2026-01-01T00:00:00Z",
             "--to", "2026-01-01T01:23:20Z", "--max", "5000", db=db)  # fmt: skip
    ran = cli("run", "--for", "2", "--config", str(config), timeout=120)
    assert ran.returncode == 0, ran.stderr


VIEWS = (
    ("task", "list", "--json"),
    ("history", "--json", "--limit", "20000"),
    ("hooks", "--json", "--limit", "1000"),
    ("audit", "--json", "--limit", "10000"),
)


def _views(db) -> list[str]:
    """What each read-only view says; the four processes run side by side."""
    with ThreadPoolExecutor(len(VIEWS)) as pool:
        return list(pool.map(lambda args: _out(*args, db=db), VIEWS))


@pytest.mark.slow
def test_a_setup_moves_to_postgresql_and_back_unchanged(tmp_path, pg_url):
    source, back = tmp_path / "from.db", tmp_path / "back.db"
    _setup(source, tmp_path)
    before = _views(source)
    assert len(json.loads(before[1])) >= 10_000
    assert json.loads(before[2]), "the failed runs' hook deliveries"
    assert len(json.loads(before[3])) == 4, "the adds and backfills, audited"

    dry = cli("store", "copy", "--from", str(source), "--to", pg_url, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would copy 2 tasks" in dry.stdout
    assert rows(pg_url, "SELECT 1 FROM tickui_meta") == []  # nothing written, not even a schema

    moved = cli("store", "copy", "--from", str(source), "--to", pg_url, "--json")
    assert moved.returncode == 0, moved.stderr
    counts = json.loads(moved.stdout)["copied"]
    assert counts["occurrences"] >= 10_000 and counts["tasks"] == 2 and counts["events"] > 0
    assert _views(pg_url) == before

    again = cli("store", "copy", "--from", str(source), "--to", pg_url)
    assert again.returncode == 2 and "is not empty" in again.stderr
    assert again.stderr.count("\n") == 1

    assert cli("store", "copy", "--from", pg_url, "--to", str(back)).returncode == 0
    assert _views(back) == before
    assert not (tmp_path / "never.db").exists()
    dry_file = cli("store", "copy", "--from", pg_url, "--to", str(tmp_path / "never.db"),
                   "--dry-run")  # fmt: skip
    assert dry_file.returncode == 0 and not (tmp_path / "never.db").exists()


def test_replace_empties_the_target_first(tmp_path, pg_url):
    source = tmp_path / "from.db"
    _out("task", "add", "new", "--every", "1m", "--", "true", db=source)
    _out("task", "add", "old", "--every", "1m", "--", "true", db=pg_url)
    replaced = cli("store", "copy", "--from", str(source), "--to", pg_url, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert "replaced 1 tasks" in replaced.stdout
    names = [t["name"] for t in json.loads(_out("task", "list", "--json", db=pg_url))]
    assert names == ["new"]
    # the next task gets the next id: the copied rows did not confuse numbering
    _out("task", "add", "after", "--every", "1m", "--", "true", db=pg_url)
    with psycopg.connect(pg_url) as conn:
        ids = dict(conn.execute("SELECT name, id FROM tasks").fetchall())
    assert ids["after"] > ids["new"]


def test_bad_targets_are_one_line(tmp_path):
    missing = cli(
        "store", "copy", "--from", str(tmp_path / "no.db"), "--to", str(tmp_path / "x.db")
    )
    assert missing.returncode == 1 and "no database at" in missing.stderr
    same = cli("store", "copy", "--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "a.db"))
    assert same.returncode == 2 and "same store" in same.stderr
    # the same store spelled another way: a relative path, a URL with its password
    spelled = cli("store", "copy", "--from", str(tmp_path / "a.db"), "--to", "a.db", cwd=tmp_path)
    assert spelled.returncode == 2 and "same store" in spelled.stderr
    url = "postgresql://u@db.example:5432/x"
    with_password = url.replace("u@", "u:secret@")
    twice = cli("store", "copy", "--from", url, "--to", with_password)
    assert twice.returncode == 2 and "same store" in twice.stderr
    assert "secret" not in twice.stderr
    scheme = cli("store", "copy", "--from", "mysql://x/y", "--to", str(tmp_path / "a.db"))
    assert scheme.returncode == 2 and "is not a store" in scheme.stderr
