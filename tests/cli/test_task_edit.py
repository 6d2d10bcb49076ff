"""`tickui task edit`, `tickui task export` and the overridden mark of a hand-edited
config task. Real SQLite files, the real CLI as a process."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest

from helpers import T0, cli, cli_json, write_schema_1_file
from tickui.cli.changes import edited_spec_fields
from tickui.cli.main import build_parser
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS
from tickui.model.export import export_text, spec_fields, toml_string
from tickui.model.spec import build_spec
from tickui.runtime import settings as config_mod
from tickui.store import Store


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT * FROM tasks ORDER BY id").fetchall()


def _subparser(name: str):
    parser = build_parser()
    task = next(a for a in parser._actions if getattr(a, "choices", None) and "task" in a.choices)
    return task.choices["task"]._subparsers._group_actions[0].choices[name]


def _options(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}


def test_edit_takes_every_option_of_add() -> None:
    add, edit = _subparser("add"), _subparser("edit")
    assert _options(add) <= _options(edit)
    assert _options(edit) - _options(add) == {"--rename"}
    # Only the options given reach the namespace.
    args = build_parser().parse_args(["task", "edit", "x", "--timeout", "5s"])
    assert [d for d in args._task_options if hasattr(args, d)] == ["timeout"]
    # Where the store is (--db, --store, --config) is never one of the task's fields.
    for where in (["--store", "x.db"], ["--db", "x.db"], ["--config", "t.toml"]):
        args = build_parser().parse_args(["task", "edit", "x", *where, "--jitter", "1s"])
        assert [d for d in args._task_options if hasattr(args, d)] == ["jitter"], where


def test_cli_edit_with_the_store_given_by_store(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    assert cli("task", "add", "a", "--every", "1m", "--", "true", db=db).returncode == 0
    done = cli("--store", str(db), "task", "edit", "a", "--every", "2m")
    assert done.returncode == 0, done.stderr
    done = cli("task", "edit", "--store", str(db), "a", "--timeout", "5s")
    assert done.returncode == 0, done.stderr
    task = cli_json("task", "list", "--json", db=db)[0]
    assert (task["schedule"], task["timeout"]) == ("every 2m", "5s")


def test_edited_fields_replace_the_schedule_and_clear_with_empty() -> None:
    current = {"name": "a", "cron": "* * * * *", "timeout": "5s", "tz": "Europe/Berlin"}
    raw = edited_spec_fields(current, {"every": "5m", "timeout": "", "disabled": True})
    assert raw == {"name": "a", "every": "5m", "tz": "Europe/Berlin"}


def test_cli_edit_changes_only_what_is_given(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    add = ("task", "add", "a", "--every", "1m", "--timeout", "30s", "--env", "K=v")
    assert cli(*add, "--", "echo", "hi", db=db).returncode == 0
    before = cli_json("task", "show", "a", db=db)[0]
    done = cli("task", "edit", "a", "--misfire", "skip", "--jitter", "2s", db=db)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("edited a: every 1m, next run ")
    after = cli_json("task", "show", "a", db=db)[0]
    assert after["misfire"] == "skip" and after["jitter"] == "2s"
    assert after["generation"] == before["generation"] + 1
    for key in ("schedule", "timeout", "command", "concurrency", "tz", "cwd"):
        assert after[key] == before[key], key
    done = cli("task", "edit", "a", "--cron", "0 9 * * *", "--", "echo", "bye", db=db)
    assert done.returncode == 0, done.stderr
    after = cli_json("task", "show", "a", db=db)[0]
    assert after["schedule"].startswith("0 9 * * *") and after["command"] == ["echo", "bye"]
    assert after["timeout"] == "30s" and after["misfire"] == "skip"
    assert after["next_run_at"].endswith("09:00:00+00:00")
    done = cli("task", "edit", "a", "--timeout", "", "--disabled", "--rename", "b", db=db)
    assert done.returncode == 0, done.stderr
    shown = cli_json("task", "show", "b", db=db)[0]
    assert shown["timeout"] is None and shown["enabled"] is False
    assert cli("task", "show", "a", db=db).returncode == 2


@pytest.mark.parametrize(
    "args",
    [
        ("--misfire", "sometimes"),
        ("--every", "0s"),
        ("--cron", "61 * * * *"),
        ("--at", "2001-01-01T00:00:00Z"),
        ("--cwd", "/no/such/dir"),
        ("--env", "NOEQUALS"),
        ("--tz", "Mars/Olympus"),
        ("--timeout", "-1s"),
        ("--jitter", "2m"),  # longer than the gap between two runs
        ("--every", "1m", "--cron", "* * * * *"),
        ("--rename", "Bad Name"),
        (),  # nothing to change
        ("--retries", "101"),
        ("--",),
    ],
)
def test_a_bad_edit_is_refused_and_changes_no_byte(tmp_path: Path, args) -> None:
    db = tmp_path / "t.db"
    assert cli("task", "add", "a", "--every", "1m", "--", "true", db=db).returncode == 0
    before = _digest(db)
    done = cli("task", "edit", "a", *args, db=db)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tickui: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert _digest(db) == before


def test_a_rename_to_a_taken_name_changes_no_byte(tmp_path: Path) -> None:
    """Found by an adversarial try: the clash was found by the write transaction, whose
    rollback still left SQLite's change counters moved in the file's header."""
    db = tmp_path / "t.db"
    for name in ("a", "b"):
        assert cli("task", "add", name, "--every", "1m", "--", "true", db=db).returncode == 0
    assert cli("run", "--for", "1", db=db).returncode == 0  # as a used database is
    before, rows = _digest(db), _rows(db)
    done = cli("task", "edit", "a", "--rename", "b", db=db)
    assert done.returncode == 2 and "exists already" in done.stderr
    assert _rows(db) == rows and _digest(db) == before
    assert cli("task", "edit", "nope", "--every", "1m", db=db).returncode == 2


async def test_edit_leaves_active_runs_and_cancels_queued_ones(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = await Store.open(db)
    try:
        spec = build_spec({"name": "a", "every": "1m", "command": ["true"]}, T0)
        task = await store.add_task(spec, T0)
        got = await store.acquire_lease("me", T0, 60 * MICROS, ("h", 1, None), lambda *_: False)
        assert got.lease is not None
        active = await store.claim_manual(task, "me", got.lease.token, T0)
        async with store._write():
            cur = await store._conn.execute(
                "INSERT INTO occurrences (task_id, task, kind, scheduled_for, state,"
                " claimed_at, attempt) VALUES (?, 'a', 'scheduled', ?, 'queued', ?, 1)",
                (task.id, T0 + 60 * MICROS, T0),
            )
            queued = cur.lastrowid
        now = T0 + 90 * MICROS
        edited = await store.edit_task(
            "a", build_spec({**spec_fields(spec), "every": "5m"}, T0), now
        )
        assert edited.generation == task.generation + 1
        assert edited.next_run_at == edited.schedule.next_after(now)
        assert (await store.get_occurrence(active.id)).state == "claimed"
        gone = await store.get_occurrence(queued)
        assert gone.state == "cancelled" and gone.detail == "task edited"
    finally:
        await store.close()


# ---- export ---------------------------------------------------------------------------------

WEIRD = 'quote " back \\ tab \t nl \n ctl \x01 del \x7f é 日本 🙂'


def _make_tasks(db: Path, tmp_path: Path) -> None:
    calls = [
        (
            "task",
            "add",
            "c",
            "--cron",
            "30 2 * * 1-5",
            "--tz",
            "Europe/Berlin",
            "--misfire",
            "skip",
            "--concurrency",
            "allow",
            "--",
            "sh",
            "-c",
            WEIRD,
        ),
        (
            "task",
            "add",
            "i",
            "--every",
            "90s",
            "--anchor",
            "2027-01-15T08:00:00.250Z",
            "--jitter",
            "1500ms",
            "--timeout",
            "1.000001s",
            "--cwd",
            str(tmp_path),
            "--env",
            "A=1",
            "--env",
            f"B={WEIRD}",
            "--concurrency",
            "replace",
            "--retries",
            "3",
            "--retry-delay",
            "2h",
            "--retry-on",
            "exit,dispatch",
            "--pause-after",
            "4",
            "--",
            "echo",
            "x",
        ),
        (
            "task",
            "add",
            "o",
            "--at",
            "2099-06-01T12:00:00+02:00",
            "--misfire",
            "run_all",
            "--disabled",
            "--",
            "true",
        ),
        ("task", "add", "d", "--every", "1d", "--", "true"),
        ("task", "disable", "d", "--note", 'on hold "for now"'),
    ]
    for call in calls:
        done = cli(*call, db=db)
        assert done.returncode == 0, (call, done.stderr)


async def test_export_round_trips_through_the_config_loader(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _make_tasks(db, tmp_path)
    done = cli("task", "export", db=db)
    assert done.returncode == 0, done.stderr
    assert '# disabled: on hold \\"for now\\"' in done.stdout
    config = tmp_path / "tickui.toml"
    config.write_text(done.stdout)
    loaded = {s.name: s for s in config_mod.load(config, T0).tasks}
    store = await Store.open(db, readonly=True)
    try:
        tasks = {t.name: t for t in await store.list_tasks()}
    finally:
        await store.close()
    assert sorted(loaded) == sorted(tasks) == ["c", "d", "i", "o"]
    for name, task in tasks.items():
        mine, back = asdict(task.spec), asdict(loaded[name])
        assert back.pop("enabled") is task.enabled, name
        mine.pop("enabled")
        assert back == mine, name
        assert loaded[name].definition_hash() == task.spec.definition_hash()
    assert tasks["c"].spec.command[2] == WEIRD and tasks["i"].spec.env["B"] == WEIRD
    assert tasks["i"].spec.retries == 3 and tasks["i"].spec.pause_after == 4
    assert tasks["i"].spec.retry_max_delay == 2 * 3600 * MICROS  # implied by a 2h delay


async def test_a_sync_of_the_export_changes_no_definition(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _make_tasks(db, tmp_path)
    config = tmp_path / "tickui.toml"
    config.write_text(cli("task", "export", db=db).stdout)
    specs = config_mod.load(config, T0).tasks
    store = await Store.open(db)
    try:
        await store.sync_tasks(specs, T0)  # the CLI's tasks become the file's
        report = await store.sync_tasks(specs, T0 + 1)
        assert report.added == report.updated == report.removed == []
        again = export_text(await store.list_tasks(with_stats=False))
    finally:
        await store.close()

    # The same entries; the note (a comment: the file has no field for it) is gone, as a
    # sync that takes a task over clears the note.
    def entries(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.startswith("# ")]

    assert entries(again) == entries(config.read_text())


def test_export_of_nothing_prints_nothing(tmp_path: Path) -> None:
    done = cli("task", "export", db=tmp_path / "none.db")
    assert done.returncode == 0 and done.stdout == ""
    assert not (tmp_path / "none.db").exists()


def test_toml_string_escapes_what_toml_requires() -> None:
    import tomllib

    text = "".join(chr(c) for c in range(0, 0x80)) + "é🙂"
    assert tomllib.loads(f"v = {toml_string(text)}")["v"] == text


# ---- overridden -----------------------------------------------------------------------------


async def test_a_hand_edit_of_a_config_task_lasts_until_the_file_changes_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    store = await Store.open(db)
    file_spec = build_spec({"name": "s", "every": "1h", "command": ["true"]}, T0)
    hand = build_spec({"name": "s", "every": "10m", "command": ["true"]}, T0)
    try:
        await store.sync_tasks([file_spec], T0)
        edited = await store.edit_task("s", hand, T0 + 1)
        assert edited.overridden is True and edited.source == "config"
        # The same file again: the hand edit stays, still marked.
        report = await store.sync_tasks([file_spec], T0 + 2)
        assert report.updated == []
        kept = await store.get_task("s")
        assert kept.spec == hand and kept.overridden is True
        # Renaming a file's task by hand would lose it at the next sync: refused.
        with pytest.raises(BadInput, match=r"tickui\.toml"):
            await store.edit_task("s", build_spec({**spec_fields(hand), "name": "t"}, T0), T0)
        # The file changes the task: its definition wins and the mark goes.
        changed = build_spec({"name": "s", "every": "2h", "command": ["true"]}, T0)
        report = await store.sync_tasks([changed], T0 + 3)
        assert report.updated == ["s"]
        task = await store.get_task("s")
        assert task.spec == changed and task.overridden is False
        # Edited back to exactly the file's definition: not overridden.
        await store.edit_task("s", hand, T0 + 4)
        back = await store.edit_task("s", changed, T0 + 5)
        assert back.overridden is False
        # A CLI task is never marked.
        await store.add_task(build_spec({"name": "m", "every": "1m", "command": ["x"]}, T0), T0)
        assert (
            await store.edit_task("m", hand.__class__(**{**asdict(hand), "name": "m"}), T0)
        ).overridden is False
    finally:
        await store.close()


async def test_overridden_is_shown_in_list_and_show(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = await Store.open(db)
    try:
        spec = build_spec({"name": "s", "every": "1h", "command": ["true"]}, T0)
        await store.sync_tasks([spec], T0)
    finally:
        await store.close()
    assert cli("task", "edit", "s", "--every", "5m", db=db).returncode == 0
    assert cli_json("task", "show", "s", db=db)[0]["overridden"] is True
    assert cli_json("task", "list", db=db)[0]["overridden"] is True
    listed = cli("task", "list", db=db).stdout
    assert "config (overridden)" in listed
    shown = cli("task", "show", "s", db=db).stdout
    assert "overridden: yes" in shown
    assert json.loads(cli("task", "list", "--json", db=db).stdout)[0]["source"] == "config"


async def test_disable_remove_and_a_file_change_cancel_queued_rows(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "t.db")
    slots = [T0 - 2 * 60 * MICROS, T0 - 60 * MICROS]
    try:
        spec = build_spec({"name": "a", "every": "1m", "command": ["true"]}, T0)
        await store.sync_tasks([spec], T0)

        async def queued_then(action, detail: str) -> None:
            ids, _ = await store.queue_backfill("a", slots, T0)
            assert len(ids) == 2
            await action()
            states = {(o.state, o.detail) for o in await store.occurrences_by_id(ids)}
            assert states == {("cancelled", detail)}

        await queued_then(lambda: store.set_enabled("a", False, T0 + 1), "task disabled")
        task = await store.set_enabled("a", True, T0 + 2)
        assert task.enabled
        changed = build_spec({"name": "a", "every": "2m", "command": ["true"]}, T0)
        await queued_then(lambda: store.sync_tasks([changed], T0 + 3), "task changed")
        await queued_then(lambda: store.remove_task("a", T0 + 4), "task removed")
    finally:
        await store.close()


def test_edit_and_backfill_work_on_a_file_from_an_older_tickui(tmp_path: Path) -> None:

    db = tmp_path / "old.db"
    write_schema_1_file(db)
    done = cli("task", "edit", "old", "--every", "5m", db=db)
    assert done.returncode == 0, done.stderr
    assert cli_json("task", "show", "old", db=db)[0]["schedule"] == "every 5m"
    db2 = tmp_path / "old2.db"
    write_schema_1_file(db2)
    rng = ("--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:10:00Z")
    done = cli("task", "backfill", "old", *rng, db=db2)
    assert done.returncode == 0 and "queued 10 backfill" in done.stdout, done.stderr


def test_a_task_named_like_a_secret_key_still_shows_its_schedule(tmp_path: Path) -> None:
    """Found by an adversarial try: "added secret: every 1s" was printed "added secret: ***
    1s" (the line read as `secret: <value>`); the parts are redacted one by one now."""
    db = tmp_path / "t.db"
    added = cli("task", "add", "secret", "--every", "1s", "--", "true", db=db)
    assert added.stdout.startswith("added secret: every 1s, next run "), added.stdout
    edited = cli("task", "edit", "secret", "--every", "2s", db=db)
    assert edited.stdout.startswith("edited secret: every 2s, next run "), edited.stdout
