"""The command line teaches: its help shows `--` and every choice, a slip gets a hint in
one line (exit 2), and what it prints shows times and commands one way."""

from __future__ import annotations

import re

import pytest

from helpers import cli, cli_json

SHOWN_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def _one_line_exit_2(result) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.parametrize(("action", "tail"), [("add", "-- ARGV..."), ("edit", "[-- ARGV...]")])
def test_help_shows_the_command_after_the_double_dash_and_every_choice(tmp_path, action, tail):
    shown = cli("task", action, "--help", db=tmp_path / "t.db")
    assert shown.returncode == 0, shown.stderr
    usage = shown.stdout.split("\n\n")[0]
    assert tail in usage, usage
    assert "sh -c" in shown.stdout  # how to give a shell line
    for choice in ("run_once", "skip", "run_all", "forbid", "allow", "replace", "buffer_one"):
        assert choice in shown.stdout
    assert "@hourly" in shown.stdout and "interrupted" in shown.stdout


def test_words_before_a_missing_double_dash_get_a_hint(tmp_path):
    db = tmp_path / "t.db"
    said = _one_line_exit_2(cli("task", "add", "job", "--every", "1h", "echo", "hi", db=db))
    assert "echo hi" in said and "'--'" in said
    assert not db.exists()


@pytest.mark.parametrize(
    "line", ["echo hi && date", "ls | wc -l", "date > /tmp/out", "echo $(date)", "a; b"]
)
def test_a_shell_line_given_as_one_program_is_refused_with_its_sh_c_form(tmp_path, line):
    db = tmp_path / "t.db"
    said = _one_line_exit_2(cli("task", "add", "x", "--every", "1h", "--", line, db=db))
    assert "sh -c '" in said and line in said
    assert cli_json("task", "list", db=db) == []


def test_several_words_given_as_one_program_are_refused_with_the_words_apart(tmp_path):
    db = tmp_path / "t.db"
    said = _one_line_exit_2(cli("task", "add", "x", "--every", "1h", "--", "echo hi", db=db))
    assert "-- echo hi" in said and "sh -c 'echo hi'" in said
    assert cli_json("task", "list", db=db) == []


def test_a_program_whose_path_looks_like_a_shell_line_but_exists_is_taken(tmp_path):
    program = tmp_path / "my tools" / "run; v2.sh"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\necho ok\n")
    program.chmod(0o755)
    db = tmp_path / "t.db"
    added = cli("task", "add", "x", "--every", "1h", "--", str(program), db=db)
    assert added.returncode == 0, added.stderr
    shell = cli("task", "add", "y", "--every", "1h", "--", "sh", "-c", "a && b", db=db)
    assert shell.returncode == 0, shell.stderr
    unknown = cli("task", "add", "z", "--every", "1h", "--", "/opt/My App/run", db=db)
    assert unknown.returncode == 0, unknown.stderr  # maybe on the machine that runs it


@pytest.mark.parametrize(
    ("args", "close"),
    [
        (["task", "lsit"], "list"),
        (["histroy"], "history"),
        (["task", "add", "j", "--every", "1h", "--misfire", "skp", "--", "true"], "skip"),
        (
            ["task", "add", "j", "--cron", "0 9 * * *", "--tz", "Europe/Pari", "--", "true"],
            "Europe/Paris",
        ),
    ],
)
def test_a_misspelt_command_or_choice_names_the_closest(tmp_path, args, close):
    said = _one_line_exit_2(cli(*args, db=tmp_path / "t.db"))
    assert f"did you mean '{close}'?" in said


def test_task_show_quotes_the_command_as_a_shell_would_and_says_yes(tmp_path):
    db = tmp_path / "t.db"
    added = cli("task", "add", "e", "--every", "1h", "--", "sh", "-c", "echo try", db=db)
    assert added.returncode == 0, added.stderr
    shown = cli("task", "show", "e", db=db).stdout
    assert "command: sh -c 'echo try'" in shown, shown
    assert "enabled: yes" in shown
    next_run = re.search(r"next_run_at: (.*)", shown)[1]
    assert SHOWN_TIME.fullmatch(next_run), next_run
    assert "+00:00" not in shown
    (data,) = cli_json("task", "show", "e", db=db)  # JSON stays as it was
    assert data["command"] == ["sh", "-c", "echo try"] and data["enabled"] is True
    assert data["next_run_at"].endswith("+00:00")


def test_times_are_shown_to_the_second_with_their_zone(tmp_path):
    db = tmp_path / "t.db"
    added = cli("task", "add", "t", "--every", "1s", "--", "true", db=db)
    assert SHOWN_TIME.search(added.stdout), added.stdout
    assert cli("run", "--for", "1.5", "-q", db=db).returncode == 0
    for args in (["history"], ["task", "list"]):
        out = cli(*args, db=db).stdout
        assert SHOWN_TIME.search(out), out
        assert "+00:00" not in out and not re.search(r":\d\d\.\d{6}", out), out
    history = cli_json("history", db=db)
    assert history and history[0]["scheduled_for"].endswith("+00:00")


def test_times_are_in_the_machines_zone_and_a_cron_tasks_own_zone_is_said_too(tmp_path):
    """TZ stands for the machine's zone: every time in it, named; a cron task with --tz
    also says its times in that zone, where its schedule is read."""
    db, paris = tmp_path / "t.db", {"TZ": "Europe/Paris"}
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    both = re.compile(rf"{stamp} CET \(\d{{4}}-\d\d-\d\d 09:00:00 JST\)")
    added = cli("task", "add", "tokyo", "--cron", "0 9 * * *", "--tz", "Asia/Tokyo", "--",
                "echo", "hi", db=db, env=paris)  # fmt: skip
    assert added.returncode == 0 and both.search(added.stdout), added.stdout
    cli("task", "add", "often", "--every", "1s", "--", "true", db=db, env=paris)
    shown = cli("task", "show", "tokyo", db=db, env=paris).stdout
    assert both.fullmatch(re.search(r"next_run_at: (.*)", shown)[1]), shown
    assert all(both.fullmatch(t) for t in re.search(r"preview: (.*)", shown)[1].split(", "))
    listed = cli("task", "list", db=db, env=paris).stdout
    assert both.search(listed), listed
    often = next(line for line in listed.splitlines() if line.startswith("often"))
    assert re.search(rf"{stamp} CET  ", often) and "(" not in often  # no zone of its own
    assert cli("run", "--for", "1.5", "-q", db=db, env=paris).returncode == 0
    for args in (["history"], ["logs", "1"]):
        said = cli(*args, db=db, env=paris)
        out = said.stdout + said.stderr
        assert re.search(rf"{stamp} CET", out) and " UTC" not in out, out
        assert "+00:00" not in out and not re.search(r":\d\d\.\d{6}", out), out
