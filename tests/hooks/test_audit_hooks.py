"""The `audit` hook event: a person's change, from the real command line, reaches the lease
holder's hook (a real HTTP server on loopback) once, with who did it; a standby tells
nothing."""

from __future__ import annotations

import getpass
import json
import socket

from test_hooks import FIELDS, Receiver, deliveries, hook, service

from helpers import cli, poll, rig, wait_for
from tickui.common.clock import SystemClock
from tickui.engine import SchedulerEngine
from tickui.hooks import attach
from tickui.hooks.events import HookEvent, audit_event, matches, slack_text
from tickui.model.audit import Actor, AuditEntry


async def test_a_command_line_change_reaches_the_holders_audit_hook(tmp_path):
    db = tmp_path / "t.db"
    with Receiver() as receiver:
        async with rig(db, start=SystemClock().now()) as r:
            await r.add("job", every="1h")
            svc = service(r, [hook(name="ops", url=receiver.url, on=["audit"])])
            standby = attach(
                [hook(name="standby", url=receiver.url, on=["audit"])],
                r.store,
                r.clock,
                SchedulerEngine(r.store, r.engine.dispatcher, r.clock),
                None,
            )
            await r.engine.start()
            assert r.engine.holds_lease
            done = cli("task", "disable", "job", "--note", "db migration", db=db,
                       env={"TICKUI_HOST": "ops-laptop"})  # fmt: skip
            assert done.returncode == 0, done.stderr
            await wait_for(lambda: receiver.bodies, 15, "the audit event")
            rows = await deliveries(r.store, 1)
            (entry,) = await r.store.audit_entries()
            await standby.close()
            await svc.close()
    (body,) = receiver.bodies
    assert set(body) == FIELDS | {"action", "actor"}
    assert body["event"] == "audit" and body["task"] == "job" and body["action"] == "disable"
    assert body["detail"] == "db migration"
    assert body["actor"] == {
        "user": getpass.getuser(),
        "host": "ops-laptop",
        "origin": "cli",
        "pid": entry.pid,
    }
    assert body["host"] == socket.gethostname()  # the holder that told it
    assert body["finished_at"] == entry.to_json()["at"]
    assert body["occurrence_id"] is None and body["state"] is None
    assert [(d.hook, d.event, d.task, d.outcome) for d in rows] == [
        ("ops", "audit", "job", "delivered")
    ]
    listed = cli("hooks", "--json", db=db)
    assert '"event": "audit"' in listed.stdout


async def test_a_dashboards_run_now_is_told_with_the_run_it_started(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db", start=SystemClock().now()) as r:
            await r.add("job", every="1h")
            svc = service(r, [hook(url=receiver.url, on=["audit"], tasks=["jo*"])])
            await r.engine.start()
            occ = await r.engine.run_now("job", Actor("bob", "desk-2", "dashboard", 7))
            await r.settle()
            await wait_for(lambda: receiver.events("audit"), 15, "the audit event")
            await svc.close()
    (body,) = receiver.bodies
    assert body["action"] == "run-now" and body["occurrence_id"] == occ.id
    assert body["actor"] == {"user": "bob", "host": "desk-2", "origin": "dashboard", "pid": 7}


def test_the_audit_event_and_the_others_keep_their_fields():
    entry = AuditEntry(3, 1_800_000_000_000_000, "alice", "h1", "cli", 9, "enable", "job",
                       None, "was: paused after 3 consecutive failures")  # fmt: skip
    event = audit_event(entry, "holder")
    assert matches(hook(url="http://x/", on=["audit"], tasks=["jo*"]), event)
    assert not matches(hook(url="http://x/", on=["audit"], tasks=["other"]), event)
    assert not matches(hook(url="http://x/", on=["failed"]), event)
    assert slack_text(event) == (
        "tickui on holder: task job enable by alice@h1 (cli):"
        " was: paused after 3 consecutive failures"
    )
    failed = HookEvent("failed", "job", 1, "failed", "EXIT_NONZERO", None, 1, None, None, "h")
    assert set(failed.to_json()) == FIELDS


def test_audit_is_an_event_a_hook_may_ask_for(tmp_path):
    config = tmp_path / "tickui.toml"
    config.write_text('[[hook]]\non = ["audit"]\ncommand = ["true"]\n')
    result = cli("--config", str(config), "hooks", db=tmp_path / "t.db")
    assert result.returncode == 0, result.stderr
    config.write_text('[[hook]]\non = ["audits"]\ncommand = ["true"]\n')
    bad = cli("--config", str(config), "hooks", db=tmp_path / "t.db")
    assert bad.returncode == 2 and "audit" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_tickui_run_tells_a_command_line_change_to_its_audit_hook(tmp_path):
    from engine_procs import Engine, rows

    db, out = tmp_path / "t.db", tmp_path / "told"
    out.mkdir()
    config = tmp_path / "tickui.toml"
    config.write_text(
        "[[hook]]\n"
        'on = ["audit"]\n'
        f"command = ['sh', '-c', 'cat > \"$0/$$.json\"', {json.dumps(str(out))}]\n"
    )
    assert cli("task", "add", "job", "--every", "1h", "--", "true", db=db).returncode == 0
    engine = Engine(db, tmp_path / "run.log", "--config", str(config))
    try:
        poll(lambda: rows(db, "SELECT 1 FROM lease WHERE expires_at > 0"), 20, "the lease")
        done = cli("task", "disable", "job", "--note", "upgrade", db=db,
                   env={"TICKUI_HOST": "ops-laptop"})  # fmt: skip
        assert done.returncode == 0, done.stderr
        poll(lambda: len([p for p in out.iterdir() if p.stat().st_size]) >= 2, 20,
             "the audit hook's two deliveries")  # fmt: skip
    finally:
        assert engine.stop() == 0, engine.stderr()
    # read once tickui stopped: each file whole, one per delivery
    told = sorted(
        (json.loads(p.read_text()) for p in out.iterdir()), key=lambda e: e["finished_at"]
    )
    # the add was made before the engine started (within its 10 minutes): told as well
    assert [(e["event"], e["action"], e["task"], e["detail"]) for e in told] == [
        ("audit", "add", "job", "every 1h"),
        ("audit", "disable", "job", "upgrade"),
    ]
    assert told[1]["actor"]["host"] == "ops-laptop"
    assert told[1]["actor"]["user"] == getpass.getuser()
