"""An engine on another host vanishes with a run going: the standby on this host cannot
read that run's journal, waits out the lease (the run's fence), and records the run
INTERRUPTED, outcome unknown; by then the run's supervisor had ended it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from engine_procs import Engine, lease_owner, occurrences, rows, wait_for

from helpers import cli

pytestmark = pytest.mark.slow


def test_a_vanished_engine_on_another_host_has_its_run_fenced_then_recorded_unknown(
    tmp_path, pg_url
):
    marks, config = tmp_path / "marks.txt", tmp_path / "tickui.toml"
    config.write_text('[engine]\nlease_ttl = "3s"\n')
    script = f"echo start >> {marks}; trap 'echo fenced >> {marks}; exit 143' TERM; sleep 60 & wait"
    added = cli("task", "add", "long", "--cron", "0 0 1 1 *", "--", "sh", "-c", script, db=pg_url)
    assert added.returncode == 0, added.stderr
    far = Engine(pg_url, tmp_path / "far.err", "--config", str(config), host="far-away")
    near = None
    try:
        wait_for(lambda: far.owns(lease_owner(pg_url)), 20, "the far engine to hold the lease")
        asked = cli("task", "run-now", "long", db=pg_url)
        assert asked.returncode == 0, asked.stderr
        wait_for(lambda: marks.exists() and "start" in marks.read_text(), 20, "the run to start")
        far.kill()
        killed_at = time.monotonic()
        near = Engine(pg_url, tmp_path / "near.err", "--config", str(config))
        wait_for(lambda: near.owns(lease_owner(pg_url)), 20, "this host's engine to take over")
        took_over_in = time.monotonic() - killed_at
        fenced_before = marks.read_text().split()
        (run,) = wait_for(
            lambda: [o for o in occurrences(pg_url) if o.state == "failed"], 20, "the verdict"
        )
        assert run.error_code == "INTERRUPTED" and "outcome unknown" in run.detail, run
        # its supervisor, left by the vanished engine, ended it when its lease ran out:
        # before the takeover, which had to wait for that lease
        assert fenced_before == ["start", "fenced"]
        assert took_over_in >= 1.0, took_over_in  # not at once: another host's holder
        assert near.stop() == 0, near.stderr()[-2000:]
        # its output stayed on its host (here the same disk: taken away, as from another
        # machine's view): said so, with the host and the path
        (found,) = rows(pg_url, f"SELECT log_path FROM occurrences WHERE id = {run.id}")
        log_path = found["log_path"]
        assert log_path
        Path(log_path).unlink(missing_ok=True)
        logs = cli("logs", str(run.id), db=pg_url)
        assert f"its output is on host far-away, in {log_path}" in logs.stderr, logs
    finally:
        far.kill()
        if near is not None:
            near.kill()


def test_a_frozen_engines_run_ends_as_it_did_whichever_host_takes_over(tmp_path, pg_url):
    """Two standbys, one on the frozen holder's host and one on this: whichever takes
    over, the run that ended during the freeze is recorded as it ended (exit 7), from
    the record the other engine of its host sent (any engine folds it as it arrives) or
    from its journal on the same host."""
    marks, config = tmp_path / "marks.txt", tmp_path / "tickui.toml"
    config.write_text('[engine]\nlease_ttl = "6s"\n')
    script = f"echo start >> {marks}; sleep 1; exit 7"
    added = cli("task", "add", "job", "--cron", "0 0 1 1 *", "--", "sh", "-c", script, db=pg_url)
    assert added.returncode == 0, added.stderr
    far = Engine(pg_url, tmp_path / "far.err", "--config", str(config), host="far-away")
    engines = [far]
    try:
        wait_for(lambda: far.owns(lease_owner(pg_url)), 20, "the far engine to hold the lease")
        # its host's standby looks twice a second; this host's ten times, so it mostly wins
        far_standby = Engine(pg_url, tmp_path / "far2.err", "--config", str(config),
                             "--tick-interval", "500ms", host="far-away")  # fmt: skip
        near = Engine(pg_url, tmp_path / "near.err", "--config", str(config),
                      "--tick-interval", "100ms")  # fmt: skip
        engines += [far_standby, near]
        for standby in (far_standby, near):
            wait_for(lambda s=standby: "standby: lease held by" in s.stderr(), 20, "a standby")
        asked = cli("task", "run-now", "job", db=pg_url)
        assert asked.returncode == 0, asked.stderr
        wait_for(lambda: marks.exists() and "start" in marks.read_text(), 20, "the run to start")
        os.kill(far.pid, signal.SIGSTOP)
        (run,) = wait_for(
            lambda: [o for o in occurrences(pg_url) if o.state == "failed"], 30, "the verdict"
        )
        holder = wait_for(
            lambda: (o := lease_owner(pg_url)) and not far.owns(o) and o, 30, "a takeover"
        )
        if near.owns(holder):  # settled from the record the far standby sent
            assert "sent the records of 1 run(s)" in far_standby.stderr(), far_standby.stderr()
        else:
            assert far_standby.owns(holder), holder
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(far.pid, signal.SIGCONT)
        for engine in engines:
            engine.kill()
    assert run.error_code == "EXIT_NONZERO" and "outcome unknown" not in run.detail, run
    (found,) = rows(pg_url, f"SELECT exit_code FROM occurrences WHERE id = {run.id}")
    assert found["exit_code"] == 7, found
