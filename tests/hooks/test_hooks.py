"""Alert hooks ([[hook]]): events from real runs on a real SQLite file, delivered to a real
HTTP server on a loopback port and to real commands; bad config refused by the real CLI."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers import cli, cli_json, poll, rig, wait_for
from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS
from tickui.hooks import HookConfig, HookService, attach, parse_hook
from tickui.hooks.events import (
    HookEvent,
    is_paused,
    matches,
    occurrence_events,
    slack_text,
)
from tickui.hooks.service import CRASHED, STOPPED
from tickui.ticks.breaker import CircuitBreaker

FIELDS = {
    "event",
    "task",
    "occurrence_id",
    "state",
    "error_code",
    "detail",
    "attempt",
    "scheduled_for",
    "finished_at",
    "host",
}
# Fails (exit 3, a secret in its last line) on its first run, succeeds after.
FLAKY = "if [ -e ran ]; then exit 0; fi; touch ran; echo 'boom password=hunter2' >&2; exit 3"


class Receiver:
    """A real HTTP server on 127.0.0.1 in a thread: records each POST's JSON body."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.headers.append(dict(self.headers))
                receiver.bodies.append(json.loads(body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook/secret-path"

    def events(self, name: str | None = None) -> list[dict]:
        return [b for b in self.bodies if name is None or b.get("event") == name]

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def hook(**raw) -> HookConfig:
    raw.setdefault("on", ["failed", "recovered"])
    return parse_hook(raw, 0)


def service(rig_, hooks, **options) -> HookService:
    options.setdefault("backoff", (0.01,))
    svc = attach(hooks, rig_.store, rig_.clock, rig_.engine, None, **options)
    assert svc is not None
    return svc


async def deliveries(store, count: int, timeout: float = 15.0):
    async def done():
        rows = await store.recent_deliveries(100)
        finished = [d for d in rows if d.outcome != "pending"]
        return rows if len(finished) >= count else None

    return await wait_for(done, timeout, f"{count} finished hook deliveries")


# ---- config ---------------------------------------------------------------------------


def test_parse_hook_defaults_and_checks():
    h = hook(url="https://example.test/x", tasks=["db-*"])
    assert h.name == "hook-1" and h.timeout == 5 * MICROS and h.format == "json"
    assert h.target == "https://example.test"  # never the path: a webhook's secret
    c = parse_hook({"on": ["paused"], "command": ["notify", "-u"], "timeout": "2s"}, 3)
    assert c.name == "hook-4" and c.command == ("notify", "-u") and c.timeout == 2 * MICROS
    for raw, field in [
        ({"on": ["exploded"], "url": "http://a"}, "on"),
        ({"on": "failed", "url": "http://a"}, "on"),
        ({"url": "http://a"}, "on"),
        ({"on": ["failed"]}, "url"),
        ({"on": ["failed"], "url": "http://a", "command": ["x"]}, "url"),
        ({"on": ["failed"], "url": "ftp://a/b"}, "url"),
        ({"on": ["failed"], "url": "http://"}, "url"),
        ({"on": ["failed"], "url": "http://a:99999/"}, "url"),
        ({"on": ["failed"], "command": []}, "command"),
        ({"on": ["failed"], "command": "notify-send"}, "command"),
        ({"on": ["failed"], "url": "http://a", "timeout": "0s"}, "timeout"),
        ({"on": ["failed"], "url": "http://a", "timeout": "2h"}, "timeout"),
        ({"on": ["failed"], "url": "http://a", "timeout": 5}, "timeout"),
        ({"on": ["failed"], "url": "http://a", "format": "teams"}, "format"),
        ({"on": ["failed"], "command": ["x"], "format": "slack"}, "format"),
        ({"on": ["failed"], "url": "http://a", "retries": 9}, "retries"),
        ({"on": ["failed"], "url": "http://a", "tasks": "db"}, "tasks"),
    ]:
        with pytest.raises(BadInput) as caught:
            parse_hook(raw, 0)
        assert caught.value.field == field, raw


BAD_HOOKS = {
    "unknown event": ('on = ["exploded"]\nurl = "http://127.0.0.1:9/"', "hook[1].on"),
    "both": ('on = ["failed"]\nurl = "http://127.0.0.1:9/"\ncommand = ["true"]', "url"),
    "neither": ('on = ["failed"]', "exactly one of url and command"),
    "not http": ('on = ["failed"]\nurl = "file:///etc/passwd"', "http:// or https://"),
    "bad timeout": ('on = ["failed"]\ncommand = ["true"]\ntimeout = "0s"', "hook[1].timeout"),
    "timeout not text": ('on = ["failed"]\ncommand = ["true"]\ntimeout = 5', "hook[1].timeout"),
    "unknown key": ('on = ["failed"]\ncommand = ["true"]\nheaders = {}', "hook[1].headers"),
    "twice": (
        'name = "a"\non = ["failed"]\ncommand = ["true"]\n[[hook]]\nname = "a"\n'
        'on = ["failed"]\ncommand = ["true"]',
        "declared twice",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_HOOKS))
def test_bad_hook_config_is_one_line_exit_2_nothing_written(tmp_path, case):
    body, said = BAD_HOOKS[case]
    config = tmp_path / "tickui.toml"
    config.write_text(
        f'[[task]]\nname = "a"\nevery = "1h"\ncommand = ["true"]\n\n[[hook]]\n{body}\n'
    )
    db = tmp_path / "t.db"
    for args in (["hooks"], ["run", "--for", "1"], ["task", "list"]):
        result = cli("--config", str(config), *args, db=db)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and "Traceback" not in result.stderr
        assert str(config) in lines[0]
    assert list(tmp_path.iterdir()) == [config]  # no database, no log folder


# ---- events as pure functions ------------------------------------------------------------


def _row(**fields):
    row = {
        "id": 7,
        "task_id": 1,
        "task": "backup",
        "kind": "scheduled",
        "state": "failed",
        "error_code": "EXIT_NONZERO",
        "detail": "exit 3",
        "attempt": 1,
        "scheduled_for": 0,
        "finished_at": 0,
        "covers": 1,
        "missed": 0,
    }
    return {**row, **fields}


def test_which_events_a_row_means():
    assert occurrence_events(_row(), None) == ["failed"]
    assert occurrence_events(_row(retried=1), None) == []  # its retry's outcome is told
    assert occurrence_events(_row(state="succeeded"), "failed") == ["recovered"]
    assert occurrence_events(_row(state="succeeded"), "succeeded") == []
    assert occurrence_events(_row(state="succeeded"), None) == []
    assert occurrence_events(_row(state="cancelled"), "failed") == []
    skipped = _row(state="skipped", missed=4, covers=4, detail="misfire_skipped: 4 missed")
    assert occurrence_events(skipped, None) == ["missed"]
    forbid = _row(state="skipped", detail="concurrency_forbid")
    assert occurrence_events(forbid, None) == []
    assert occurrence_events(_row(state="claimed", covers=3, missed=2), None) == ["missed"]
    assert occurrence_events(_row(state="running", missed=1), None) == []  # run_all: late, ran
    # a retry of a run that covered 3 slots carries covers=3: its slot's misses were told
    retry = _row(state="failed", covers=3, missed=2, attempt=2)
    assert occurrence_events(retry, None) == ["failed"]
    skipped_retry = _row(state="skipped", attempt=2, detail="misfire_skipped: retry due 40s ago")
    assert occurrence_events(skipped_retry, None) == []


def test_paused_is_a_pause_note_on_a_disabled_task_since_start():
    task = {"id": 1, "name": "a", "enabled": 0, "note": "paused after 3 consecutive failures"}
    assert is_paused({**task, "updated_at": 10}, since=5)
    assert not is_paused({**task, "updated_at": 4}, since=5)  # before this process: told
    assert not is_paused({**task, "updated_at": 10, "enabled": 1}, since=5)
    assert not is_paused({**task, "updated_at": 10, "note": "maintenance"}, since=5)


def test_tasks_globs_narrow_task_events_only():
    h = hook(url="http://a/", on=["failed", "breaker_open"], tasks=["db-*", "exact"])
    base = dict.fromkeys(FIELDS - {"event", "task"}) | {"host": "h"}
    assert matches(h, HookEvent(event="failed", task="db-backup", **base))
    assert matches(h, HookEvent(event="failed", task="exact", **base))
    assert not matches(h, HookEvent(event="failed", task="exact2", **base))
    assert not matches(h, HookEvent(event="recovered", task="db-backup", **base))
    assert matches(h, HookEvent(event="breaker_open", task=None, **base))


def test_slack_text_is_one_line_naming_task_code_and_run():
    base = dict.fromkeys(FIELDS - {"event", "task", "host"})
    event = HookEvent(
        event="failed",
        task="backup",
        host="box",
        **{**base, "occurrence_id": 12, "error_code": "TIMEOUT", "attempt": 2, "detail": "x"},
    )
    assert slack_text(event) == "tickui on box: task backup failed (TIMEOUT) run 12 attempt 2: x"


# ---- delivery from a real engine -------------------------------------------------------------


async def test_failed_and_recovered_reach_a_real_http_server_with_every_field(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            await r.add("flaky", every="10s", command=["sh", "-c", FLAKY], cwd=str(tmp_path))
            svc = service(r, [hook(name="ops", url=receiver.url)])
            await r.engine.start()
            await r.settle()
            await r.tick(10)
            await r.settle()
            rows = await deliveries(r.store, 2)
            first, second = await r.history("flaky")
            await svc.close()
    assert [b["event"] for b in receiver.bodies] == ["failed", "recovered"]
    failed, recovered = receiver.bodies
    assert set(failed) == FIELDS and set(recovered) == FIELDS
    assert failed["task"] == "flaky" and failed["occurrence_id"] == first.id
    assert failed["state"] == "failed" and failed["error_code"] == "EXIT_NONZERO"
    assert "boom" in failed["detail"] and "hunter2" not in failed["detail"]
    assert failed["attempt"] == 1 and failed["host"] == socket.gethostname()
    assert failed["scheduled_for"] == "2027-01-15T08:00:00+00:00"
    assert failed["finished_at"].endswith("+00:00")
    assert recovered["occurrence_id"] == second.id and recovered["state"] == "succeeded"
    assert recovered["error_code"] is None and recovered["scheduled_for"].endswith("08:00:10+00:00")
    assert receiver.headers[0]["Content-Type"] == "application/json"
    assert [(d.hook, d.event, d.outcome, d.attempts) for d in reversed(rows)] == [
        ("ops", "failed", "delivered", 1),
        ("ops", "recovered", "delivered", 1),
    ]
    assert [d.occurrence_id for d in reversed(rows)] == [first.id, second.id]


async def test_a_hook_to_a_closed_port_fails_after_3_attempts_and_changes_nothing_else(
    tmp_path, caplog
):
    async def run(with_hook: bool, db: Path):
        async with rig(db) as r:
            await r.add("flaky", every="10s", command=["sh", "-c", FLAKY], cwd=str(db.parent))
            await r.add("fine", every="10s", command=["true"])
            svc = None
            if with_hook:
                url = f"http://127.0.0.1:{closed_port()}/x/token=abc"
                svc = service(r, [hook(name="gone", url=url)])
                told = []
                svc.on_change(lambda: told.append(1))
            await r.engine.start()
            await r.settle()
            for _ in range(2):
                await r.tick(10)
                await r.settle()
            rows = await deliveries(r.store, 2) if with_hook else []
            history = [(o.task, o.scheduled_for, o.state, o.error_code) for o in await r.history()]
            if svc is not None:
                assert svc.counts["failed"] == 2 and svc.counts["delivered"] == 0
                assert svc.status() == {
                    "hooks": 1,
                    "waiting": 0,
                    "sending": 0,
                    "delivered": 0,
                    "failed": 2,
                    "dropped": 0,
                    "errors": 0,
                }
                assert len(told) == 4  # each delivery recorded, then ended
                await svc.close()
            return history, rows

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain, _ = await run(False, tmp_path / "a" / "t.db")
    hooked, rows = await run(True, tmp_path / "b" / "t.db")
    assert hooked == plain and len(plain) == 6  # three slots of two tasks, the same states
    assert {(d.event, d.outcome, d.attempts) for d in rows} == {
        ("failed", "failed", 3),
        ("recovered", "failed", 3),
    }
    assert all("Connect" in (d.detail or "") and "/x" not in d.detail for d in rows)
    said = [r.getMessage() for r in caplog.records if r.name == "tickui.hooks"]
    assert len(said) == 2 and all(line.startswith("hook gone (http://127.0.0.1:") for line in said)
    assert not any("/x" in line or "abc" in line for line in said)


async def test_a_command_hook_gets_the_event_on_stdin_and_in_tickui_event(tmp_path):
    out = tmp_path / "got.json"
    script = (
        "import json, os, sys; data = sys.stdin.read();"
        f"open({str(out)!r}, 'w').write(json.dumps([data, os.environ.get('TICKUI_EVENT'),"
        " os.environ.get('TICKUI_OCCURRENCE_ID')]))"
    )
    async with rig(tmp_path / "t.db") as r:
        await r.add("broken", every="10s", command=["sh", "-c", "exit 4"])
        svc = service(
            r, [parse_hook({"on": ["failed"], "command": [sys.executable, "-c", script]}, 0)]
        )
        await r.engine.start()
        await r.settle()
        (row,) = await deliveries(r.store, 1)
        (occ,) = await r.history()
        await svc.close()
    stdin, env, marker = json.loads(out.read_text())
    assert stdin == env and marker is None  # never a run's marks
    event = json.loads(stdin)
    assert set(event) == FIELDS and event["event"] == "failed"
    assert event["occurrence_id"] == occ.id and event["detail"] == occ.detail
    assert (row.outcome, row.attempts, row.detail) == ("delivered", 1, "exit 0")


async def test_a_failing_command_hook_is_recorded_failed_with_its_last_stderr_line(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        await r.add("broken", every="10s", command=["sh", "-c", "exit 4"])
        cmd = ["sh", "-c", "cat >/dev/null; echo first >&2; echo 'no token=abc123' >&2; exit 9"]
        svc = service(r, [parse_hook({"on": ["failed"], "command": cmd}, 0)])
        await r.engine.start()
        await r.settle()
        (row,) = await deliveries(r.store, 1)
        await svc.close()
    assert row.outcome == "failed" and row.attempts == 3
    assert row.detail == "exit 9: no token=***"


async def test_slack_format_posts_text_only(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            await r.add("nightly", every="10s", command=["sh", "-c", "exit 5"])
            svc = service(r, [hook(url=receiver.url, format="slack", on=["failed"])])
            await r.engine.start()
            await r.settle()
            await deliveries(r.store, 1)
            (occ,) = await r.history()
            await svc.close()
    (body,) = receiver.bodies
    assert list(body) == ["text"]
    assert body["text"].startswith(f"tickui on {socket.gethostname()}: task nightly failed")
    assert "(EXIT_NONZERO)" in body["text"] and f"run {occ.id}" in body["text"]


async def test_tasks_globs_choose_which_tasks_a_hook_hears_about(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            for name in ("db-backup", "db-vacuum", "web-ping"):
                await r.add(name, every="10s", command=["sh", "-c", "exit 1"])
            svc = service(r, [hook(url=receiver.url, on=["failed"], tasks=["db-*"])])
            await r.engine.start()
            await r.settle()
            await deliveries(r.store, 2)
            await svc.close()
            rows = await r.store.recent_deliveries()
    assert sorted(b["task"] for b in receiver.bodies) == ["db-backup", "db-vacuum"]
    assert len(rows) == 2


async def test_pause_after_tells_failed_per_slot_then_paused_once(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            await r.add("flappy", every="10s", pause_after=2, command=["sh", "-c", "exit 2"])
            svc = service(r, [hook(url=receiver.url, on=["failed", "paused"])])
            await r.engine.start()
            await r.settle()
            await r.tick(10)
            await r.settle()
            await deliveries(r.store, 3)
            await r.tick(10)  # disabled now: nothing runs, nothing more is told
            await r.settle()
            first, second = await r.history()
            await svc.close()
            rows = await r.store.recent_deliveries()
    note = "paused after 2 consecutive failures (last: EXIT_NONZERO)"
    told = [(b["event"], b["occurrence_id"]) for b in receiver.bodies]
    # the second slot's failure and the pause are told together: two senders, either order
    assert told[0] == ("failed", first.id)
    assert sorted(told[1:]) == [("failed", second.id), ("paused", second.id)], told
    (paused,) = [b for b in receiver.bodies if b["event"] == "paused"]
    assert paused["task"] == "flappy" and paused["detail"] == note
    assert paused["error_code"] == "EXIT_NONZERO" and set(paused) == FIELDS
    assert len(rows) == 3


async def test_a_retried_failure_is_not_told_and_the_last_attempt_is(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            flaky = ["sh", "-c", FLAKY]
            await r.add(
                "flaky", every="1h", retries=2, retry_delay="1s", command=flaky, cwd=str(tmp_path)
            )
            await r.add("broken", every="1h", retries=1, retry_delay="1s", command=["false"])
            svc = service(r, [hook(url=receiver.url, on=["failed", "recovered"])])
            await r.engine.start()
            await r.settle()
            for _ in range(3):
                await r.tick(2)  # the retries come due
                await r.settle()
            await deliveries(r.store, 1)
            history = await r.history()
            await svc.close()
    assert sorted((o.task, o.attempt, o.state) for o in history) == [
        ("broken", 1, "failed"),
        ("broken", 2, "failed"),
        ("flaky", 1, "failed"),
        ("flaky", 2, "succeeded"),
    ]
    # flaky failed, was retried and succeeded: nothing to tell (no failure was told)
    (body,) = receiver.bodies
    assert (body["event"], body["task"], body["attempt"]) == ("failed", "broken", 2)
    assert body["occurrence_id"] == max(o.id for o in history if o.task == "broken")


async def test_missed_is_told_for_a_misfire_skip(tmp_path):
    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            await r.add("late", every="10s", misfire="skip", command=["true"])
            svc = service(r, [hook(url=receiver.url, on=["missed"])])
            await r.engine.start()
            await r.settle()
            await r.tick(60)  # five slots passed while nothing ticked
            await r.settle()
            await deliveries(r.store, 1)
            await svc.close()
    (body,) = receiver.bodies
    assert body["event"] == "missed" and body["state"] == "skipped"
    assert body["detail"].startswith("misfire_skipped")


async def test_breaker_open_and_closed_are_told_once_per_outage(tmp_path):
    class Ticker:  # the ticker's listener hook: called after every tick and breaker move
        def __init__(self) -> None:
            self.breaker = CircuitBreaker(2, 0.0)
            self.listeners = []

        def on_change(self, listener) -> None:
            self.listeners.append(listener)

        def changed(self) -> None:
            for listener in self.listeners:
                listener()

    with Receiver() as receiver:
        async with rig(tmp_path / "t.db") as r:
            ticker = Ticker()
            svc = attach(
                [hook(url=receiver.url, on=["breaker_open", "breaker_closed"], tasks=["x"])],
                r.store,
                r.clock,
                r.engine,
                ticker,
                backoff=(0.01,),
            )
            b = ticker.breaker
            for _ in range(3):
                b.failure(0.0, r.clock.now(), "broker down password=pw")
                ticker.changed()
            assert b.allow(1.0, r.clock.now())  # the probe: HALF_OPEN
            b.failure(1.0, r.clock.now(), "still down")  # open again: the same outage
            ticker.changed()
            assert b.allow(2.0, r.clock.now())
            b.success(2.0, r.clock.now())
            ticker.changed()
            ticker.changed()
            await deliveries(r.store, 2)
            await svc.close()
    # told once each; a hook has two senders, so the order they arrive in is not promised
    assert sorted((x["event"], x["state"]) for x in receiver.bodies) == [
        ("breaker_closed", "CLOSED"),
        ("breaker_open", "OPEN"),
    ]
    (opened,) = [x for x in receiver.bodies if x["event"] == "breaker_open"]
    assert "pw" not in opened["detail"] and opened["task"] is None


# ---- never in the engine's way -----------------------------------------------------------------


async def test_a_hanging_hook_never_delays_the_engines_ticks(tmp_path):
    listener = socket.socket()  # accepts connections (the kernel does) and never answers
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
    try:
        async with rig(tmp_path / "t.db") as r:
            await r.add("broken", every="1s", command=["sh", "-c", "exit 1"])
            hangs = [
                hook(name="http", url=url, on=["failed"], timeout="1s"),
                parse_hook(
                    {"name": "cmd", "on": ["failed"], "command": ["sleep", "30"], "timeout": "1s"},
                    0,
                ),
            ]
            svc = service(r, hangs, workers=12)
            await r.engine.start()
            await r.settle()
            loop = asyncio.get_running_loop()
            await wait_for(lambda: svc.status()["sending"] == 2, 5, "both hooks hanging")
            slowest, sending = 0.0, []
            for _ in range(5):
                sending.append(svc.status()["sending"])  # deliveries hanging meanwhile
                started = loop.time()
                await r.tick(1)
                slowest = max(slowest, loop.time() - started)
                await r.settle()
            assert min(sending) >= 2
            assert slowest < 0.5  # a tick waiting on a hook would take its 1 s timeout
            assert len(await r.history()) == 6
            rows = await deliveries(r.store, 12, timeout=20)
            await svc.close()
    finally:
        listener.close()
    assert len(rows) == 12 and {d.outcome for d in rows} == {"failed"}
    assert {d.detail for d in rows} == {"timed out after 1s"}
    assert {d.attempts for d in rows} == {3}


async def test_a_full_queue_drops_and_counts(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        async with rig(tmp_path / "t.db") as r:
            url = f"http://127.0.0.1:{listener.getsockname()[1]}/"
            h = hook(url=url, on=["breaker_open"], timeout="100ms")
            svc = HookService([h], r.store, r.clock, queue_max=2, workers=1, attempts=1)
            base = dict.fromkeys(FIELDS - {"event", "host"})
            for _ in range(6):
                svc.emit(HookEvent(event="breaker_open", host="h", **base))
            assert svc.counts["dropped"] == 4  # one taken by the worker later, two waiting
            await svc.close(grace=5)
            rows = await r.store.recent_deliveries()
    finally:
        listener.close()
    assert len(rows) == 2 and {d.outcome for d in rows} == {"failed"}


async def test_a_hanging_hook_holds_up_only_its_own_deliveries(tmp_path):
    """Each hook has its own queue and senders: one that hangs never silences another,
    and what it never got to send is recorded failed when tickui stops."""
    got = tmp_path / "ok"
    got.mkdir()
    hang = parse_hook({"name": "hang", "on": ["failed"], "command": ["sleep", "30"],
                       "timeout": "30s"}, 0)  # fmt: skip
    ok = parse_hook({"name": "ok", "on": ["failed"],
                     "command": ["sh", "-c", f"cat > {got}/$$.json"]}, 1)  # fmt: skip
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([hang, ok], r.store, r.clock, attempts=1)
        base = dict.fromkeys(FIELDS - {"event", "host", "occurrence_id"})
        for n in range(10):
            svc.emit(HookEvent(event="failed", host="h", occurrence_id=n + 1, **base))
        await wait_for(lambda: len(list(got.iterdir())) >= 10, 15, "10 sends")
        # the ok hook's ten went through; the hanging hook's two senders are (or, on a
        # loaded machine, are about to be) stuck in their first sends
        await wait_for(
            lambda: svc.status()["sending"] == 2, 15, "the hanging hook's two senders stuck"
        )
        assert len(list(got.iterdir())) == 10
        await svc.close(grace=0.2)
        rows = await r.store.recent_deliveries(100)
    by_hook = {name: [d for d in rows if d.hook == name] for name in ("hang", "ok")}
    assert len(by_hook["ok"]) == 10 and {d.outcome for d in by_hook["ok"]} == {"delivered"}
    assert len(by_hook["hang"]) == 10, "events the hanging hook never sent went unrecorded"
    assert {d.outcome for d in by_hook["hang"]} == {"failed"}
    assert {d.detail for d in by_hook["hang"]} == {STOPPED}
    assert sorted(d.occurrence_id for d in by_hook["hang"]) == list(range(1, 11))


async def test_deliveries_a_killed_tickui_left_pending_end_failed_at_the_next_start(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        old = await r.store.start_delivery("ops", "failed", "t", 7, r.clock.now() - MICROS)
        svc = service(r, [hook(name="ops", command=["true"])])  # attached: it looks at once
        await wait_for(
            lambda: svc.status() is not None and r.store.recent_deliveries(), 5, "a look"
        )

        async def closed():
            (row,) = await r.store.recent_deliveries()
            return row if row.outcome != "pending" else None

        row = await wait_for(closed, 5, "the stale delivery to end")
        await svc.close()
    assert (row.id, row.outcome, row.detail) == (old, "failed", CRASHED)


async def test_no_hooks_no_service_and_time_lapse_calls_none(tmp_path):
    async with rig(tmp_path / "t.db") as r:
        assert attach((), r.store, r.clock, r.engine, None) is None
        r.clock.scale = 60.0
        assert attach([hook(url="http://a/")], r.store, r.clock, r.engine, None) is None


# ---- through the real CLI -------------------------------------------------------------------


def test_tickui_run_calls_hooks_and_tickui_hooks_lists_them(tmp_path):
    db = tmp_path / "t.db"
    assert cli_json("hooks", db=db) == []  # no database: nothing created
    assert not db.exists()
    with Receiver() as receiver:
        config = tmp_path / "tickui.toml"
        config.write_text(
            "[[task]]\n"
            'name = "flaky"\n'
            'every = "1s"\n'
            f"command = ['sh', '-c', {json.dumps(FLAKY)}]\n"
            f"cwd = {json.dumps(str(tmp_path))}\n\n"
            "[[hook]]\n"
            'name = "ops"\n'
            'on = ["failed", "recovered"]\n'
            'tasks = ["fl*"]\n'
            f'url = "{receiver.url}"\n'
        )
        result = cli("--config", str(config), "run", "--for", "5", db=db)
        assert result.returncode == 0, result.stderr
        final = json.loads(result.stderr.strip().splitlines()[-1])
        assert final["hooks"]["delivered"] == 2 and final["hooks"]["failed"] == 0
        assert "secret-path" not in result.stderr
        poll(lambda: len(receiver.bodies) >= 2, 10, "two hook posts")
    assert [b["event"] for b in receiver.bodies][:2] == ["failed", "recovered"]
    before = db.stat().st_mtime_ns
    rows = cli_json("hooks", db=db)
    assert db.stat().st_mtime_ns == before  # read-only
    assert [(d["hook"], d["event"], d["task"], d["outcome"]) for d in rows][-2:] == [
        ("ops", "recovered", "flaky", "delivered"),
        ("ops", "failed", "flaky", "delivered"),
    ]
    assert set(rows[0]) == {
        "id",
        "hook",
        "event",
        "task",
        "occurrence_id",
        "created_at",
        "finished_at",
        "attempts",
        "outcome",
        "detail",
    }
    text = cli("hooks", "--limit", "1", db=db)
    assert text.returncode == 0 and len(text.stdout.strip().splitlines()) == 2
    assert text.stdout.startswith("ID  HOOK  EVENT")
    bad = cli("hooks", "--limit", "0", db=db)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


async def test_the_dashboards_host_calls_hooks_and_the_demo_does_not(tmp_path):
    from helpers import T0
    from tickui.common.clock import ManualClock
    from tickui.model.spec import build_spec
    from tickui.runtime.host import build_host
    from tickui.runtime.settings import Settings
    from tickui.store import Store

    with Receiver() as receiver:
        settings = Settings(hooks=(hook(url=receiver.url, on=["failed"]),))
        store = await Store.open(tmp_path / "t.db")
        clock = ManualClock(T0)
        spec = build_spec({"name": "broken", "every": "1h", "command": ["false"]}, T0)
        await store.add_task(spec, T0)
        demo = build_host(store, clock, settings, start_ticker=False, demo=True)
        assert demo.hooks is None
        host = build_host(store, clock, settings, start_ticker=False)
        assert host.hooks is not None
        await host.start()
        rows = await deliveries(store, 1)
        await host.close(grace=1)
    assert [(d.event, d.task, d.outcome) for d in rows] == [("failed", "broken", "delivered")]
    assert [b["event"] for b in receiver.bodies] == ["failed"]


async def test_an_engine_without_the_lease_tells_nothing(store_target, tmp_path):
    """A standby (a second dashboard beside `tickui run`) may see the leader's runs end
    (its stop reconciles); the leader tells them, the standby must not tell them twice."""
    from tickui.engine import EngineChange, SchedulerEngine

    with Receiver() as receiver:
        async with rig(store_target) as r:
            await r.add("broken", every="1h", command=["false"])
            leader = service(r, [hook(name="leader", url=receiver.url, on=["failed"])])
            standby_engine = SchedulerEngine(r.store, r.engine.dispatcher, r.clock)
            standby = attach(
                [hook(name="standby", url=receiver.url, on=["failed"])],
                r.store,
                r.clock,
                standby_engine,
                None,
            )
            await r.engine.start()
            await r.settle()
            (occ,) = await r.history()
            standby_engine._notify(EngineChange(occurrences=frozenset({occ.id})))
            await deliveries(r.store, 1)
            await standby.close()
            await leader.close()
            rows = await r.store.recent_deliveries()
    assert [(d.hook, d.outcome) for d in rows] == [("leader", "delivered")]
    assert len(receiver.bodies) == 1


async def test_a_non_2xx_answer_is_a_failed_attempt(tmp_path):
    with Receiver(status=500) as receiver:
        async with rig(tmp_path / "t.db") as r:
            await r.add("broken", every="1h", command=["false"])
            svc = service(r, [hook(url=receiver.url, on=["failed"])])
            await r.engine.start()
            await r.settle()
            (row,) = await deliveries(r.store, 1)
            await svc.close()
    assert len(receiver.bodies) == 3  # every attempt reached the server
    assert (row.outcome, row.attempts, row.detail) == (
        "failed",
        3,
        "HTTP 500 Internal Server Error",
    )


async def test_a_command_that_ignores_stdin_and_floods_stderr_is_read_in_bounded_memory(tmp_path):
    flood = "head -c 5000000 /dev/zero | tr '\\0' x >&2; echo >&2; echo 'last words' >&2; exit 1"
    async with rig(tmp_path / "t.db") as r:
        await r.add("broken", every="1h", command=["false"])
        h = parse_hook({"on": ["failed"], "command": ["sh", "-c", flood]}, 0)
        svc = service(r, [h], attempts=1)
        await r.engine.start()
        await r.settle()
        (row,) = await deliveries(r.store, 1)
        await svc.close()
    assert (row.outcome, row.attempts, row.detail) == ("failed", 1, "exit 1: last words")


async def test_a_real_tickers_breaker_opening_and_closing_reach_the_hook(tmp_path):
    from tickui.common.clock import SystemClock
    from tickui.store import Store
    from tickui.ticks.bus import MemoryBus
    from tickui.ticks.config import TickerConfig
    from tickui.ticks.sequence import SequenceAllocator
    from tickui.ticks.ticker import RuntimeScheduler

    config = TickerConfig(
        interval_ms=20, breaker_threshold=3, breaker_reset_s=1, scheduler_id="test-ticker"
    )
    ticker = RuntimeScheduler(
        config, SystemClock(), MemoryBus(), SequenceAllocator(None, "k", 10), align=False
    )
    with Receiver() as receiver:
        store = await Store.open(tmp_path / "t.db")
        h = hook(url=receiver.url, on=["breaker_open", "breaker_closed"])
        svc = attach([h], store, SystemClock(), None, ticker, backoff=(0.01,))
        ticker.simulate_failures = True
        await ticker.start()
        try:
            await deliveries(store, 1)
            ticker.simulate_failures = False
            await deliveries(store, 2)
        finally:
            await ticker.stop(timeout=1)
            await svc.close()
            await store.close()
    opened, closed = receiver.bodies
    assert (opened["event"], opened["state"]) == ("breaker_open", "OPEN")
    assert "simulated publish failure" in opened["detail"]
    assert (closed["event"], closed["state"]) == ("breaker_closed", "CLOSED")
    assert opened["task"] is None and set(opened) == FIELDS


# ---- the README's figures, at their defaults -----------------------------------------------


def _event(name: str = "failed", n: int = 1) -> HookEvent:
    base = dict.fromkeys(FIELDS - {"event", "host", "occurrence_id"})
    return HookEvent(event=name, host="h", occurrence_id=n, **base)


async def test_a_failing_delivery_has_3_attempts_half_a_second_then_a_second_apart(tmp_path):
    """README: up to 3 attempts, 0.5 s then 1 s apart, with the service's own defaults.
    Each gap is measured between the attempts' own starts (a real command each), so it
    may run over by process start-up: allowed 0.4 s over, never under."""
    stamps = tmp_path / "attempts"
    failing = parse_hook(
        {"name": "down", "on": ["failed"],
         "command": ["sh", "-c", f"date +%s.%N >> {stamps}; exit 1"]}, 0
    )  # fmt: skip
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([failing], r.store, r.clock)
        outcome, attempts, detail = await svc.deliver(failing, _event())
        await svc.close()
    assert (outcome, attempts, detail) == ("failed", 3, "exit 1")
    times = [float(line) for line in stamps.read_text().split()]
    assert len(times) == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.5 <= gaps[0] <= 0.5 + 0.4, f"the 2nd attempt came {gaps[0]:.3f} s after the 1st"
    assert 1.0 <= gaps[1] <= 1.0 + 0.4, f"the 3rd attempt came {gaps[1]:.3f} s after the 2nd"


async def test_a_hook_has_2_senders_and_a_queue_of_256(tmp_path):
    """README: events wait in a bounded queue (256) for 2 background senders per hook; a
    full queue drops events and counts them. With both senders stuck on a hanging
    command, exactly 256 more wait and the next one is dropped."""
    hang = parse_hook(
        {"name": "hang", "on": ["failed"], "command": ["sleep", "30"], "timeout": "30s"}, 0
    )
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([hang], r.store, r.clock, attempts=1)
        for n in range(4):
            svc.emit(_event(n=n))
        await wait_for(lambda: svc.status()["sending"] >= 2, 5, "both senders sending")
        await asyncio.sleep(0.2)  # a third sender, were there one, would take the next
        assert svc.status()["sending"] == 2 and svc.status()["waiting"] == 2
        for n in range(4, 258):
            svc.emit(_event(n=n))
        assert svc.status()["waiting"] == 256 and svc.counts["dropped"] == 0
        svc.emit(_event(n=258))
        assert svc.status()["waiting"] == 256 and svc.counts["dropped"] == 1
        await svc.close(grace=0.1)


async def test_refused_is_told_at_once_then_once_a_minute_per_sender_and_kind(tmp_path):
    """README: `refused` is told at once, then at most once a minute per sender and kind,
    on the engine's clock (a manual one here, moved to just under and to the minute)."""
    told = tmp_path / "told"
    told.mkdir()
    h = parse_hook(
        {"name": "alarm", "on": ["refused"],
         "command": ["sh", "-c", f"cat > {told}/$$.json"]}, 0
    )  # fmt: skip
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([h], r.store, r.clock)
        svc.on_refused("engine", "forged_event", 1, "bad signature")  # told
        svc.on_refused("engine", "forged_event", 2, "bad signature")  # within the minute
        svc.on_refused("engine", "foreign_event", 1, "from w2")  # another kind: told
        svc.on_refused("worker w1", "forged_event", 1, "bad signature")  # another sender: told
        r.clock.advance(59.9)
        svc.on_refused("engine", "forged_event", 3, "bad signature")  # 59.9 s: not yet
        r.clock.advance(0.1)
        svc.on_refused("engine", "forged_event", 4, "bad signature")  # 60 s: told
        r.clock.advance(30)
        svc.on_refused("engine", "forged_event", 5, "bad signature")  # 30 s since: not
        await deliveries(r.store, 4)
        await svc.close()
    # one file per delivery: two senders writing one file could interleave their bytes
    events = [json.loads(f.read_text()) for f in told.iterdir()]
    # two senders: the order they arrive in is not the order they were told in
    assert sorted((e["error_code"], e["detail"].split(" refused")[0]) for e in events) == [
        ("FOREIGN_EVENT", "engine: 1"),
        ("FORGED_EVENT", "engine: 1"),
        ("FORGED_EVENT", "engine: 4"),
        ("FORGED_EVENT", "worker w1: 1"),
    ]


async def test_the_newest_1000_deliveries_are_kept(tmp_path):
    """README: each delivery is recorded; the newest 1000 are kept."""
    async with rig(tmp_path / "t.db") as r:
        ids = [
            await r.store.start_delivery("ops", "failed", "t", n, r.clock.now())
            for n in range(1005)
        ]
        kept = await r.store.recent_deliveries(5000)
    assert len(kept) == 1000
    assert sorted(d.id for d in kept) == ids[5:]


def test_tickui_hooks_limit_goes_up_to_the_1000_deliveries_kept(tmp_path):
    """README: `tickui hooks --limit` is 1 to 1000 (no more deliveries are kept)."""
    db = tmp_path / "t.db"
    assert cli("task", "add", "a", "--every", "1h", "--", "true", db=db).returncode == 0
    assert cli("hooks", "--limit", "1000", db=db).returncode == 0
    over = cli("hooks", "--limit", "1001", db=db)
    assert over.returncode == 2 and "1 to 1000" in over.stderr, over.stderr


def test_a_hooks_timeout_goes_from_100ms_to_60s():
    """README: `timeout` per attempt, 100ms to 60s; one step past either end is refused."""
    for ok, micros in (("100ms", MICROS // 10), ("60s", 60 * MICROS)):
        assert hook(url="http://a/", timeout=ok).timeout == micros
    for bad in ("99ms", "60001ms"):
        with pytest.raises(BadInput) as caught:
            hook(url="http://a/", timeout=bad)
        assert caught.value.field == "timeout", bad


async def test_stopping_waits_for_a_delivery_in_flight_within_its_5_s(tmp_path):
    """README: when tickui stops it waits up to 5 s for queued deliveries: one that takes
    3 s is waited for and delivered, not cut short."""
    done = tmp_path / "done"
    slow = parse_hook(
        {"name": "slow", "on": ["failed"], "command": ["sh", "-c", f"sleep 3; touch {done}"]}, 0
    )
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([slow], r.store, r.clock, attempts=1)
        svc.emit(_event())
        await wait_for(lambda: svc.status()["sending"] == 1, 5, "the delivery under way")
        await svc.close()
        [row] = await r.store.recent_deliveries()
    assert done.exists() and row.outcome == "delivered", row


async def test_the_dashboard_waits_2_s_for_hook_deliveries_when_it_closes(tmp_path):
    """README: the dashboard waits up to 2 s (not tickui run's 5 s) for deliveries when it
    stops: one that takes 1 s is delivered, one that takes 4 s is recorded failed, and
    closing takes about 2 s (allowed 0.8 s over for stopping engine and ticker)."""
    from helpers import T0
    from tickui.common.clock import ManualClock
    from tickui.runtime.host import build_host
    from tickui.runtime.settings import Settings
    from tickui.store import Store

    def slow(name: str, seconds: int) -> HookConfig:
        command = ["sh", "-c", f"sleep {seconds}; touch {tmp_path / name}"]
        return parse_hook({"name": name, "on": ["failed"], "command": command}, 0)

    settings = Settings(hooks=(slow("quick", 1), slow("slow", 4)))
    store = await Store.open(tmp_path / "t.db")
    host = build_host(store, ManualClock(T0), settings, start_ticker=False)
    assert host.hooks is not None
    await host.start()
    host.hooks.emit(_event())
    await wait_for(lambda: host.hooks.status()["sending"] == 2, 5, "both deliveries under way")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await host.close(grace=0)
    took = loop.time() - started
    reader = await Store.open(tmp_path / "t.db")
    try:
        rows = {d.hook: d for d in await reader.recent_deliveries()}
    finally:
        await reader.close()
    assert rows["quick"].outcome == "delivered" and (tmp_path / "quick").exists()
    assert rows["slow"].outcome == "failed" and rows["slow"].detail == STOPPED
    assert 2.0 <= took <= 2.0 + 0.8, f"closing took {took:.2f} s"


class Redirect:
    """A real HTTP server that answers every POST with a 307 to `to` (method kept)."""

    def __init__(self, to: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(307)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/moved"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_a_url_hook_follows_no_redirect(tmp_path):
    """README: a URL gets one HTTP POST, redirects not followed: a 307 is a failed attempt
    and the place it points to hears nothing."""
    with Receiver() as target:
        moved = Redirect(target.url)
        try:
            h = hook(name="moved", url=moved.url, on=["failed"])
            async with rig(tmp_path / "t.db") as r:
                svc = HookService([h], r.store, r.clock, backoff=(0.01,))
                outcome, attempts, detail = await svc.deliver(h, _event())
                await svc.close()
        finally:
            moved.close()
    assert (outcome, attempts) == ("failed", 3) and detail.startswith("HTTP 307"), detail
    assert target.bodies == []


async def test_a_url_hook_takes_no_proxy_from_the_environment(tmp_path, monkeypatch):
    """README: a URL gets one HTTP POST, no proxy: with HTTP_PROXY set, the POST still goes
    straight to the hook's URL."""
    with Receiver() as target, Receiver() as proxy:
        proxy_url = f"http://127.0.0.1:{proxy.server.server_address[1]}"
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        h = hook(name="direct", url=target.url, on=["failed"])
        async with rig(tmp_path / "t.db") as r:
            svc = HookService([h], r.store, r.clock, backoff=(0.01,))
            outcome, _, detail = await svc.deliver(h, _event())
            await svc.close()
    assert outcome == "delivered", detail
    assert len(target.bodies) == 1 and proxy.bodies == []


async def test_a_command_hook_runs_without_the_run_marks_of_tickuis_environment(
    tmp_path, monkeypatch
):
    """README: a command runs without the run marks (`TICKUI_*`) of tickui's environment;
    it gets the event in $TICKUI_EVENT."""
    seen = tmp_path / "env"
    monkeypatch.setenv("TICKUI_TASK", "not-this-run")
    monkeypatch.setenv("TICKUI_OCCURRENCE_ID", "41")
    h = parse_hook({"name": "env", "on": ["failed"], "command": ["sh", "-c", f"env > {seen}"]}, 0)
    async with rig(tmp_path / "t.db") as r:
        svc = HookService([h], r.store, r.clock)
        outcome, _, detail = await svc.deliver(h, _event())
        await svc.close()
    assert outcome == "delivered", detail
    names = {line.split("=", 1)[0] for line in seen.read_text().splitlines() if "=" in line}
    assert {n for n in names if n.startswith("TICKUI_")} == {"TICKUI_EVENT"}


async def test_a_url_hooks_path_never_shows_even_when_the_server_says_it(tmp_path):
    """README: a delivery's detail never shows a URL's path (often a webhook's secret),
    even when the server's answer repeats it, whole URL or path alone."""
    path = "/services/T000/B000/SECRETxyz"

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
            self.send_response(404, f"no hook at {path} ({url})")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        h = hook(name="secret", url=f"http://127.0.0.1:{server.server_address[1]}{path}")
        async with rig(tmp_path / "t.db") as r:
            svc = HookService([h], r.store, r.clock, attempts=1)
            outcome, _, detail = await svc.deliver(h, _event())
            await svc.close()
            [row] = await r.store.recent_deliveries()
    finally:
        server.shutdown()
        server.server_close()
    assert outcome == "failed" and detail.startswith("HTTP 404 no hook at"), detail
    assert "SECRET" not in detail and "SECRET" not in (row.detail or ""), detail
