"""Prometheus metrics of real `tickui run` processes, scraped over HTTP as Prometheus would
(urllib), read with prometheus-client's own parser of the exposition format."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import cli, poll, wait_for
from services import free_port
from tickui.common.clock import SystemClock
from tickui.model.spec import build_spec
from tickui.runtime.host import build_host
from tickui.runtime.settings import EngineSettings, MetricsSettings, Settings
from tickui.store import Store

# Every family tickui serves, by the name the parser gives it (a counter's without _total).
FAMILIES = {
    "tickui_runs": "counter",
    "tickui_run_start_lateness_seconds": "histogram",
    "tickui_runs_active": "gauge",
    "tickui_runs_queued": "gauge",
    "tickui_retries": "counter",
    "tickui_slots_missed": "counter",
    "tickui_slots_skipped": "counter",
    "tickui_lease_held": "gauge",
    "tickui_ticks_emitted": "counter",
    "tickui_ticks_failed": "counter",
    "tickui_tick_breaker_state": "gauge",  # an enum: one 0/1 sample a state
    "tickui_workers_alive": "gauge",
    "tickui_hook_deliveries": "counter",
}


class Scrape(NamedTuple):
    families: set[str]
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]

    def get(self, sample: str, **labels: str) -> float:
        """A sample's value (0 when it has none yet)."""
        return self.samples.get((sample, tuple(sorted(labels.items()))), 0.0)


def scrape(port: int) -> Scrape | None:
    """One scrape of /metrics; None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert reply.status == 200
            assert reply.headers["Content-Type"].startswith("text/plain")
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    families, samples = set(), {}
    for family in text_string_to_metric_families(text):
        assert family.type == FAMILIES.get(family.name, family.type), family.name
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return Scrape(families, samples)


def succeeded(port: int, task: str = "ok") -> float | None:
    found = scrape(port)
    return found and found.get("tickui_runs_total", task=task, outcome="succeeded")


LATENESS_COUNT = "tickui_run_start_lateness_seconds_count"


def start(db: Path, log: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if k not in ("TICKUI_DB", "TICKUI_METRICS")}
    environ.update(env or {})
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tickui", "--db", str(db), "run", "-q", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=environ,
            cwd=db.parent,
        )


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


@pytest.mark.slow
def test_run_serves_every_family_and_counts_runs_as_they_happen(tmp_path):
    db = tmp_path / "t.db"
    assert cli("task", "add", "ok", "--every", "1s", "--", "true", db=db).returncode == 0
    assert cli("task", "add", "bad", "--every", "1s", "--", "false", db=db).returncode == 0
    # a hook on failures, so deliveries happen too
    (tmp_path / "tickui.toml").write_text('[[hook]]\non = ["failed"]\ncommand = ["true"]\n')
    port = free_port()
    proc = start(db, tmp_path / "err.log", "--metrics", f"127.0.0.1:{port}")
    try:
        poll(lambda: succeeded(port), timeout=30, what="a first run counted")
        first = scrape(port)
        assert set(FAMILIES) <= first.families, set(FAMILIES) - first.families
        count = first.get(LATENESS_COUNT)
        runs = first.get("tickui_runs_total", task="ok", outcome="succeeded")
        assert count >= 1 and runs >= 1
        assert first.get("tickui_lease_held") == 1

        def moved() -> Scrape | None:
            found = scrape(port)
            ok = found and (
                found.get("tickui_runs_total", task="ok", outcome="succeeded") >= runs + 2
                and found.get(LATENESS_COUNT) >= count + 2
                and found.get("tickui_runs_total", task="bad", outcome="failed")
                and found.get("tickui_hook_deliveries_total", outcome="delivered")
                and found.get("tickui_ticks_emitted_total")
            )
            return found if ok else None

        found = poll(moved, timeout=30, what="runs, lateness, failures, hooks and ticks to move")
        breaker = "tickui_tick_breaker_state"
        assert found.get(breaker, **{breaker: "closed"}) == 1
        assert found.get(breaker, **{breaker: "open"}) == 0
        assert found.get("tickui_ticks_failed_total") == 0
        assert found.get("tickui_run_start_lateness_seconds_bucket", le="+Inf") == found.get(
            LATENESS_COUNT
        )
    finally:
        code = stop(proc)
    assert code == 0, (tmp_path / "err.log").read_text()


@pytest.mark.slow
def test_a_standby_engine_serves_its_lease_as_not_held_and_counts_no_runs(tmp_path):
    """Two engines on one database, their metrics from the file's [metrics] and from
    TICKUI_METRICS: the lease holder says 1 and counts the runs, the standby says 0."""
    db = tmp_path / "t.db"
    assert cli("task", "add", "ok", "--every", "1s", "--", "true", db=db).returncode == 0
    one, two = free_port(), free_port()
    (tmp_path / "tickui.toml").write_text(f'[metrics]\nlisten = "127.0.0.1:{one}"\n')
    holder = start(db, tmp_path / "one.log")
    standby = None
    try:
        poll(lambda: succeeded(one), timeout=30, what="the first engine's runs")
        standby = start(db, tmp_path / "two.log", env={"TICKUI_METRICS": f"127.0.0.1:{two}"})
        # the variable wins over the file: the standby serves on its own port
        found = poll(lambda: scrape(two), timeout=30, what="the standby's metrics")
        assert found.get("tickui_lease_held") == 0
        poll(lambda: (succeeded(one) or 0) >= 3, timeout=30, what="more runs on the holder")
        found = scrape(two)
        assert found.get("tickui_lease_held") == 0
        assert not [key for key in found.samples if key[0] == "tickui_runs_total"]
        assert scrape(one).get("tickui_lease_held") == 1
    finally:
        codes = [stop(p) for p in (standby, holder) if p is not None]
    assert codes == [0] * len(codes)


def test_workers_alive_counts_a_real_worker_over_kafka(tmp_path, kafka_bootstrap):
    """An engine dispatching to a real `tickui worker` through Tansu: the worker's
    heartbeats make it alive, and its runs are counted as the engine's."""
    db = tmp_path / "t.db"
    assert cli("task", "add", "ok", "--every", "1s", "--", "true", db=db).returncode == 0
    name = f"wk-{uuid.uuid4().hex[:6]}"
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tickui", "worker", "--kafka", kafka_bootstrap, "--id", name,
             "--group", f"g-{name}", "--for", "60", "--log-dir", str(tmp_path / "wl")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    engine = None
    try:
        # a new group starts from the end of the runs topic: let it join first
        poll(lambda: "ready" in (tmp_path / "worker.log").read_text(), 20, "the worker")
        port = free_port()
        engine = start(db, tmp_path / "engine.log", "--dispatch", "kafka", "--kafka",
                       kafka_bootstrap, "--metrics", f"127.0.0.1:{port}")  # fmt: skip

        def alive_and_ran() -> Scrape | None:
            found = scrape(port)
            ok = found and found.get("tickui_workers_alive") == 1 and succeeded(port)
            return found if ok else None

        poll(alive_and_ran, timeout=40, what="the worker alive and a run of it counted")
    finally:
        codes = [stop(p) for p in (engine, worker) if p is not None]
    assert codes[0] == 0, (tmp_path / "engine.log").read_text()


async def test_the_dashboards_engine_serves_metrics_until_its_host_closes(tmp_path):
    """The dashboard's host (engine, ticker, hooks) is assembled as `tickui run`'s is: the
    same endpoint, scraped from another thread while its loop runs; closed with it."""
    port = free_port()
    clock = SystemClock()
    store = await Store.open(tmp_path / "t.db")
    spec = build_spec({"name": "ok", "every": "1s", "command": ["true"]}, clock.now())
    await store.add_task(spec, clock.now())
    settings = Settings(
        engine=EngineSettings(stop_grace=0), metrics=MetricsSettings(f"127.0.0.1:{port}")
    )
    host = build_host(store, clock, settings)
    try:
        await host.start()

        await wait_for(lambda: asyncio.to_thread(succeeded, port), timeout=30, what="a run")
    finally:
        await host.close(grace=0)
    assert await asyncio.to_thread(scrape, port) is None  # the port is free again


@pytest.mark.parametrize(
    "address",
    ["nonsense", "127.0.0.1:99999", "127.0.0.1:", "no-such-host.invalid:9464", "192.0.2.1:9464"],
)
def test_a_bad_listen_address_is_one_line_and_exit_2(tmp_path, address):
    db = tmp_path / "t.db"
    done = cli("run", "--for", "5", "--metrics", address, db=db)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tickui: ") and "metrics" in lines[0], lines
    assert "Traceback" not in done.stderr


def test_a_bad_listen_address_in_the_environment_or_file_is_exit_2(tmp_path):
    db = tmp_path / "t.db"
    done = cli("run", "--for", "5", db=db, env={"TICKUI_METRICS": "localhost"})
    assert done.returncode == 2
    assert done.stderr.strip() == "tickui: TICKUI_METRICS: 'localhost' is not host:port" \
        " (e.g. 127.0.0.1:9464)"  # fmt: skip
    (tmp_path / "tickui.toml").write_text("[metrics]\nlisten = 9464\n")
    done = cli("run", "--for", "5", db=db, cwd=tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "tickui: tickui.toml line 2: metrics.listen: 9464 is not host:port"
    )


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("run", "--for", "5", "--metrics", f"127.0.0.1:{port}", db=tmp_path / "t.db")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"tickui: metrics: cannot listen on 127.0.0.1:{port}: Address already in use"]


@pytest.mark.slow
def test_the_dashboards_port_in_use_is_one_line_and_exit_1(tmux, tmp_path):
    """The dashboard's engine serves metrics as `tickui run`'s does: a port in use is a
    fault, not bad input, said once the screen is given back."""
    import socket

    db, exit_file = tmp_path / "t.db", tmp_path / "exit"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = (
            f"TERM=xterm-256color TICKUI_METRICS=127.0.0.1:{port} {sys.executable} -m tickui"
            f" --db {db}; echo $? > {exit_file}; sleep 5"
        )
        tmux("new-session", "-d", "-s", "ui", "-x", "100", "-y", "30", command)
        poll(lambda: exit_file.exists() and exit_file.read_text().strip(), 20, "the exit code")
    assert exit_file.read_text().strip() == "1"
    shown = [line for line in tmux("capture-pane", "-p", "-t", "ui").splitlines() if line.strip()]
    assert shown == [f"tickui: metrics: cannot listen on 127.0.0.1:{port}: Address already in use"]
