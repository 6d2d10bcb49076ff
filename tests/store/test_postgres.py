"""The PostgreSQL store through the real command line: the same answers as on a SQLite
file, its schema versioned, and its faults one line with no password in it."""

from __future__ import annotations

import json
import os

import psycopg

import services
from helpers import cli


def _json(result) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _comparable(rows: list[dict]) -> list[dict]:
    """What two stores must agree on: everything but the times the runs happened at."""
    times = {"next_run_at", "due_at", "created_at", "updated_at", "anchor", "claimed_at",
             "accepted_at", "started_at", "finished_at", "scheduled_for", "log_path", "next",
             "last", "stats", "run_id", "owner", "pid", "pgid", "pid_start", "duration_s",
             "lease_token", "worker", "deadline"}  # fmt: skip
    return [{k: v for k, v in row.items() if k not in times} for row in rows]


def test_every_command_answers_the_same_on_both_stores(store_target, tmp_path):
    db = str(store_target)
    assert cli("task", "add", "hello", "--every", "1s", "--", "echo", "hi", db=db).returncode == 0
    assert cli("task", "add", "boom", "--every", "1s", "--", "false", db=db).returncode == 0
    added = cli("task", "add", "hello", "--every", "1s", "--", "true", db=db)
    assert added.returncode == 2 and "exists already" in added.stderr
    run = cli("run", "--for", "2.5", db=db, timeout=60)
    assert run.returncode == 0, run.stderr
    tasks = _json(cli("task", "list", "--json", db=db))
    assert [t["name"] for t in tasks] == ["boom", "hello"]
    runs = _json(cli("history", "--limit", "50", "--json", db=db))
    states = {(r["task"], r["state"]) for r in runs}
    # a slot may be skipped (late on a loaded machine, or overlapping): said, not run
    assert {("hello", "succeeded"), ("boom", "failed")} <= states, states
    assert {s for _, s in states} <= {"succeeded", "failed", "skipped"}, states
    assert cli("task", "disable", "boom", "--note", "flaky", db=db).returncode == 0
    shown = _json(cli("task", "list", "--json", db=db))
    assert [t["enabled"] for t in shown] == [False, True]
    assert cli("task", "rm", "boom", db=db).returncode == 0
    assert [t["name"] for t in _json(cli("task", "list", "--json", db=db))] == ["hello"]


def test_a_newer_schema_is_refused_in_one_line_and_left_alone(pg_url):
    url = pg_url
    assert cli("task", "add", "a", "--every", "1m", "--", "true", db=url).returncode == 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE tickui_meta SET value = '99' WHERE key = 'schema'")
        before = conn.execute("SELECT count(*), max(updated_at) FROM tasks").fetchone()
    for args in (("task", "list"), ("task", "add", "b", "--every", "1m", "--", "true")):
        result = cli(*args, db=url)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "newer than this tickui's" in result.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*), max(updated_at) FROM tasks").fetchone() == before


def test_a_database_of_another_program_is_refused(pg_url):
    url = pg_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE tasks (id int, title text)")
    result = cli("task", "add", "a", "--every", "1m", "--", "true", db=url)
    assert result.returncode == 2 and "another program" in result.stderr, result.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('tickui_meta')").fetchone()[0] is None


def test_faults_are_one_line_without_the_password():
    url = services.pg_admin_url()
    password = os.environ["PGPASSWORD"]
    wrong = url.replace("tickui@", "tickui:not-the-password-xyz@", 1)
    no_server = "postgresql://tickui:not-the-password-xyz@127.0.0.1:1/postgres"
    env = {"PGPASSWORD": "", "PGPASSFILE": "/nonexistent"}
    for target, said in ((wrong, "password authentication failed"), (no_server, "refused")):
        result = cli("task", "list", db=target, env=env)
        assert result.returncode == 1, result
        assert result.stderr.count("\n") == 1 and said in result.stderr, result.stderr
        assert "not-the-password-xyz" not in result.stderr + result.stdout
        assert password not in result.stderr + result.stdout
    result = cli("task", "list", "--store", "mysql://db/x")
    assert result.returncode == 2 and "is not a store" in result.stderr


def test_the_store_setting_wins_over_the_db_setting(tmp_path, pg_url):
    url = pg_url
    file = tmp_path / "t.db"
    assert cli("task", "add", "f", "--every", "1m", "--", "true", db=file).returncode == 0
    env = {"TICKUI_STORE": url}
    assert cli("task", "add", "p", "--every", "1m", "--", "true", env=env).returncode == 0
    on_pg = _json(cli("task", "list", "--json", env=env))
    assert [t["name"] for t in on_pg] == ["p"]
    flag_wins = _json(cli("task", "list", "--json", db=file, env=env))  # a flag, then env
    assert [t["name"] for t in flag_wins] == ["f"]
    toml = tmp_path / "tickui.toml"
    toml.write_text(f'[store]\nurl = "{url}"\n')
    from_file = _json(cli("task", "list", "--json", "--config", str(toml)))
    assert [t["name"] for t in from_file] == ["p"]


def test_time_lapse_on_a_postgresql_store_runs_on_a_file_copy(pg_url):
    assert cli("task", "add", "t", "--every", "1m", "--", "true", db=pg_url).returncode == 0
    before = _json(cli("history", "--json", db=pg_url))
    ran = cli("run", "--time-scale", "600", "--for", "1", db=pg_url)
    assert ran.returncode == 0, ran.stderr
    assert "time-lapse x600 on a copy of postgresql:" in ran.stderr, ran.stderr
    assert ran.stdout.count("succeeded") >= 3  # ten minutes of slots, simulated
    assert _json(cli("history", "--json", db=pg_url)) == before  # the real store untouched
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
