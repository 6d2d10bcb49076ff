"""`tickui workers`, `tickui run --dispatch kafka` and [dispatch] settings, as a user runs
them (real processes, a real SQLite file, the real Tansu broker for the end to end)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import pytest

from helpers import cli, poll
from tickui.common.clock import SystemClock
from tickui.common.timeutil import MICROS
from tickui.store import Beat, Store


def test_no_database_no_workers(tmp_path):
    db = tmp_path / "none.db"
    result = cli("workers", db=db)
    assert result.returncode == 0 and "no workers heard from" in result.stdout
    result = cli("workers", "--json", db=db)
    assert result.returncode == 0 and json.loads(result.stdout) == []
    assert not db.exists()


async def test_workers_listed_with_their_state(tmp_path):
    db = tmp_path / "t.db"
    store = await Store.open(db)
    now = SystemClock().now()
    try:
        await store.record_heartbeats(
            [
                Beat("w-a", "host-a", 4, ["cmd-1", "cmd-2"], "1.0", "alive", now - 3 * MICROS),
                Beat("w-b", "host-b", 2, [], "1.0", "alive", now - 60 * MICROS),
            ]
        )
        await store.mark_workers_lost(["w-b"], now)
    finally:
        await store.close()
    result = cli("workers", db=db)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "WORKER", "HOST", "SLOTS", "RUNNING", "LAST", "HEARTBEAT", "STATE", "KEY", "REFUSED",
        "VERSION",
    ]  # fmt: skip
    assert lines[1].split()[:4] == ["w-a", "host-a", "4", "2/4"] and "alive" in lines[1]
    assert "s ago" in lines[1]
    assert lines[2].split()[0] == "w-b" and "lost" in lines[2]
    # seen 60 s before the command ran, which can start seconds later on a loaded machine
    assert re.search(r" (1m|6\ds) ago ", lines[2]), lines[2]
    found = json.loads(cli("workers", "--json", db=db).stdout)
    assert [(w["id"], w["state"], w["running"]) for w in found] == [
        ("w-a", "alive", ["cmd-1", "cmd-2"]),
        ("w-b", "lost", []),
    ]


@pytest.mark.parametrize(
    "text, env, named",
    [
        ('[dispatch]\nmode = "remote"\n', {}, "dispatch.mode"),
        ("[dispatch]\npartitions = 0\n", {}, "dispatch.partitions"),
        ('[dispatch]\nstart_timeout = "soon"\n', {}, "dispatch.start_timeout"),
        ('[dispatch]\nworker_timeout = "0s"\n', {}, "dispatch.worker_timeout"),
        ("[dispatch]\nflavour = 1\n", {}, "dispatch.flavour"),
        ("", {"TICKUI_DISPATCH": "cloud"}, "TICKUI_DISPATCH"),
        ('[dispatch]\nmode = "kafka"\n', {}, "kafka dispatch needs a broker"),
    ],
)
def test_bad_dispatch_settings_exit_2_in_one_line(tmp_path, text, env, named):
    config = tmp_path / "tickui.toml"
    config.write_text(text)
    result = cli("--config", str(config), "run", "--for", "1", db=tmp_path / "t.db", env=env)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_run_dispatch_flag_needs_a_broker(tmp_path):
    result = cli("run", "--dispatch", "kafka", "--for", "1", db=tmp_path / "t.db")
    assert result.returncode == 2 and "kafka dispatch needs a broker" in result.stderr
    result = cli("run", "--dispatch", "elsewhere", db=tmp_path / "t.db")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) <= 2


def test_run_on_a_worker_end_to_end(tmp_path, kafka_bootstrap):
    """An engine hands runs to a real `tickui worker`; history and `tickui workers` say
    which worker ran them."""
    db = tmp_path / "t.db"
    out = tmp_path / "out.txt"
    added = cli(
        "task", "add", "hello", "--every", "1s", "--",
        sys.executable, "-c", f"open({str(out)!r}, 'a').write('x\\n')",
        db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    name = f"wk-{uuid.uuid4().hex[:6]}"
    worker_log = open(tmp_path / "worker.log", "w")  # noqa: SIM115 (closed below)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tickui", "worker", "--kafka", kafka_bootstrap, "--id", name,
         "--group", f"g-{name}", "--for", "30", "--log-dir", str(tmp_path / "wl")],
        stdout=subprocess.DEVNULL, stderr=worker_log,
    )  # fmt: skip
    try:
        # a new group starts from the end of the runs topic: let it join first
        poll(lambda: "ready" in (tmp_path / "worker.log").read_text(), 20, "the worker")
        engine = cli(
            "run", "--dispatch", "kafka", "--kafka", kafka_bootstrap, "--for", "7", db=db,
            timeout=40,
        )  # fmt: skip
        assert engine.returncode == 0, engine.stderr
        assert "runs go to workers through kafka" in engine.stderr
        rows = json.loads(cli("history", "hello", "--json", db=db).stdout)
        done = [r for r in rows if r["state"] == "succeeded"]
        why = [(r["state"], r["error_code"], r["detail"]) for r in rows]
        wlog = (tmp_path / "worker.log").read_text()
        assert done and all(r["worker"] == name for r in done), (why, engine.stderr, wlog)
        assert out.read_text().count("x") >= len(done)
        table = cli("history", "hello", db=db).stdout
        assert "WORKER" in table and name in table
        shown = cli("logs", str(done[0]["id"]), db=db)  # the tail the worker reported
        assert shown.returncode == 0 and f"worker {name}" in shown.stderr, shown.stderr
        assert "succeeded" in shown.stderr
        found = poll(
            lambda: [w for w in json.loads(cli("workers", "--json", db=db).stdout)],
            what="a worker",
        )
        assert [w["id"] for w in found] == [name]
    finally:
        worker.terminate()
        worker.wait(20)
        worker_log.close()


def test_run_with_the_broker_down_keeps_claiming_and_says_so(tmp_path):
    db = tmp_path / "t.db"
    added = cli("task", "add", "a", "--every", "1s", "--concurrency", "allow", "--", "true", db=db)
    assert added.returncode == 0, added.stderr
    result = cli("run", "--dispatch", "kafka", "--kafka", "127.0.0.1:9", "--for", "2.5", db=db)
    assert result.returncode == 0, result.stderr
    assert "kafka 127.0.0.1:9" in result.stderr and "runs wait until it answers" in result.stderr
    status = json.loads(result.stderr.strip().splitlines()[-1])["engine"]
    assert "runs not handed to workers (kafka 127.0.0.1:9: broker down since" in status["warning"]
    rows = json.loads(cli("history", "a", "--json", db=db).stdout)
    assert len(rows) >= 2 and {r["state"] for r in rows} == {"accepted"}
