"""Headless `tickui run` says what it does: a line per run start and end, what it waits for
and cancels at the stop, and a summary of its own runs; `history --follow` and `logs`
show runs and their output as they happen. Real processes on a real database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from helpers import T0, cli, cli_json, poll
from tickui.cli.run_report import end_text
from tickui.model.records import Occurrence


def _final(stderr: str) -> dict:
    return json.loads(stderr.strip().splitlines()[-1])


def _add(db, name: str, *args: str) -> None:
    added = cli("task", "add", name, *args, db=db)
    assert added.returncode == 0, added.stderr


def _tickui(db, *args: str, out=None, err=None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    return subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), *args],
        stdout=out or subprocess.PIPE,
        stderr=err or subprocess.PIPE,
        text=True,
        env=env,
    )


def test_a_line_per_run_start_and_end_and_an_honest_summary(tmp_path):
    db = tmp_path / "t.db"
    _add(db, "tick", "--every", "1s", "--", "true")
    run = cli("run", "--for", "3", db=db)
    assert run.returncode == 0, run.stderr
    started = [line for line in run.stdout.splitlines() if line.startswith("started ")]
    ended = [line for line in run.stdout.splitlines() if line.startswith("succeeded ")]
    assert started and len(ended) >= len(started) - 1, run.stdout
    assert all(" tick " in line and " UTC " in line for line in started + ended)
    final = _final(run.stderr)
    session = final["session"]
    assert session["started"] == len(started) and session["succeeded"] == len(ended)
    assert session["failed"] == 0 and session["healthy"] is True, session
    assert final["ticker"]["healthy"] is True  # as it ran: a stopped ticker is not unhealthy
    assert "this run:" in run.stderr and "healthy" in run.stderr

    # A second session counts its own runs only, and a failure makes it unhealthy.
    _add(db, "bad", "--every", "1s", "--", "sh", "-c", "exit 4")
    again = cli("run", "--for", "2.5", db=db)
    assert again.returncode == 0, again.stderr
    session = _final(again.stderr)["session"]
    failed = [line for line in again.stdout.splitlines() if line.startswith("failed ")]
    assert failed and all("EXIT_NONZERO" in line and "exit 4" in line for line in failed)
    assert session["failed"] == len(failed) and session["healthy"] is False
    assert "failed" in session["problems"]
    mine = session["succeeded"] + session["failed"] + session["cancelled"]
    every = sum(1 for o in cli_json("history", "--limit", "1000", db=db) if o["state"] != "skipped")
    assert mine < every  # the first session's runs are not counted again


def test_quiet_prints_no_run_lines_and_json_prints_json_lines(tmp_path):
    db = tmp_path / "t.db"
    _add(db, "tick", "--every", "1s", "--", "true")
    quiet = cli("run", "--for", "2", "-q", db=db)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stdout == ""
    assert _final(quiet.stderr)["session"]["started"] >= 1
    as_json = cli("run", "--for", "2", "--json", db=db)
    assert as_json.returncode == 0, as_json.stderr
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    kinds = [e["event"] for e in events]
    assert "started" in kinds and "ended" in kinds and kinds[-1] == "summary", kinds
    ends = [e for e in events if e["event"] == "ended"]
    assert {e["task"] for e in ends} == {"tick"}
    # a slot missed between the two runs may end first, skipped by the misfire policy
    ended = next((e for e in ends if e["outcome"] == "succeeded"), None)
    assert ended is not None, ends
    assert ended["slot"].endswith("+00:00") and ended["duration_s"] >= 0


def test_the_stop_says_it_waits_for_running_runs_then_cancels_them(tmp_path):
    db = tmp_path / "t.db"
    _add(db, "slow", "--every", "1h", "--anchor", "2020-01-01T00:00:00Z", "--", "sleep", "30")
    cli("task", "run-now", "slow", db=db)
    run = cli("run", "--for", "2", "--stop-grace", "500ms", db=db)
    assert run.returncode == 0, run.stderr
    assert "waiting up to 500ms" in run.stderr and "slow" in run.stderr, run.stderr
    assert "cancelled 1 run(s) still going" in run.stderr, run.stderr
    assert any(line.startswith("cancelled ") for line in run.stdout.splitlines()), run.stdout
    session = _final(run.stderr)["session"]
    assert session["cancelled_at_stop"] == 1 and session["healthy"] is True, session


def test_history_follow_shows_a_run_that_settles_after_it_started(tmp_path):
    db = tmp_path / "t.db"
    _add(db, "nap", "--every", "1h", "--anchor", "2020-01-01T00:00:00Z", "--", "sleep", "1")
    cli("task", "run-now", "nap", db=db)
    out, said = tmp_path / "follow.out", tmp_path / "engine.err"
    with open(out, "w") as handle, open(said, "w") as engine_err:
        follow = _tickui(db, "history", "--follow", out=handle)
        # the engine's words go to a file: a pipe nobody reads could fill and stop it
        engine = _tickui(db, "run", "--for", "60", "-q", out=engine_err, err=engine_err)
        try:
            try:
                poll(lambda: "succeeded" in out.read_text(), 30, "the settled run")
            except AssertionError as exc:
                shown = out.read_text()[-2000:]
                engine_said = said.read_text()[-3000:]
                raise AssertionError(f"{exc}\nfollow: {shown}\nengine: {engine_said}") from None
        finally:
            engine.send_signal(signal.SIGTERM)
            engine.wait(30)
            follow.send_signal(signal.SIGINT)
            _, err = follow.communicate(timeout=10)
    assert follow.returncode == 0, err
    assert "Traceback" not in err
    lines = out.read_text().splitlines()
    assert any(line.startswith("succeeded ") and " nap " in line for line in lines), lines


def test_logs_prints_a_runs_output_and_follows_a_running_one(tmp_path):
    db = tmp_path / "t.db"
    script = "echo one; echo password=hunter22; sleep 1.5; echo two"
    _add(db, "talk", "--every", "1h", "--anchor", "2020-01-01T00:00:00Z", "--", "sh", "-c", script)
    cli("task", "run-now", "talk", db=db)
    engine = _tickui(db, "run", "--for", "5", "-q")
    try:
        run = poll(
            lambda: next((o for o in cli_json("history", db=db) if o["state"] == "running"), None),
            20,
            "a running run",
        )
        followed = cli("logs", str(run["id"]), "--follow", db=db)
    finally:
        engine.communicate(timeout=30)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.splitlines()[-1] == "two", followed.stdout
    assert "one" in followed.stdout and "hunter22" not in followed.stdout
    assert "succeeded" in followed.stderr
    again = cli("logs", str(run["id"]), db=db)
    assert again.returncode == 0 and again.stdout.split() == followed.stdout.split()
    missing = cli("logs", "999", db=db)
    assert missing.returncode == 2 and "no run 999" in missing.stderr


class _RemoteRun:
    """The two reads `logs` makes of a run a worker ran (the store's contract)."""

    def __init__(self) -> None:
        from tickui.model.coordination import RemoteOutput
        from tickui.model.records import Occurrence

        self.occ = Occurrence(
            id=7, task_id=1, task="remote", kind="scheduled", scheduled_for=0,
            state="succeeded", claimed_at=0, started_at=0, finished_at=2_000_000,
        )  # fmt: skip
        self.out = RemoteOutput("first\ntoken=s3cr3tvalue\nlast\n", "w-1", "/var/log/7.log")

    async def get_occurrence(self, occ_id: int):
        return self.occ

    async def remote_output(self, occ_id: int):
        return self.out


async def test_logs_of_a_remote_run_print_the_workers_tail(capsys):
    from tickui.cli.follow import show_logs

    assert await show_logs(_RemoteRun(), 7, follow=False) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "first" and out.splitlines()[-1] == "last"
    assert "s3cr3tvalue" not in out
    assert "worker w-1" in err and "/var/log/7.log" in err and "succeeded" in err


def test_a_failed_line_names_its_exit_code_once() -> None:
    occ = Occurrence(
        3, 1, "bad", "scheduled", T0, "failed", T0, started_at=T0, finished_at=T0,
        exit_code=3, error_code="EXIT_NONZERO", detail="exit 3: disk full",
    )  # fmt: skip
    assert end_text(occ).endswith("(EXIT_NONZERO exit 3: disk full)")
    occ.detail = None
    assert end_text(occ).endswith("(EXIT_NONZERO exit 3)")
