"""The Kafka dispatcher against a real Tansu broker and a real SQLite file, with the
engine on a manual clock. A small in-test "worker" reads the commands and answers with
run events and heartbeats, as `tickui worker` does."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import asynccontextmanager

import pytest

import signing_support
from helpers import T0, wait_for
from services import private_tansu
from tickui.common.clock import ManualClock
from tickui.common.kafka import quietly_stop
from tickui.common.timeutil import MICROS
from tickui.dispatch.kafka import KafkaDispatcher
from tickui.dispatch.kafka_link import KafkaLink
from tickui.dispatch.messages import (
    CONTROL_TOPIC,
    EVENTS_TOPIC,
    RUNS_TOPIC,
    WORKERS_TOPIC,
    Control,
    Heartbeat,
    RunCommand,
    RunEvent,
    new_event_id,
)
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.occurrence import RUN_CANCELED, RUN_COMPLETED, RUN_TRANSITION
from tickui.model.spec import build_spec
from tickui.store import Store

pytestmark = pytest.mark.timeout(60)


class FakeWorker:
    """Reads RunCommands and control messages (from the end, no group) and publishes
    events and heartbeats for them."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.producer = None
        self.consumer = None
        self.beats = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        link = KafkaLink(self.bootstrap)
        await link.ready()  # the topics, on a fresh broker
        await link.close()
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=False, acks="all"
        )
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False
        )
        await self.consumer.start()
        tps = []
        for topic in (RUNS_TOPIC, CONTROL_TOPIC):
            await wait_for(lambda t=topic: self.consumer.partitions_for_topic(t), what=topic)
            tps += [TopicPartition(topic, p) for p in self.consumer.partitions_for_topic(topic)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        for tp in tps:
            await self.consumer.position(tp)

    async def stop(self) -> None:
        await quietly_stop(self.consumer)
        await quietly_stop(self.producer)

    async def read(self, topic: str, command_ids: set[str], count: int = 1, timeout=10.0):
        """The next `count` messages of `topic` naming one of `command_ids`."""
        found = []
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len(found) < count:
            assert loop.time() < end, f"no {topic} message for {command_ids}"
            batches = await self.consumer.getmany(timeout_ms=200)
            for tp, messages in batches.items():
                if tp.topic != topic:
                    continue
                for m in messages:
                    if topic == RUNS_TOPIC:
                        item = RunCommand.decode(m.value)
                    else:
                        item = Control.decode(m.value)
                    if item.command_id in command_ids:
                        found.append((m.key, item))
        return found

    async def event(self, kind: str, command_id: str, payload: dict, event_id=None) -> str:
        event_id = event_id or new_event_id()
        event = RunEvent(event_id, kind, command_id, f"run-{command_id}", self.name, T0, payload)
        await self.signed(EVENTS_TOPIC, command_id.encode(), event.encode())
        return event_id

    async def raw(self, topic: str, value: bytes) -> None:
        await self.signed(topic, b"x", value)

    async def signed(self, topic: str, key: bytes, value: bytes) -> None:
        headers = signing_support.headers(topic, key, value)
        await self.producer.send_and_wait(topic, value, key=key, headers=headers)

    async def heartbeat(self, running=(), state="alive", at=T0) -> None:
        """One heartbeat, numbered as a worker numbers them (the engine keeps the newest)."""
        self.beats += 1
        beat = Heartbeat(self.name, "host-x", 2, tuple(running), "t", at, state, "g", "/wl",
                         boot=1, seq=self.beats)  # fmt: skip
        await self.signed(WORKERS_TOPIC, self.name.encode(), beat.encode())


class Rig:
    def __init__(self, store, clock, engine, dispatcher) -> None:
        self.store, self.clock, self.engine, self.dispatcher = store, clock, engine, dispatcher

    async def add(self, name: str, **fields) -> None:
        fields.setdefault("command", ["echo", "hi"])
        fields.setdefault("every", "1m")
        await self.store.add_task(build_spec({"name": name, **fields}, T0), T0)

    async def tick(self, seconds: float = 0) -> None:
        self.clock.advance(seconds)
        await self.engine.tick(self.clock.now())

    async def occ(self, name: str):
        return (await self.store.history(name, limit=1))[0]

    async def start_on(self, worker: FakeWorker, occ) -> None:
        """`worker` says it started `occ` (a transition event); wait until it shows."""
        await worker.event(RUN_TRANSITION, occ.command_id, {"state": "running"})
        await self.state(occ.task, "running")

    async def heard_running(self, worker: FakeWorker, name: str = "a", **fields):
        """Task `name` started on `worker`, whose heartbeat the engine has recorded: its
        run and the worker's row."""
        await self.add(name, **fields)
        await self.tick()
        occ = await self.occ(name)
        await worker.heartbeat()
        await self.start_on(worker, occ)

        async def seen():
            return [w for w in await self.store.list_workers() if w.id == worker.name]

        [info] = await wait_for(seen, what="the heartbeat")
        return occ, info

    async def running_on(self, worker: FakeWorker, name: str = "a"):
        """Task `name` added, its first slot claimed and started on `worker`."""
        await self.add(name)
        await self.tick()
        occ = await self.occ(name)
        await self.start_on(worker, occ)
        return occ

    async def state(self, name: str, want: str, timeout=10.0):
        async def check():
            await self.engine.reconcile()
            occ = await self.occ(name)
            return occ if occ.state == want else None

        return await wait_for(check, timeout, f"{name} {want}")


@asynccontextmanager
async def kafka_rig(db, bootstrap: str, start_timeout: float = 30.0, owner: str | None = None):
    store = await Store.open(db)
    clock = ManualClock(T0)
    dispatcher = KafkaDispatcher(
        store,
        clock,
        bootstrap,
        keyring=signing_support.KEYRING,
        start_timeout=start_timeout,
        worker_timeout=10.0,
    )
    engine = SchedulerEngine(store, dispatcher, clock, EngineConfig(owner=owner))
    try:
        await engine.start()
        if not bootstrap.endswith(":9"):  # reading from the end: positioned before we write
            await asyncio.wait_for(dispatcher.heartbeats.caught_up.wait(), 15)
            await asyncio.wait_for(dispatcher.events.caught_up.wait(), 15)
        yield Rig(store, clock, engine, dispatcher)
    finally:
        await engine.stop(grace=0.5)
        await store.close()


@pytest.fixture
async def worker(kafka_bootstrap):
    w = FakeWorker(kafka_bootstrap, f"w-{uuid.uuid4().hex[:8]}")
    await w.start()
    yield w
    await w.stop()


async def test_command_goes_out_and_events_settle_the_run(tmp_db, kafka_bootstrap, worker):
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        await r.add("a", env={"X": "1"}, cwd="/tmp", timeout="5s")
        await r.tick()
        occ = await r.occ("a")
        assert occ.state == "accepted" and occ.deadline == T0 + 30 * MICROS
        assert occ.command_id.startswith(f"cmd-{occ.id}-")
        [(key, command)] = await worker.read(RUNS_TOPIC, {occ.command_id})
        assert key == b"a"
        assert (command.occurrence_id, command.task, command.argv) == (occ.id, "a", ("echo", "hi"))
        assert command.env == {"X": "1", "TICKUI_TASK": "a", "TICKUI_KIND": "scheduled"}
        assert (command.cwd, command.timeout_s, command.attempt) == ("/tmp", 5.0, 1)
        assert (command.scheduled_for, command.deadline) == (T0, T0 + 30 * MICROS)
        assert command.owner == r.engine.owner and command.lease_token == 1

        # malformed messages on both topics are skipped; what follows still counts
        await worker.raw(EVENTS_TOPIC, b"{not json")
        await worker.raw(EVENTS_TOPIC, b'{"type": "run.completed"}')
        await worker.raw(WORKERS_TOPIC, b"[]")
        started = {"state": "running", "pid": 42, "log_path": "/wl/a.log", "host": "host-x"}
        await worker.event(RUN_TRANSITION, command.command_id, started)
        running = await r.state("a", "running")
        assert running.worker == worker.name
        done = {"exit_code": 0, "tail": "hi\n"}
        first = await worker.event(RUN_COMPLETED, command.command_id, done)
        await worker.event(RUN_COMPLETED, command.command_id, done, event_id=first)  # again
        settled = await r.state("a", "succeeded")
        assert (settled.exit_code, settled.worker) == (0, worker.name)
        assert settled.to_json()["worker"] == worker.name
        out = await r.store.remote_output(settled.id)
        assert (out.tail, out.worker, out.log_path) == ("hi\n", worker.name, "/wl/a.log")
        count = await r.store._one(
            "SELECT count(*) FROM events WHERE command_id = ?", (command.command_id,)
        )
        assert count[0] == 2  # the transition and one completion: the copy was dropped
        assert r.engine.status().warning is None


async def test_silent_worker_is_lost_and_its_run_fails(tmp_db, kafka_bootstrap, worker):
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        occ, info = await r.heard_running(worker, retries=1, retry_on="interrupted")
        assert (info.state, info.host, info.slots, info.log_dir) == ("alive", "host-x", 2, "/wl")
        await r.tick(10)  # silent for 10 s: not yet
        assert (await r.store.get_occurrence(occ.id)).state == "running"
        await r.tick(2)
        lost = await r.store.get_occurrence(occ.id)
        await r.engine.reconcile()
        lost = await r.store.get_occurrence(occ.id)
        assert (lost.state, lost.error_code) == ("failed", "WORKER_LOST")
        assert lost.detail == f"worker {worker.name} silent for 12s"
        assert {w.id: w.state for w in await r.store.list_workers()}[worker.name] == "lost"
        # retried as any interrupted run; the worker speaks again: alive
        assert (await r.store.history("a"))[0].state == "queued"
        await worker.heartbeat()

        async def alive():
            return {w.id: w.state for w in await r.store.list_workers()}[worker.name] == "alive"

        await wait_for(alive, what="the worker alive again")
        assert (await r.store.get_occurrence(occ.id)).state == "failed"


async def test_after_a_sleep_the_engine_listens_before_calling_a_worker_lost(
    tmp_db, kafka_bootstrap, worker
):
    """The machine slept a minute (a laptop lid, a paused VM): its workers' silence
    meanwhile is the engine's deafness. No worker is lost on waking; one that stays silent
    for worker_timeout after it is; a retry never starts a run still on its worker."""
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        occ, _ = await r.heard_running(worker, retries=1, retry_on="interrupted")
        await r.tick(1)
        await r.tick(60)  # asleep: no tick, no heartbeat read, for a minute
        await r.engine.reconcile()
        assert (await r.store.get_occurrence(occ.id)).state == "running"
        assert {w.id: w.state for w in await r.store.list_workers()}[worker.name] == "alive"
        await r.tick(9)
        assert (await r.store.get_occurrence(occ.id)).state == "running"
        await r.tick(2)  # heard nothing for worker_timeout since waking: lost now
        await r.engine.reconcile()
        lost = await r.store.get_occurrence(occ.id)
        assert (lost.state, lost.error_code) == ("failed", "WORKER_LOST")


async def test_after_a_sleep_a_sent_command_is_not_failed_as_never_started_at_once(
    tmp_db, kafka_bootstrap, worker
):
    """Asleep past a sent command's deadline: a worker may have started it meanwhile and its
    report be on the way. It fails DISPATCH_TIMEOUT only after worker_timeout awake."""
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        await r.add("b")
        await r.tick()
        occ = await r.occ("b")
        await worker.read(RUNS_TOPIC, {occ.command_id})  # the broker took it
        await r.tick(1)
        await r.tick(60)  # asleep, past its 30 s deadline
        await r.tick(9)
        assert (await r.store.get_occurrence(occ.id)).state == "accepted"
        await r.tick(2)
        await r.engine.reconcile()
        failed = await r.store.get_occurrence(occ.id)  # (b's next slot is due by now too)
        assert (failed.state, failed.error_code) == ("failed", "DISPATCH_TIMEOUT")


async def test_a_run_of_a_worker_never_heard_from_is_lost(tmp_db, kafka_bootstrap, worker):
    """A transition names a worker whose heartbeat never arrived (it died before its
    first one reached the engine): the run fails WORKER_LOST after worker_timeout."""
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        occ = await r.running_on(worker)
        assert worker.name not in {w.id for w in await r.store.list_workers()}
        await r.tick(10)  # not yet
        await r.engine.reconcile()
        assert (await r.store.get_occurrence(occ.id)).state == "running"
        await r.tick(2)
        lost = await r.state("a", "failed")
        assert lost.error_code == "WORKER_LOST"
        assert lost.detail.startswith(f"worker {worker.name} never heard from (")


async def test_a_run_a_drained_worker_never_reported_is_lost(tmp_db, kafka_bootstrap, worker):
    """The worker said it drained and stopped, but this run's end never came: once the
    worker has been gone for worker_timeout the run fails WORKER_LOST, not running forever."""
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        occ = await r.running_on(worker)
        await worker.heartbeat(state="drained")

        async def drained():
            states = {w.id: w.state for w in await r.store.list_workers()}
            return states.get(worker.name) == "drained"

        await wait_for(drained, what="the drained heartbeat")
        await r.tick(10)
        await r.engine.reconcile()
        assert (await r.store.get_occurrence(occ.id)).state == "running"
        await r.tick(2)
        lost = await r.state("a", "failed")
        assert lost.error_code == "WORKER_LOST"
        assert lost.detail == f"worker {worker.name} stopped 12s ago without reporting this run"


async def test_no_worker_by_the_deadline_fails_dispatch_timeout(tmp_db, kafka_bootstrap, worker):
    async with kafka_rig(tmp_db, kafka_bootstrap, start_timeout=5) as r:
        await r.add("a")
        await r.tick()
        occ = await r.occ("a")
        await worker.read(RUNS_TOPIC, {occ.command_id})
        await r.tick(6)  # past the deadline, within its 2 s grace
        assert (await r.store.get_occurrence(occ.id)).state == "accepted"
        await r.tick(2)
        failed = await r.state("a", "failed")
        assert failed.error_code == "DISPATCH_TIMEOUT"
        assert failed.detail == "no worker started it within 5s"
        [(_, cancel)] = await worker.read(CONTROL_TOPIC, {occ.command_id})
        assert (cancel.type, cancel.worker) == ("cancel", None)


async def test_after_a_broker_restart_a_sent_command_waits_for_its_worker_report(
    tmp_db, kafka_bootstrap, worker
):
    """The broker came back empty after the commands went out: a worker may have started
    one and be sending its transition again. DISPATCH_TIMEOUT waits worker_timeout after
    the restart, so a run that ran is never recorded as not started."""
    async with kafka_rig(tmp_db, kafka_bootstrap, start_timeout=5) as r:
        await r.add("a")
        await r.add("b")
        await r.tick()
        a, b = await r.occ("a"), await r.occ("b")
        await worker.read(RUNS_TOPIC, {a.command_id, b.command_id}, count=2)
        r.clock.advance(4)
        r.dispatcher.events.restarted()  # as the events feed says when the broker is back empty
        await r.tick(4)  # past both deadlines and their grace
        await r.engine.reconcile()
        assert {(await r.store.get_occurrence(o.id)).state for o in (a, b)} == {"accepted"}
        await r.start_on(worker, a)  # a's transition, sent again: it runs
        await worker.heartbeat(running=[a.command_id])

        async def heard():
            return worker.name in {w.id for w in await r.store.list_workers()}

        await wait_for(heard, what="the worker's heartbeat")
        await r.tick(6)  # worker_timeout since the restart: b was not started
        failed = await r.state("b", "failed")
        assert (failed.error_code, failed.detail) == (
            "DISPATCH_TIMEOUT",
            "no worker started it within 5s",
        )
        assert (await r.store.get_occurrence(a.id)).state == "running"


async def test_broker_down_runs_wait_then_fail_with_the_reason(tmp_db):
    async with kafka_rig(tmp_db, "127.0.0.1:9", start_timeout=5) as r:
        await r.add("a")
        await r.tick()
        occ = await r.occ("a")
        assert occ.state == "accepted"
        warning = r.engine.status().warning
        assert warning and "kafka 127.0.0.1:9: broker down since" in warning
        await r.tick(8)
        failed = await r.state("a", "failed")
        assert failed.error_code == "DISPATCH_TIMEOUT"
        assert failed.detail.startswith("broker down: kafka 127.0.0.1:9:")


async def test_a_command_the_broker_never_took_says_so_after_the_broker_is_back(tmp_db):
    """The broker went down before it took the command and came back after its deadline:
    DISPATCH_TIMEOUT names what kept it (never sent), not 'no worker started it'."""
    with private_tansu() as broker:
        async with kafka_rig(tmp_db, broker.bootstrap, start_timeout=5) as r:
            await r.add("a")
            await asyncio.to_thread(broker.kill)
            await r.tick()
            occ = await r.occ("a")
            assert occ.state == "accepted"
            await wait_for(lambda: r.dispatcher.link.problem, 20, "the broker seen down")
            r.clock.advance(6)  # past the deadline: the outbox drops it unsent
            await wait_for(lambda: occ.command_id in r.dispatcher.outbox.unsent, 10, "dropped")
            await asyncio.to_thread(broker.restart)
            await wait_for(lambda: r.dispatcher.link.problem is None, 30, "the broker back")
            await r.tick(2)
            failed = await r.state("a", "failed")
            assert failed.error_code == "DISPATCH_TIMEOUT"
            assert failed.detail.startswith(f"never sent within 5s: kafka {broker.bootstrap}: ")


async def test_a_command_an_earlier_engine_never_sent_is_not_blamed_on_workers(
    tmp_db, kafka_bootstrap
):
    """The broker was down while the first engine ran: its outbox died with it. The next
    engine, broker up, cannot know whether it was sent and says so at the deadline."""
    async with kafka_rig(tmp_db, "127.0.0.1:9", start_timeout=5, owner="one") as r:
        await r.add("a")
        await r.tick()
        assert (await r.occ("a")).state == "accepted"
    async with kafka_rig(tmp_db, kafka_bootstrap, start_timeout=5, owner="two") as r:
        await r.tick(8)
        failed = await r.state("a", "failed")
        assert failed.error_code == "DISPATCH_TIMEOUT"
        assert failed.detail == (
            "no worker started it within 5s; an earlier engine handed it out and may not have"
            " sent it"
        )


async def test_cancel_reaches_the_worker_or_ends_an_unstarted_run(tmp_db, kafka_bootstrap, worker):
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        await r.add("a")
        await r.add("b")
        await r.tick()
        a, b = await r.occ("a"), await r.occ("b")
        await r.start_on(worker, a)
        assert await r.engine.cancel(a.id)
        [(key, control)] = await worker.read(CONTROL_TOPIC, {a.command_id})
        assert (key, control.type, control.worker) == (worker.name.encode(), "cancel", worker.name)
        assert control.reason == "cancelled_by_user"
        assert (await r.store.get_occurrence(a.id)).state == "running"  # until the worker says
        await worker.event(RUN_CANCELED, a.command_id, {"detail": "cancelled_by_user"})
        await r.state("a", "cancelled")
        # not started by any worker: cancelled now, and no worker may start it
        assert await r.engine.cancel(b.id)
        assert (await r.store.get_occurrence(b.id)).state == "cancelled"
        [(_, control)] = await worker.read(CONTROL_TOPIC, {b.command_id})
        assert (control.type, control.worker) == ("cancel", None)


async def test_new_engine_does_not_fail_runs_that_live_on_workers(tmp_db, kafka_bootstrap, worker):
    async with kafka_rig(tmp_db, kafka_bootstrap, owner="one") as r:
        await r.add("a")
        await r.add("b")
        await r.tick()
        a = await r.occ("a")
        await r.start_on(worker, a)
    # the engine stopped: the remote runs were not cancelled; a new engine follows them
    async with kafka_rig(tmp_db, kafka_bootstrap, owner="two") as r:
        assert (await r.occ("a")).state == "running"
        assert (await r.occ("b")).state == "accepted"
        await worker.event(RUN_COMPLETED, a.command_id, {"exit_code": 0, "tail": ""})
        await r.state("a", "succeeded")
        for _ in range(31):  # b's deadline, stored by the first engine, still holds
            await r.tick(1)  # (a second at a time: one jump would read as the engine asleep)
        assert (await r.occ("b")).state == "accepted"
        await r.tick(2)
        b = await r.state("b", "failed")
        assert b.error_code == "DISPATCH_TIMEOUT"
        assert b.detail.startswith("no worker started it within 30s; an earlier engine")


async def test_a_run_its_worker_forgot_is_asked_for_again(tmp_db, kafka_bootstrap, worker):
    """The worker's heartbeats stop naming a running command and no outcome came (lost
    with a broker restart): after two heartbeats the engine asks that worker to resend."""
    async with kafka_rig(tmp_db, kafka_bootstrap) as r:
        occ = await r.running_on(worker)
        await worker.heartbeat(running=[occ.command_id], at=T0 + MICROS)
        await worker.heartbeat(running=[], at=T0 + 3 * MICROS)
        await worker.heartbeat(running=[], at=T0 + 5 * MICROS)
        [(key, control)] = await worker.read(CONTROL_TOPIC, {occ.command_id})
        assert (key, control.type, control.worker) == (worker.name.encode(), "resend", worker.name)
