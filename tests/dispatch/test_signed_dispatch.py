"""Only the engine commands a worker: a real `tickui run --dispatch kafka` and a real `tickui
worker` on Tansu, and messages produced by hand to their topics as an attacker on the same
broker would: unsigned, signed with another key, past their deadline, a copy of a real
command, a forged outcome, a forged cancel. None is believed; each is counted where
`tickui workers` shows it, and the engine's `refused` hook is told."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka_support import (
    KafkaEngine,
    Tap,
    Worker,
    add_task,
    iso_second,
    lines,
    micros,
    occurrences,
    rows,
    unique,
    wait_for,
    workers_json,
)

import signing_support
from helpers import cli
from services import private_tansu
from tickui.dispatch import keyfile
from tickui.dispatch import messages as m
from tickui.dispatch.signing import Keyring

pytestmark = pytest.mark.slow

OTHER = Keyring([keyfile.new_key()])  # a key the engine and the workers never heard of


def produce(
    bootstrap: str, topic: str, key: str, value: bytes, headers=None, partition=None
) -> None:
    """One message on `topic`, as anyone with access to the broker can write it."""
    from aiokafka import AIOKafkaProducer

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
        await producer.start()
        try:
            await producer.send_and_wait(
                topic, value, key=key.encode(), headers=headers, partition=partition
            )
        finally:
            await producer.stop()

    asyncio.run(send())


def command(argv: list[str], deadline_in: float = 60.0) -> m.RunCommand:
    now = time.time_ns() // 1000
    return m.RunCommand(
        command_id=f"cmd-0-{uuid.uuid4().hex[:12]}",
        occurrence_id=999_999,
        task="t",
        argv=tuple(argv),
        env={},
        cwd=None,
        timeout_s=None,
        scheduled_for=now,
        attempt=1,
        deadline=now + int(deadline_in * 1_000_000),
        owner="tickui-attacker",
        lease_token=1,
    )


def run_now(db: Path, name: str, out: Path, then: str = "") -> None:
    """A task every hour: its first slot is now (then not again in the test)."""
    add_task(db, name, out, every="1h", then=then)


def refused_by_worker(db: Path, worker_id: str) -> dict[str, int]:
    for w in workers_json(db):
        if w["id"] == worker_id:
            return w.get("refused") or {}
    return {}


def refused_by_engine(db: Path) -> dict[str, int]:
    found = rows(db, "SELECT refused FROM dispatch_security")
    return json.loads(found[0]["refused"]) if found else {}


def said(tap: Tap, worker_id: str) -> list[int]:
    """The due instant each of the worker's heartbeats says it waits for (0: none)."""
    return [
        micros(data["due"]) if data.get("due") else 0
        for _, data, _, _ in tap.decoded(m.WORKERS_TOPIC)
        if isinstance(data, dict) and data.get("worker") == worker_id
    ]


@pytest.fixture
def broker():
    """A broker of the test's own: the counts asserted here are exact, and no other test's
    traffic (nor these forged messages) crosses the shared one."""
    with private_tansu() as server:
        yield server.bootstrap


def _start(
    tmp_path: Path,
    bootstrap: str,
    procs: list,
    *worker_args: str,
    hook: bool = False,
    engine_args: tuple[str, ...] = (),
):
    db = tmp_path / "t.db"
    config = tmp_path / "tickui.toml"
    hooked = tmp_path / "hooked"  # one file per delivery: a hook's two senders run at once
    hooked.mkdir()
    text = '[dispatch]\nmode = "kafka"\nstart_timeout = "20s"\nworker_timeout = "10s"\n'
    if hook:
        text += (
            '\n[[hook]]\nname = "alarm"\non = ["refused"]\n'
            f'command = ["sh", "-c", "cat > {hooked}/$$.part && '
            f'mv {hooked}/$$.part {hooked}/$$.json"]\n'
        )
    config.write_text(text)
    assert cli("task", "list", db=db).returncode == 0  # the database exists before the engine
    worker = Worker(bootstrap, unique("g-signed"), unique("w"), tmp_path, 2, *worker_args)
    procs.append(worker)
    engine = KafkaEngine(db, config, bootstrap, tmp_path / "engine.log", *engine_args)
    procs.append(engine)
    wait_for(lambda: worker.ready, 30, "the worker to hold its partitions")
    wait_for(lambda: any(w["id"] == worker.id for w in workers_json(db)), 30, "a heartbeat")
    return db, worker, engine, hooked


def test_forged_expired_and_replayed_commands_never_run(tmp_path, broker, procs):
    kafka_bootstrap = broker
    db, worker, _engine, hooked = _start(tmp_path, kafka_bootstrap, procs, hook=True)
    out = tmp_path / "ran.txt"
    with Tap(kafka_bootstrap) as tap:
        # a real run first: the engine's command, run once
        run_now(db, "real", out)
        wait_for(lambda: any(o["state"] == "succeeded" for o in occurrences(db)), 30, "the run")
        real = occurrences(db)[0]["command_id"]
        commands = wait_for(lambda: real in (c := tap.commands()) and c, 10, "the command")
        original, key, value = commands[real]
        signed = signing_support.headers(m.RUNS_TOPIC, key, value, original)

        marks = {name: tmp_path / f"{name}.mark" for name in ("unsigned", "other", "late")}
        at = signing_support.runs_partition("t")
        unsigned = command(["sh", "-c", f"id > {marks['unsigned']}"]).encode()
        produce(kafka_bootstrap, m.RUNS_TOPIC, "t", unsigned, partition=at)
        other = command(["sh", "-c", f"id > {marks['other']}"]).encode()
        produce(kafka_bootstrap, m.RUNS_TOPIC, "t", other,
                OTHER.seal(m.RUNS_TOPIC, b"t", other, at), at)  # fmt: skip
        late = command(["sh", "-c", f"id > {marks['late']}"], deadline_in=-5).encode()
        produce(kafka_bootstrap, m.RUNS_TOPIC, "t", late,
                signing_support.headers(m.RUNS_TOPIC, "t", late, at), at)  # fmt: skip
        # a perfect copy of the real command (same bytes, same headers) where it was: a
        # replay; and on another partition (another worker's): its signature names the
        # partition it was sent to, so there it does not check
        produce(kafka_bootstrap, m.RUNS_TOPIC, key.decode(), value, signed, original)
        produce(kafka_bootstrap, m.RUNS_TOPIC, key.decode(), value, signed, (original + 1) % 12)

        want = {"forged_command": 3, "expired_command": 1, "replayed_command": 1}
        wait_for(
            lambda: refused_by_worker(db, worker.id) == want, 20, f"the worker to count {want}"
        )
    assert not any(mark.exists() for mark in marks.values())
    assert out.read_text().count("real") == 1
    said = cli("workers", db=db)
    assert said.returncode == 0
    assert "3 forged commands, 1 expired command, 1 replayed command" in said.stdout
    assert "refused a forged command: unsigned" in worker.output()

    # the engine's hook is told, once for the kind (then at most once a minute)
    def told():
        events = [json.loads(f.read_text()) for f in hooked.glob("*.json")]
        return [e for e in events if "FORGED_COMMAND" in json.dumps(e)]

    (event, *_) = wait_for(told, 20, "the refused hook")
    assert event["event"] == "refused" and worker.id in event["detail"]


def test_forged_outcomes_and_cancels_do_not_settle_a_run(tmp_path, broker, procs):
    kafka_bootstrap = broker
    db, worker, _engine, _ = _start(tmp_path, kafka_bootstrap, procs)
    gate, out = tmp_path / "gate", tmp_path / "ran.txt"
    wait_gate = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    run_now(db, "held", out, then=wait_gate)
    occ = wait_for(
        lambda: next((o for o in occurrences(db) if o["state"] == "running"), None), 30, "a run"
    )
    cid, run_id = occ["command_id"], occ["run_id"]

    def outcome(worker_id: str) -> bytes:
        payload = {"exit_code": 0, "error_code": None, "detail": None, "tail": "forged"}
        event = m.RunEvent(m.new_event_id(), "run.completed", cid, run_id, worker_id,
                           time.time_ns() // 1000, payload)  # fmt: skip
        return event.encode()

    forged = outcome(worker.id)
    produce(kafka_bootstrap, m.EVENTS_TOPIC, cid, forged)  # unsigned
    other = outcome(worker.id)
    produce(kafka_bootstrap, m.EVENTS_TOPIC, cid, other, OTHER.seal(m.EVENTS_TOPIC, cid.encode(),
                                                                     other))  # fmt: skip
    # signed with the real key, but from a worker that did not start the run
    intruder = outcome("intruder")
    produce(kafka_bootstrap, m.EVENTS_TOPIC, cid, intruder,
            signing_support.headers(m.EVENTS_TOPIC, cid, intruder))  # fmt: skip
    cancel = m.Control("cancel", cid, worker.id, "forged", time.time_ns() // 1000).encode()
    produce(kafka_bootstrap, m.CONTROL_TOPIC, worker.id, cancel)  # unsigned

    want = {"forged_event": 2, "foreign_event": 1}
    wait_for(lambda: refused_by_engine(db) == want, 20, f"the engine to count {want}")
    wait_for(lambda: refused_by_worker(db, worker.id) == {"forged_control": 1}, 20, "the cancel")
    (now_occ,) = [o for o in occurrences(db) if o["command_id"] == cid]
    assert now_occ["state"] == "running", now_occ
    gate.touch()
    wait_for(lambda: occurrences(db)[0]["state"] == "succeeded", 20, "the real outcome")
    said = cli("workers", db=db).stdout
    assert "2 forged run events, 1 run event from another worker refused" in said


def _exit_of(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    import subprocess

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_no_key_no_start_unless_insecure(tmp_path, broker, procs, monkeypatch):
    kafka_bootstrap = broker
    env = {k: v for k, v in os.environ.items() if k != "TICKUI_KEY_FILE"}
    worker = [sys.executable, "-m", "tickui", "worker", "--kafka", kafka_bootstrap]
    code, err = _exit_of(worker, env)
    assert code == 2 and err.count("\n") == 1, err
    assert "tickui key new" in err and "--insecure" in err
    engine = [sys.executable, "-m", "tickui", "--db", str(tmp_path / "t.db"), "run",
              "--dispatch", "kafka", "--kafka", kafka_bootstrap, "--for", "5"]  # fmt: skip
    code, err = _exit_of(engine, env)
    assert code == 2 and err.count("\n") == 1 and "tickui key new" in err, err
    loose = tmp_path / "loose.key"
    assert cli("key", "new", str(loose)).returncode == 0
    loose.chmod(0o640)
    code, err = _exit_of([*worker, "--key-file", str(loose)], env)
    assert code == 2 and "mode 640" in err and "chmod 600" in err, err
    # --insecure starts, and says so where the user looks
    monkeypatch.delenv("TICKUI_KEY_FILE")
    db, insecure, engine, _ = _start(
        tmp_path, kafka_bootstrap, procs, "--insecure", engine_args=("--insecure",)
    )
    assert "INSECURE" in insecure.output()
    wait_for(lambda: any(w.get("insecure") for w in workers_json(db)), 20, "its heartbeat")
    said = wait_for(
        lambda: "INSECURE, dispatch messages" in (text := cli("workers", db=db).stdout) and text,
        20,
        "the engine's line",
    )
    assert f"worker {insecure.id}: INSECURE" in said
    assert "INSECURE" in engine.output()
    # a keyed engine's command reaching an insecure worker: it cannot tell it from a copy
    mark = tmp_path / "signed.mark"
    at = signing_support.runs_partition("t")
    signed = command(["sh", "-c", f"id > {mark}"]).encode()
    produce(kafka_bootstrap, m.RUNS_TOPIC, "t", signed,
            signing_support.headers(m.RUNS_TOPIC, "t", signed, at), at)  # fmt: skip
    wait_for(lambda: refused_by_worker(db, insecure.id) == {"unverifiable_command": 1}, 20, "count")
    assert not mark.exists()


def test_allow_refuses_other_programs(tmp_path, broker, procs):
    kafka_bootstrap = broker
    db, worker, _engine, _ = _start(tmp_path, kafka_bootstrap, procs, "--allow", "sh")
    out = tmp_path / "ran.txt"
    run_now(db, "shell", out)
    python = tmp_path / "python.mark"
    added = cli("task", "add", "py", "--every", "1h", "--",
                "python3", "-c", f"open('{python}', 'w')", db=db)  # fmt: skip
    assert added.returncode == 0, added.stderr
    ended = wait_for(
        lambda: (
            (o := {r["task"]: r for r in occurrences(db)})
            and len(o) == 2
            and all(r["state"] in ("succeeded", "failed") for r in o.values())
            and o
        ),
        30,
        "both runs to end",
    )
    assert ended["shell"]["state"] == "succeeded"
    assert ended["py"]["state"] == "failed" and ended["py"]["error_code"] == "DISPATCH_FAILED"
    assert "not allowed on this worker" in ended["py"]["detail"]
    assert not python.exists()
    wait_for(
        lambda: refused_by_worker(db, worker.id) == {"disallowed_command": 1},
        20,
        f"the count: {workers_json(db)}",
    )


@pytest.mark.parametrize("insecure", [False, True])
def test_odd_records_on_every_topic_stop_no_reader(tmp_path, broker, procs, monkeypatch, insecure):
    """Empty records (no value), oversized ones, a pile of headers, a signature header
    holding junk, nested JSON: on every topic, to a keyed engine and worker (and to
    insecure ones, whose readers decode all of it). Nothing is believed, no reader stops: a
    real run afterwards still runs and settles."""
    from aiokafka import AIOKafkaProducer

    flags = ("--insecure",) if insecure else ()
    if insecure:
        monkeypatch.delenv("TICKUI_KEY_FILE")
    db, worker, engine, _ = _start(tmp_path, broker, procs, *flags, engine_args=flags)
    junk = [(None, []), (b"x" * 900_000, []), (b"[" * 50_000, []),
            (b"{}", [(f"h{i}", b"v") for i in range(200)]),
            (b"{}", [("tickui-kid", b"\\xff"), ("tickui-sig", b"\\x00" * 64)])]  # fmt: skip

    async def flood() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker, enable_idempotence=False, max_request_size=2_000_000
        )
        await producer.start()
        try:
            for topic in m.TOPICS:
                for value, headers in junk:
                    for partition in (0, signing_support.runs_partition("t")):
                        await producer.send_and_wait(
                            topic, value, key=b"t", headers=headers, partition=partition
                        )
        finally:
            await producer.stop()

    asyncio.run(flood())
    out = tmp_path / "ran.txt"
    run_now(db, "after", out)
    wait_for(lambda: any(o["state"] == "succeeded" for o in occurrences(db)), 30, "the run")
    assert out.read_text().count("after") == 1
    assert worker.alive and engine.alive
    kind = "unverifiable_command" if insecure else "forged_command"
    wait_for(lambda: refused_by_worker(db, worker.id).get(kind, 0) >= (2 if insecure else 10),
             20, "count")  # fmt: skip
    assert "Traceback" not in worker.output() + engine.output()


def test_workers_wait_for_the_next_due_run_and_never_for_a_forged_notice(tmp_path, broker, procs):
    """The engine tells its workers when the next run is due: a worker waits for that
    instant (its heartbeats say which; it polls fast from shortly before it) and runs the
    command when it comes. A notice unsigned or signed with another key is refused, counted
    and never waited for; one signed with the real key is."""

    with Tap(broker) as tap:
        db, worker, _engine, _ = _start(tmp_path, broker, procs)
        now = time.time()
        fake = int((now + 45) * 1_000_000)
        value = m.Control.next_due(fake, int(now * 1_000_000)).encode()
        produce(broker, m.CONTROL_TOPIC, "due", value)  # unsigned
        produce(broker, m.CONTROL_TOPIC, "due", value, OTHER.seal(m.CONTROL_TOPIC, b"due", value))
        want = {"forged_control": 2}
        wait_for(lambda: refused_by_worker(db, worker.id) == want, 20, "the forged notices")

        out = tmp_path / "ran.txt"
        # the engine looks for the next due run every second and the worker beats every 2 s:
        # 8 s leaves room for both, twice over, before the run
        at = iso_second(time.time() + 8)
        add_task(db, "soon", out, "--at", at)
        due = micros(at)
        wait_for(lambda: due in said(tap, worker.id), 7, "a heartbeat waiting for the due run")
        found = wait_for(lambda: lines(out), 30, "the announced run")
        assert [line.task for line in found] == ["soon"]
        wait_for(lambda: occurrences(db)[0]["state"] == "succeeded", 20, "its outcome")
        assert fake not in said(tap, worker.id)

        real = int((time.time() + 50) * 1_000_000)
        value = m.Control.next_due(real, time.time_ns() // 1000).encode()
        headers = signing_support.headers(m.CONTROL_TOPIC, b"due", value)
        produce(broker, m.CONTROL_TOPIC, "due", value, headers)
        wait_for(lambda: real in said(tap, worker.id), 20, "a heartbeat waiting for the signed one")
        assert fake not in said(tap, worker.id)
        assert refused_by_worker(db, worker.id) == want


def test_a_due_notice_quickens_only_the_worker_holding_the_runs_partition(tmp_path, broker, procs):
    """The notice names the partition the due command goes to: the worker holding it waits
    for the instant (its heartbeats say so, it polls fast) and runs it; the other worker of
    the group stays at rest and never says it waits."""

    with Tap(broker) as tap:
        db, first, _engine, _ = _start(tmp_path, broker, procs)
        second = Worker(broker, first.group, unique("w"), tmp_path, 2)
        procs.append(second)
        wait_for(lambda: second.ready, 30, "the second worker to hold its partitions")
        wait_for(lambda: {first.id, second.id} <= {w["id"] for w in workers_json(db)}, 30,
                 "both workers' heartbeats")  # fmt: skip
        out = tmp_path / "ran.txt"
        at = iso_second(time.time() + 8)
        add_task(db, "soon", out, "--at", at)
        due = micros(at)
        waiting = wait_for(
            lambda: [w for w in (first, second) if due in said(tap, w.id)], 7, "a worker waiting"
        )
        notices = [m.Control.decode(raw) for _, _, raw, _ in tap.decoded(m.CONTROL_TOPIC)]
        wait_for(lambda: lines(out), 30, "the announced run")
        wait_for(lambda: occurrences(db)[0]["state"] == "succeeded", 20, "its outcome")
        ran = occurrences(db)[0]["worker"]
        assert [w.id for w in waiting] == [ran]
        other = second if ran == first.id else first
        assert due not in said(tap, other.id)
        named = [c.partitions for c in notices if c.type == "due" and c.due == due]
        assert named and all(len(p) == 1 for p in named), named
