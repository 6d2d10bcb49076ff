"""`tickui worker` as real processes against the shared Tansu: commands in on the runs
topic, events out; every test has its own consumer group and filters events by its own
command ids (the topics are shared)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import signing_support
from services import private_tansu
from tickui.dispatch import messages as m

ROOT = Path(__file__).resolve().parents[2]
NOW = lambda: time.time_ns() // 1000  # noqa: E731


def command(argv, deadline_s=20.0, **kw) -> m.RunCommand:
    now = NOW()
    fields = {
        "command_id": f"wt-{uuid.uuid4().hex[:12]}",
        "occurrence_id": 1,
        "task": kw.pop("task", "t"),
        "argv": tuple(argv),
        "env": {},
        "cwd": None,
        "timeout_s": None,
        "scheduled_for": now,
        "attempt": 1,
        "deadline": now + int(deadline_s * 1_000_000),
        "owner": "test",
        "lease_token": 1,
    }
    fields.update(kw)
    return m.RunCommand(**fields)


class Bus:
    """A test engine's view of the topics: publishes commands and control, reads events."""

    def __init__(self, bootstrap: str, from_start: bool = False) -> None:
        self.bootstrap = bootstrap
        self.from_start = from_start
        self.events: list[m.RunEvent] = []
        self.beats: list[m.Heartbeat] = []

    async def __aenter__(self) -> Bus:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
        await admin.start()
        await admin.create_topics([NewTopic(t, m.DEFAULT_PARTITIONS, 1) for t in m.TOPICS])
        await admin.close()
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=False, acks="all"
        )
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=20
        )
        await self.consumer.start()
        for _ in range(100):  # a broker just (re)started: its metadata must show the topics
            known = await self.consumer.topics()
            if {m.EVENTS_TOPIC, m.WORKERS_TOPIC} <= known:
                break
            await asyncio.sleep(0.05)
        tps = [TopicPartition(t, p) for t in (m.EVENTS_TOPIC, m.WORKERS_TOPIC) for p in range(12)]
        self.consumer.assign(tps)
        if self.from_start:
            await self.consumer.seek_to_beginning(*tps)
        else:
            await self.consumer.seek_to_end(*tps)
        for tp in tps:
            await self.consumer.position(tp)
        self.reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc) -> None:
        self.reader.cancel()
        with contextlib.suppress(BaseException):
            await self.reader
        await asyncio.wait_for(self.consumer.stop(), 5)
        await asyncio.wait_for(self.producer.stop(), 5)

    async def _read(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=200)
            for tp, records in batch.items():
                for r in records:
                    if tp.topic == m.EVENTS_TOPIC:
                        self.events.append(m.RunEvent.decode(r.value))
                    else:
                        self.beats.append(m.Heartbeat.decode(r.value))

    async def send(self, cmd: m.RunCommand | bytes, key: str = "t", signed: bool = True) -> None:
        raw = cmd if isinstance(cmd, bytes) else cmd.encode()
        partition = signing_support.runs_partition(key)
        sig = signing_support.headers(m.RUNS_TOPIC, key, raw, partition) if signed else None
        await self.producer.send_and_wait(
            m.RUNS_TOPIC, raw, key=key.encode(), partition=partition, headers=sig
        )

    async def control(
        self, kind: str, cid: str, worker: str | None, reason: str = "", key: str | None = None
    ) -> None:
        msg = m.Control(kind, cid, worker, reason, NOW())
        raw, key = msg.encode(), (key or cid)
        sig = signing_support.headers(m.CONTROL_TOPIC, key, raw)
        await self.producer.send_and_wait(m.CONTROL_TOPIC, raw, key=key.encode(), headers=sig)

    async def refused(
        self, workers: str | tuple[str, ...], kind: str, count: int, timeout: float = 15.0
    ) -> None:
        """Wait until the last heartbeats of `workers` count `count` refusals of `kind`."""
        names = (workers,) if isinstance(workers, str) else workers
        end = time.monotonic() + timeout
        while True:
            last = {b.worker: b.refused for b in self.beats if b.worker in names}
            if sum(r.get(kind, 0) for r in last.values()) == count:
                return
            if time.monotonic() > end:
                raise AssertionError(f"not {count} {kind} refused by {names}: {last}")
            await asyncio.sleep(0.05)

    def of(self, cid: str) -> list[m.RunEvent]:
        return [e for e in self.events if e.command_id == cid]

    async def wait(self, cid: str, types: tuple[str, ...] = m.OUTCOMES, timeout=15.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [e for e in self.of(cid) if e.type in types]
            if found:
                return found[0]
            await asyncio.sleep(0.02)
        raise AssertionError(f"no {types} for {cid}: {self.of(cid)}")


class Worker:
    def __init__(self, bootstrap: str, tmp: Path, group: str, wid: str, *args: str) -> None:
        self.err = tmp / f"{wid}-{uuid.uuid4().hex[:6]}.err"
        argv = [
            sys.executable,
            "-m",
            "tickui",
            "worker",
            "--kafka",
            bootstrap,
            "--group",
            group,
        ]
        argv += ["--id", wid, "--log-dir", str(tmp / "logs"), "--session-timeout", "2s", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(argv, stderr=open(self.err, "w"), env=env, cwd=tmp)  # noqa: SIM115

    def text(self) -> str:
        return self.err.read_text()

    async def ready(self, timeout: float = 20.0) -> Worker:
        end = time.monotonic() + timeout
        while "ready" not in self.text():
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < end, f"worker not ready: {self.text()}"
            await asyncio.sleep(0.05)
        return self

    async def exit(self, timeout: float = 20.0) -> int:
        end = time.monotonic() + timeout
        while self.proc.poll() is None:
            assert time.monotonic() < end, f"worker did not exit: {self.text()}"
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
async def env(kafka_bootstrap, tmp_path):
    workers: list[Worker] = []
    group = f"wt-{uuid.uuid4().hex[:8]}"

    def start(wid: str = "w1", *args: str) -> Worker:
        worker = Worker(kafka_bootstrap, tmp_path, group, wid, *args)
        workers.append(worker)
        return worker

    async with Bus(kafka_bootstrap) as bus:
        try:
            yield bus, start, tmp_path
        finally:
            for worker in workers:
                worker.stop()


async def test_runs_a_command_and_reports_transition_then_one_outcome(env):
    bus, start, _tmp = env
    await start("w1", "--slots", "2").ready()
    ok = command(["sh", "-c", 'echo "hello $TICKUI_WORKER"; echo token=hunter2'])
    bad = command(["sh", "-c", "echo boom; exit 3"])
    slow = command(["sleep", "30"], timeout_s=0.3)
    missing = command(["/nonexistent/tickui-test-prog"])
    for c in (ok, bad, slow, missing):
        await bus.send(c)
    done = await bus.wait(ok.command_id)
    assert done.type == "run.completed" and done.worker == "w1"
    assert "hello w1" in done.payload["tail"] and "hunter2" not in done.payload["tail"]
    first, *_ = bus.of(ok.command_id)
    assert first.type == "control.run_transition"
    assert first.payload["state"] == "running" and first.payload["pid"] > 0
    failed = await bus.wait(bad.command_id)
    assert (failed.type, failed.payload["exit_code"]) == ("run.failed", 3)
    assert failed.payload["error_code"] == "EXIT_NONZERO" and "boom" in failed.payload["detail"]
    timed = await bus.wait(slow.command_id)
    assert (timed.type, timed.payload["error_code"]) == ("run.failed", "TIMEOUT")
    gone = await bus.wait(missing.command_id)
    assert (gone.type, gone.payload["error_code"]) == ("run.failed", "DISPATCH_FAILED")
    assert "No such file" in gone.payload["detail"]
    for c in (ok, bad, slow):
        assert next(e.type for e in bus.of(c.command_id)) == "control.run_transition"
        assert len([e for e in bus.of(c.command_id) if e.type in m.OUTCOMES]) == 1
    assert any(b.worker == "w1" and b.state == "alive" for b in bus.beats)


async def test_deadline_malformed_cancel_and_resend(env):
    bus, start, tmp = env
    worker = await start("w1").ready()
    await bus.send(b"{not json")
    late = command(["touch", str(tmp / "late-ran")], deadline_s=-1)
    await bus.send(late)
    failed = await bus.wait(late.command_id)
    assert (failed.type, failed.payload["error_code"]) == ("run.failed", m.DEADLINE)
    assert not (tmp / "late-ran").exists()
    assert "skipped" in worker.text()
    # cancel before it arrives: never started; cancel while running: ended, reported
    early = command(["touch", str(tmp / "early-ran")])
    await bus.control("cancel", early.command_id, None, "replaced")
    # a resend of an unknown id behind it on its partition: its answer says the cancel is read
    probe = "wt-probe-" + uuid.uuid4().hex
    await bus.control("resend", probe, "w1", key=early.command_id)
    assert (await bus.wait(probe)).type == "run.interrupted"
    await bus.send(early)
    ev = await bus.wait(early.command_id)
    assert (ev.type, ev.payload.get("detail")) == ("run.canceled", "replaced")
    assert not (tmp / "early-ran").exists()
    running = command(["sleep", "30"])
    await bus.send(running)
    await bus.wait(running.command_id, ("control.run_transition",))
    await bus.control("cancel", running.command_id, "w1", "user asked")
    ev = await bus.wait(running.command_id)
    assert (ev.type, ev.payload["detail"]) == ("run.canceled", "user asked")
    # resend: the same event again; unknown: interrupted
    await bus.control("resend", running.command_id, "w1")
    await bus.control("resend", "wt-unknown-" + uuid.uuid4().hex, "w1")
    end = time.monotonic() + 10
    while len([e for e in bus.of(running.command_id) if e.type in m.OUTCOMES]) < 2:
        assert time.monotonic() < end, bus.of(running.command_id)
        await asyncio.sleep(0.05)
    again = [e for e in bus.of(running.command_id) if e.type in m.OUTCOMES]
    assert again[0].event_id == again[1].event_id


async def test_redelivered_command_is_not_run_twice(env):
    """kill -9 right after the transition (before the command finished): the worker with the
    same id, restarted, runs it no second time; a copy of the command in another record (a
    replay) is refused by it and by any other worker, and counted."""
    bus, start, tmp = env
    marks = tmp / "marks"
    worker = await start("wk").ready()
    cmd = command(["sh", "-c", f"echo x >> {marks}; sleep 30"])
    await bus.send(cmd)
    await bus.wait(cmd.command_id, ("control.run_transition",))
    end = time.monotonic() + 10
    while not marks.exists():  # the gate opens right after the transition
        assert time.monotonic() < end, worker.text()
        await asyncio.sleep(0.02)
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(5)
    # the offset may be committed already (then nothing comes again); uncommitted, the same
    # record comes to the restarted worker, which stops the run (its supervisor outlived the
    # old worker) and answers with what its journal says. A copy of the
    # command in a new record is a replay: refused, counted in the heartbeat, never run.
    again = await start("wk").ready()
    await bus.send(cmd)
    await bus.refused("wk", "replayed_command", 1)
    # another worker id knows the record the command was started from (the transition
    # names it): the copy is a replay to it too (the group gives it to either worker)
    other = await start("wo").ready()
    await bus.send(cmd)
    await bus.refused(("wk", "wo"), "replayed_command", 2)
    assert marks.read_text().count("x") == 1
    outcomes = [e for e in bus.of(cmd.command_id) if e.type in m.OUTCOMES]
    assert [(e.type, e.payload["detail"]) for e in outcomes] in (
        [],
        [("run.interrupted", "worker restarted; its run was stopped")],
        # the restarted worker fences its earlier process's runs first: the supervisor
        # may see that before the stop reaches it
        [("run.interrupted", "worker restarted; its run was fenced (its lease ran out)")],
    )
    del again, other


async def test_a_restarted_worker_reports_what_its_runs_did_while_it_was_away(env):
    """kill -9 while two runs go on; one ends with 3, the other with 0 while no worker
    process is there; the worker restarted with the same id reports each run's real
    outcome from its journal (not lost, not interrupted)."""
    bus, start, tmp = env
    worker = await start("wa", "--slots", "2").ready()
    release = tmp / "release"
    wait = f"while [ ! -e {release} ]; do sleep 0.02; done"
    ok = command(["sh", "-c", f"touch {tmp / 'ok.began'}; {wait}; echo fine"])
    bad = command(["sh", "-c", f"touch {tmp / 'bad.began'}; {wait}; echo broke; exit 3"])
    for cmd in (ok, bad):
        await bus.send(cmd)
    # The "running" event goes out just before the command is let go: a kill between the
    # two leaves a run that never began (reported so). Here both must have begun.
    end = time.monotonic() + 20
    while not all((tmp / f"{name}.began").exists() for name in ("ok", "bad")):
        assert time.monotonic() < end, worker.text()
        await asyncio.sleep(0.02)
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(5)
    release.touch()  # both end with no worker process there to see it
    await start("wa").ready()
    done, failed = await bus.wait(ok.command_id), await bus.wait(bad.command_id)
    assert (done.type, done.payload["exit_code"]) == ("run.completed", 0), done
    assert "fine" in done.payload["tail"]
    assert (failed.type, failed.payload["exit_code"]) == ("run.failed", 3), failed
    assert failed.payload["error_code"] == "EXIT_NONZERO" and "broke" in failed.payload["tail"]
    for cmd in (ok, bad):
        assert len([e for e in bus.of(cmd.command_id) if e.type in m.OUTCOMES]) == 1


async def test_sigterm_drains_and_cancels_after_the_grace(env):
    bus, start, _tmp = env
    worker = await start("wd", "--stop-grace", "500ms", "--slots", "2").ready()
    quick = command(["sh", "-c", "sleep 0.2; echo done"])
    stuck = command(["sleep", "30"])
    await bus.send(quick)
    await bus.send(stuck)
    await bus.wait(stuck.command_id, ("control.run_transition",))
    worker.proc.send_signal(signal.SIGTERM)
    assert await worker.exit() == 0, worker.text()
    assert (await bus.wait(quick.command_id)).type == "run.completed"
    ev = await bus.wait(stuck.command_id)
    assert (ev.type, ev.payload["detail"]) == ("run.canceled", "worker stopped")
    # its last heartbeat, sent after those events, may reach this reader after them
    end = time.monotonic() + 10
    while not [b for b in bus.beats if b.worker == "wd" and b.state == "drained"]:
        assert time.monotonic() < end, [b.state for b in bus.beats if b.worker == "wd"]
        await asyncio.sleep(0.05)
    states = [b.state for b in bus.beats if b.worker == "wd"]
    assert "draining" in states and states[-1] == "drained"


async def test_sigterm_repeated_until_it_exits_still_ends_with_0(env):
    """A supervisor repeating SIGTERM while the worker drains and winds down: every signal
    after the first is absorbed (it exited -15 every time before)."""
    _bus, start, _tmp = env
    worker = await start("wr").ready()
    sent, end = 0, time.monotonic() + 30
    while worker.proc.poll() is None and time.monotonic() < end:
        worker.proc.send_signal(signal.SIGTERM)
        sent += 1
        await asyncio.sleep(0.003)
    assert sent > 1
    assert await worker.exit() == 0, worker.text()


async def test_bad_input_exits_2_with_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cases = [
        ["--kafka", "not a bootstrap"],
        ["--kafka", "127.0.0.1:9"],  # nobody listens there
        ["--kafka", "127.0.0.1:9092", "--slots", "0"],
        ["--kafka", "127.0.0.1:9092", "--id", "bad id!"],
    ]
    for args in cases:
        done = subprocess.run(
            [sys.executable, "-m", "tickui", "worker", *args, "--log-dir", str(tmp_path)],
            capture_output=True, text=True, env=env, timeout=20,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr


async def test_events_wait_in_the_outbox_while_the_broker_is_down(tmp_path):
    """A run ends while the broker is away; the broker comes back empty (memory storage):
    the worker creates the topics again and publishes the outcome it kept."""
    with private_tansu() as broker:
        async with Bus(broker.bootstrap) as bus:
            worker = Worker(broker.bootstrap, tmp_path, "wt-outbox", "wb")
            try:
                await worker.ready()
                go = tmp_path / "go"
                script = f"while [ ! -e {go} ]; do sleep 0.05; done; echo survived"
                cmd = command(["sh", "-c", script])
                await bus.send(cmd)
                await bus.wait(cmd.command_id, ("control.run_transition",))
                await asyncio.wait_for(bus.consumer.stop(), 5)  # it may hang on a dead broker
                bus.reader.cancel()
                broker.kill()
                go.touch()  # the run ends while the broker is away
                await asyncio.sleep(1.5)
                await asyncio.to_thread(broker.restart)
                async with Bus(broker.bootstrap, from_start=True) as after:
                    try:
                        ev = await after.wait(cmd.command_id, timeout=15)
                    except AssertionError as exc:
                        raise AssertionError(worker.text()) from exc
                    assert ev.type == "run.completed" and "survived" in ev.payload["tail"]
                    # what the old broker had acknowledged (the transition) is sent again,
                    # same event ids: one transition, one outcome, however often each came
                    end = time.monotonic() + 10
                    while len({e.event_id for e in after.of(cmd.command_id)}) < 2:
                        assert time.monotonic() < end, after.of(cmd.command_id)
                        await asyncio.sleep(0.05)
                    kinds = {(e.type, e.event_id) for e in after.of(cmd.command_id)}
                    assert sorted(k for k, _ in kinds) == [m.RUN_TRANSITION, "run.completed"]
                    # the group is gone with the broker's memory: the worker joins again and
                    # takes commands published on the new topics
                    fresh = command(["echo", "again"])
                    await after.send(fresh)
                    ev = await after.wait(fresh.command_id, timeout=20)
                    assert ev.type == "run.completed" and "again" in ev.payload["tail"]
                worker.proc.send_signal(signal.SIGTERM)
                assert await worker.exit() == 0, worker.text()
            finally:
                worker.stop()


async def test_two_workers_share_the_work_and_run_each_command_once(env):
    bus, start, tmp = env
    one, two = start("wa"), start("wb")
    await one.ready()
    await two.ready()
    cmds = [
        command(["sh", "-c", f"echo {i} >> {tmp / 'runs'}; sleep 0.3"], task=f"task{i}")
        for i in range(16)
    ]
    for c in cmds:
        await bus.send(c, key=c.task)
    outcomes = [await bus.wait(c.command_id) for c in cmds]
    assert {e.type for e in outcomes} == {"run.completed"}
    assert {e.worker for e in outcomes} == {"wa", "wb"}
    assert sorted((tmp / "runs").read_text().split(), key=int) == [str(i) for i in range(16)]


async def test_an_outcomes_tail_is_the_last_4_kib_of_output(env):
    """README: an outcome event's `tail` is the redacted last 4 KiB of the run's output:
    10 KiB written, exactly the last 4096 bytes come back, the last line with them."""
    bus, start, _tmp = env
    await start("w1").ready()
    big = command(["sh", "-c", "head -c 10240 /dev/zero | tr '\\0' a; echo; echo the-end"])
    await bus.send(big)
    done = await bus.wait(big.command_id)
    assert done.type == "run.completed"
    tail = done.payload["tail"]
    assert len(tail.encode()) == 4096, len(tail.encode())
    assert tail == "a" * (4096 - len("\nthe-end\n")) + "\nthe-end\n"


async def test_a_worker_beats_every_2_s_with_4_slots_by_default(env):
    """README: `tickui.workers.v1`, every 2 s, `"slots": 4` for a worker started without
    `--slots` (1 to 256, default 4). Two heartbeats after the one that says the worker is
    ready are 2 s apart on the worker's own clock (`at`), allowed 0.3 s over for sending
    on a loaded machine."""
    bus, start, _tmp = env
    await start("w1").ready()
    since = NOW() + 100_000  # past the heartbeat sent when the group gave it partitions

    def beats() -> list[m.Heartbeat]:
        return [b for b in bus.beats if b.worker == "w1" and b.at > since]

    end = time.monotonic() + 10
    while len(beats()) < 2:
        assert time.monotonic() < end, f"heartbeats: {bus.beats}"
        await asyncio.sleep(0.05)
    first, second = sorted(beats(), key=lambda b: b.seq)[:2]
    assert (first.slots, second.slots) == (4, 4) and first.state == "alive"
    gap = (second.at - first.at) / 1e6
    assert 2.0 - 0.05 <= gap <= 2.0 + 0.3, f"heartbeats {gap:.3f} s apart"
