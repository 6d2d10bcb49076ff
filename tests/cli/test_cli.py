"""The command line as a user drives it: real processes, a real database file."""

from __future__ import annotations

import argparse
import hashlib
import json
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from helpers import cli, cli_json
from tickui.cli.main import build_parser
from tickui.store import schema


def test_add_list_show_enable_disable_rm(tmp_path):
    db = tmp_path / "t.db"
    added = cli(
        "task",
        "add",
        "backup",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
        "--misfire",
        "skip",
        "--concurrency",
        "replace",
        "--timeout",
        "5m",
        "--",
        "sh",
        "-c",
        "echo hi",
        db=db,
    )
    assert added.returncode == 0, added.stderr
    assert "backup" in added.stdout
    (task,) = cli_json("task", "list", db=db)
    assert task["name"] == "backup"
    assert task["schedule"] == "30 2 * * * (Europe/Berlin)"
    assert task["enabled"] is True
    assert task["misfire"] == "skip" and task["concurrency"] == "replace"
    assert task["command"] == ["sh", "-c", "echo hi"]
    next_run = datetime.fromisoformat(task["next_run_at"])
    assert next_run.utcoffset() == timedelta(0) and next_run > datetime.now(UTC)
    (shown,) = cli_json("task", "show", "backup", db=db)
    previews = [datetime.fromisoformat(t) for t in shown["preview"]]
    assert len(previews) == 5 and previews == sorted(previews)
    assert all(
        p.astimezone(_zone("Europe/Berlin")).strftime("%H:%M") in ("02:30", "03:00")
        for p in previews
    )

    assert cli("task", "disable", "backup", "--note", "disk full", db=db).returncode == 0
    (task,) = cli_json("task", "list", db=db)
    assert task["enabled"] is False and task["note"] == "disk full"
    assert task["next_run_at"] is None
    assert cli("task", "enable", "backup", db=db).returncode == 0
    (task,) = cli_json("task", "list", db=db)
    assert task["enabled"] is True and task["next_run_at"] is not None

    human = cli("task", "list", db=db)
    assert "backup" in human.stdout and "30 2 * * *" in human.stdout
    assert cli("task", "rm", "backup", db=db).returncode == 0
    assert cli_json("task", "list", db=db) == []


def _zone(name):
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def test_run_and_history_json(tmp_path):
    db = tmp_path / "t.db"
    out = tmp_path / "out.txt"
    assert (
        cli(
            "task",
            "add",
            "tick",
            "--every",
            "1s",
            "--",
            "sh",
            "-c",
            f"echo $TICKUI_SCHEDULED_FOR >> {out}",
            db=db,
        ).returncode
        == 0
    )
    assert (
        cli("task", "add", "bad", "--every", "1s", "--", "sh", "-c", "exit 4", db=db).returncode
        == 0
    )
    run = cli("run", "--for", "3", db=db)
    assert run.returncode == 0, run.stderr
    final = json.loads(run.stderr.strip().splitlines()[-1])
    assert final["engine"]["lease_state"] == "none" and final["engine"]["running"] is False
    history = cli_json("history", db=db)
    assert history, "no occurrences"
    keys = {
        "id",
        "task",
        "kind",
        "scheduled_for",
        "state",
        "started_at",
        "finished_at",
        "exit_code",
        "error_code",
        "detail",
    }
    assert all(keys <= set(o) for o in history)
    assert [o["id"] for o in history] == sorted((o["id"] for o in history), reverse=True)
    # A slot claimed as the engine stops (or while a loaded machine still runs the one
    # before) may be skipped, never run: every other one ran, once, and succeeded.
    ticks = [o for o in history if o["task"] == "tick" and o["state"] != "skipped"]
    assert ticks and {o["state"] for o in ticks} == {"succeeded"}
    assert sorted(o["scheduled_for"] for o in ticks) == sorted(out.read_text().split())
    # The same for `bad`: each slot it ran failed with its exit code; one the stop cut short
    # is cancelled as the engine stopped.
    bad = [o for o in history if o["task"] == "bad" and o["state"] != "skipped"]
    ended = [o for o in bad if o["detail"] != "engine_stopped"]
    assert ended and all(o["error_code"] == "EXIT_NONZERO" and o["exit_code"] == 4 for o in ended)
    assert all(o["state"] == "cancelled" for o in bad if o not in ended), bad
    only = cli_json("history", "bad", "--limit", "1", db=db)
    assert len(only) == 1 and only[0]["task"] == "bad"


def test_run_now_from_the_cli_is_queued_or_refused(tmp_path):
    db = tmp_path / "t.db"
    cli("task", "add", "job", "--every", "1h", "--", "true", db=db)
    queued = cli("task", "run-now", "job", db=db)
    assert queued.returncode == 0 and "queued" in queued.stdout
    cli("task", "disable", "job", db=db)
    refused = cli("task", "run-now", "job", db=db)
    assert refused.returncode == 1
    assert "TASK_DISABLED" in refused.stderr and len(refused.stderr.splitlines()) == 1
    cli("task", "enable", "job", db=db)
    run = cli("run", "--for", "1.5", db=db)
    assert run.returncode == 0, run.stderr
    kinds = [o["kind"] for o in cli_json("history", "job", db=db)]
    assert "manual" in kinds


def test_config_tasks_are_synced_at_start(tmp_path):
    db = tmp_path / "t.db"
    (tmp_path / "tickui.toml").write_text(
        '[engine]\nmisfire_grace = "2s"\n\n'
        '[[task]]\nname = "from-file"\nevery = "1s"\ncommand = ["true"]\n'
    )
    run = cli("run", "--for", "1.5", db=db, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (task,) = cli_json("task", "list", db=db)
    assert task["name"] == "from-file" and task["source"] == "config"


BAD_ADD = [
    (["--cron", "* * * *"], "cron"),
    (["--cron", "* * * * * * *"], "cron"),
    (["--cron", "99 * * * *"], "cron"),
    (["--cron", "0 * * * *", "--tz", "Mars/Olympus"], "tz"),
    (["--every", "50ms"], "every"),
    (["--every", "400d"], "every"),
    (["--every", "soon"], "every"),
    (["--at", "2001-01-01T00:00:00Z"], "past"),
    (["--at", "tomorrow"], "at"),
    (["--every", "1s", "--misfire", "sometimes"], "misfire"),
    (["--every", "1s", "--concurrency", "maybe"], "concurrency"),
    (["--every", "1s", "--timeout", "1 week"], "timeout"),
    (["--every", "1s", "--jitter", "-5s"], "jitter"),
]


@pytest.mark.parametrize(("flags", "named"), BAD_ADD)
def test_bad_task_definitions_exit_2_with_one_line(tmp_path, flags, named):
    db = tmp_path / "t.db"
    result = cli("task", "add", "job", *flags, "--", "true", db=db)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert named in result.stderr
    assert cli_json("task", "list", db=db) == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["task", "add", "Bad Name", "--every", "1s", "--", "true"], "name"),
        (["task", "add", "job", "--every", "1s"], "command"),
        (["task", "add", "job", "--every", "1s", "--cron", "* * * * *", "--", "true"], "cron"),
        (["task", "show", "nosuch"], "nosuch"),
        (["task", "enable", "nosuch"], "nosuch"),
        (["history", "--limit", "0"], "limit"),
        (["history", "--limit", "ten"], "limit"),
        (["task", "frobnicate"], "frobnicate"),
        (["run", "--time-scale", "9000"], "time-scale"),
        (["run", "--for", "-1"], "for"),
        (["--bogus"], "--bogus"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(tmp_path, args, named):
    result = cli(*args, db=tmp_path / "t.db")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert named in result.stderr


def test_duplicate_task_is_refused(tmp_path):
    db = tmp_path / "t.db"
    assert cli("task", "add", "job", "--every", "1s", "--", "true", db=db).returncode == 0
    again = cli("task", "add", "job", "--every", "5s", "--", "false", db=db)
    assert again.returncode == 2 and "exists" in again.stderr
    (task,) = cli_json("task", "list", db=db)
    assert task["schedule"] == "every 1s"


BROKEN_CONFIGS = [
    ('[[task]]\nname = "a"\nevery 1s\ncommand = ["true"]\n', "line 3: not valid TOML"),
    ('[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"\n', "not valid TOML"),
    ('[[task]]\nname = "a"\ncron = "* * * *"\ncommand = ["true"]\n', "line 3: task[1].cron"),
    (
        '[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\n\n'
        '[[task]]\nname = "b"\nevery = "1s"\ntz = "Nowhere/City"\ncommand = ["true"]\n',
        "line 9: task[2].tz",
    ),
    ('[engine]\nmisfire_grace = "fast"\n', "line 2: engine.misfire_grace"),
    ('[engine]\ncolour = "blue"\n', "engine.colour"),
    ("[scheduler]\nx = 1\n", "scheduler"),
    (
        '[[task]]\nname = "a"\nevery = "1s"\ncommand = ["true"]\n'
        '[[task]]\nname = "a"\nevery = "2s"\ncommand = ["true"]\n',
        "declared twice",
    ),
]


@pytest.mark.parametrize(("text", "named"), BROKEN_CONFIGS)
def test_a_broken_config_writes_nothing(tmp_path, text, named):
    db = tmp_path / "t.db"
    (tmp_path / "tickui.toml").write_text(text)
    for args in (["run", "--for", "1"], ["task", "list"]):
        result = cli(*args, db=db, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert named in result.stderr and "tickui.toml" in result.stderr
    assert not db.exists()


def test_a_missing_explicit_config_is_bad_input(tmp_path):
    result = cli("--config", str(tmp_path / "nope.toml"), "task", "list", db=tmp_path / "t.db")
    assert result.returncode == 2 and "nope.toml" in result.stderr


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["corrupt", "newer", "foreign"])
def test_bad_database_files_are_refused_untouched(tmp_path, kind):
    db = tmp_path / "x.db"
    if kind == "corrupt":
        db.write_bytes(b"\x00garbage" * 512)
    else:
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE t (x)")
        if kind == "newer":
            conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
        conn.commit()
        conn.close()
    before = _digest(db)
    for args in (
        [],  # the dashboard refuses before it takes the terminal
        ["task", "list"],
        ["run", "--for", "1"],
        ["task", "add", "a", "--every", "1s", "--", "true"],
    ):
        result = cli(*args, db=db)
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert str(db) in result.stderr
    assert _digest(db) == before


@pytest.mark.parametrize(
    "argv",
    [["--time-scale", "60", "demo"], ["demo", "--time-scale", "60"], ["--time-scale", "60"],
     ["--time-scale", "60", "run"], ["run", "--time-scale", "60"]],
)  # fmt: skip
def test_time_scale_counts_before_or_after_the_subcommand(argv) -> None:
    assert build_parser().parse_args(argv).time_scale == 60


@pytest.mark.parametrize("argv", [[], ["demo"], ["run"]])
def test_time_scale_defaults_to_real_time(argv) -> None:
    assert build_parser().parse_args(argv).time_scale == 1


def test_every_subcommand_and_flag_has_help_text():
    """`tickui <any command> --help` explains each subcommand, argument and flag, and a
    flag that takes one of a few values lists them all (as `choices`, or in its help when
    the values are checked after parsing: settings, a comma-separated list, cron's @words)."""
    import argparse

    from tickui.cli.main import build_parser
    from tickui.common.options import OPTIONS
    from tickui.model.retries import REASONS
    from tickui.schedules.cron import MACROS

    # closed sets argparse does not check itself: each flag's values, where they are defined
    later = {opt.flag: opt.choices for opt in OPTIONS if opt.flag and opt.choices}
    later |= {"--retry-on": REASONS, "--cron": tuple(MACROS)}
    missing, unlisted, found = [], [], set()

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                said = {choice.dest: choice.help for choice in action._choices_actions}
                for name, sub in action.choices.items():
                    if not said.get(name):
                        missing.append(f"{path} {name}")
                    walk(sub, f"{path} {name}")
                continue
            named = f"{path} {'/'.join(action.option_strings) or action.dest}"
            if not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(named)
            shown = f"{action.metavar or ''} {action.help or ''}"
            values = list(action.choices or ())
            for flag in set(action.option_strings) & set(later):
                found.add(flag)
                values += later[flag]
            unlisted.extend(f"{named}: {c}" for c in values if str(c) not in shown)

    walk(build_parser(), "tickui")
    assert found == set(later), set(later) - found  # each closed set was looked at
    assert not missing, missing
    assert not unlisted, unlisted


# A line for each command and each task action, with its options.
LINES = [
    ["demo", "--time-scale", "60"],
    ["run", "--for", "3", "-q", "--stop-grace", "2s"],
    ["ticks", "--count", "3", "--json"],
    ["task", "add", "x", "--every", "1s", "--retries", "2", "--env", "A=1"],
    ["task", "edit", "x", "--rename", "y", "--timeout", "1m"],
    ["task", "export"],
    ["task", "backfill", "x", "--from", "2027-01-01T00:00:00Z", "--max", "5"],
    ["task", "list", "--json"],
    ["task", "show", "x"],
    ["task", "enable", "x"],
    ["task", "rm", "x"],
    ["task", "run-now", "x"],
    ["task", "disable", "x", "--note", "why"],
    ["history", "x", "--limit", "20", "--json"],
    ["logs", "7", "--follow"],
    ["hooks", "--limit", "3"],
    ["worker", "--slots", "2"],
    ["workers", "--json"],
    ["key", "new", "k.key"],
]


@pytest.mark.parametrize("line", LINES, ids=" ".join)
def test_a_parser_built_for_the_command_given_reads_it_as_the_whole_one(line, capsys):
    """build_parser(argv) builds only the command argv names: the same namespace, and the
    same help for it (the whole parser's is the reference)."""
    whole, lean = build_parser(), build_parser(line)
    assert vars(lean.parse_args(line)) == vars(whole.parse_args(line))
    words = line[:2] if line[0] in ("task", "key") else line[:1]
    helps = []
    for parser in (whole, lean):
        with pytest.raises(SystemExit):
            parser.parse_args([*words, "--help"])
        helps.append(capsys.readouterr().out)
    assert helps[0] == helps[1] and "usage: tickui " + " ".join(words) in helps[0]
    lean_commands = [a for a in lean._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(lean_commands[0].choices) == [line[0]]  # built alone
