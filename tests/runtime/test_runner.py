"""`tickui run` as a process: signals, and secrets kept out of what it prints.

Time-lapse (on a copy, with simulated runs) is tested in test_timelapse.py."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time

from helpers import T0, cli, cli_json
from tickui.common.clock import ManualClock
from tickui.common.logfilter import RedactingFilter
from tickui.common.redact import redact
from tickui.common.timeutil import MICROS, iso
from tickui.model.spec import build_spec
from tickui.runtime.assembly import build_dispatcher, build_engine
from tickui.runtime.settings import load
from tickui.store import Store


def test_sigterm_stops_gracefully_and_cancels_what_still_runs(tmp_path):
    db = tmp_path / "t.db"
    cli(
        "task",
        "add",
        "sleepy",
        "--every",
        "1h",
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(60)",
        db=db,
    )
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), "run", "--stop-grace", "300ms"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rows = cli_json("history", "sleepy", db=db)
        if rows and rows[0]["state"] == "running":
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    final = json.loads(err.strip().splitlines()[-1])["engine"]
    assert final["running"] is False
    (occ,) = cli_json("history", "sleepy", db=db)
    assert occ["state"] == "cancelled" and occ["detail"] == "engine_stopped"


def test_sigterm_repeated_until_it_exits_still_stops_cleanly(tmp_path):
    """A supervisor that repeats SIGTERM while tickui stops must not kill it halfway:
    every signal after the first is absorbed until the process has exited with 0."""
    db = tmp_path / "t.db"
    added = cli("task", "add", "quick", "--every", "1h", "--", "sleep", "0.3", db=db)
    assert added.returncode == 0, added.stderr
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_DB"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tickui", "--db", str(db), "run"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 20
        # Up, with its handlers set: its first run is recorded.
        while (
            proc.poll() is None and time.monotonic() < deadline and not cli_json("history", db=db)
        ):
            time.sleep(0.05)
        sent = 0
        while proc.poll() is None and time.monotonic() < deadline:
            proc.send_signal(signal.SIGTERM)
            sent += 1
            time.sleep(0.005)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sent > 1
    assert proc.returncode == 0, err[-2000:]
    assert json.loads(err.strip().splitlines()[-1])["engine"]["running"] is False


def test_redact_hides_passwords_in_urls_and_pairs():
    text = "redis://app:s3cret@cache:6379/0 and kafka://user:pa%40ss@h:9092 password=hunter2"
    cleaned = redact(text)
    assert "s3cret" not in cleaned and "pa%40ss" not in cleaned and "hunter2" not in cleaned
    assert "redis://app:***@cache:6379/0" in cleaned
    assert redact("redis://cache:6379/0") == "redis://cache:6379/0"


def test_logging_filter_redacts_arguments_and_tracebacks():
    record = logging.LogRecord(
        "tickui", logging.ERROR, __file__, 1, "cannot reach %s", ("redis://u:topsecret@h:1",), None
    )
    try:
        raise ConnectionError("auth failed for redis://u:topsecret@h:1")
    except ConnectionError:
        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    formatted = logging.Formatter().format(record)
    assert "topsecret" not in formatted and "***" in formatted


async def test_without_settings_the_engine_has_the_readmes_defaults(tmp_path, monkeypatch):
    """README (tickui.toml): misfire_grace 5s, lease_ttl 30s, stop_grace 10s, keep 1000,
    log_head 64KiB and log_tail 1MiB; [dispatch] partitions 12, start_timeout 30s,
    worker_timeout 10s; [ticker] interval 1s, jitter 0, breaker 5 failures and 60s,
    publish_timeout 1s; [valkey] timeout 1s, retries 0. No file and an empty one alike; and
    the 5 s grace at work: a slot 5 s late still runs, one 6 s late is a misfire."""
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    for n, path in enumerate((None, empty)):
        settings = load(path, T0, env={})
        d, t = settings.dispatch, settings.ticker
        assert (d.partitions, d.start_timeout, d.worker_timeout) == (12, 30 * MICROS, 10 * MICROS)
        assert (t.interval_ms, t.jitter_ms, t.breaker_threshold, t.breaker_reset_s) == (
            1000, 0, 5, 60.0)  # fmt: skip
        assert (t.publish_timeout_s, t.valkey_timeout_s, t.valkey_retries) == (1.0, 1.0, 0)
        store = await Store.open(tmp_path / f"{n}.db")
        clock = ManualClock(T0)
        dispatcher = build_dispatcher(store, clock, settings.engine, settings.dispatch, None)
        engine = build_engine(store, clock, settings.engine, MICROS, dispatcher)
        try:
            c = engine.config
            assert (c.misfire_grace, c.lease_ttl, c.stop_grace, c.keep) == (
                5 * MICROS, 30 * MICROS, 10.0, 1000)  # fmt: skip
            runner = engine.dispatcher.runner
            assert (runner.head_bytes, runner.tail_bytes) == (64 * 1024, 1024 * 1024)
            for name, anchor in (("five-late", T0 + MICROS), ("six-late", T0)):
                raw = {"name": name, "every": "1h", "misfire": "skip", "command": ["true"],
                       "anchor": iso(anchor)}  # fmt: skip
                await store.add_task(build_spec(raw, T0), T0)
            clock.advance(6)
            await engine.start()
            states = {o.task: o.state for o in await store.history(limit=10)}
            assert states["six-late"] == "skipped" and states["five-late"] != "skipped", states
        finally:
            await engine.stop(grace=0)
            await store.close()
