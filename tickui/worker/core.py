"""`tickui worker`: runs the commands the engine publishes on Kafka, with the local
dispatcher's process runner, and reports each run on the events topic.

At most once: a command's offset is committed only after its `control.run_transition` is
acknowledged, and the command itself waits behind its start gate until then. A command
already started (by this worker id, per its journal, or by any worker, per the events
topic read up to its end) is never started again. Events the broker cannot take wait in
an outbox, retried with backoff; topics are created again after a failure (a restarted
Tansu is empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import ConsumerRebalanceListener

from tickui import __version__
from tickui.common.errors import BadInput, Unavailable
from tickui.common.kafka import KafkaAccess, describe
from tickui.common.procs import stop_on_signals
from tickui.common.redact import redact
from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import messages as m
from tickui.dispatch.allow import AllowList
from tickui.dispatch.bounded import Bounded
from tickui.dispatch.output import read_tail, visible
from tickui.dispatch.process import ProcessRun, ProcessRunner, open_gate
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import SIG_HEADER, Keyring
from tickui.model.occurrence import RUN_CANCELED, RUN_FAILED, RUN_INTERRUPTED, RUN_TRANSITION, bound
from tickui.worker.control import WorkerControl
from tickui.worker.events_view import EventsView
from tickui.worker.publisher import Publisher
from tickui.worker.state import Journal, file_name

log = logging.getLogger("tickui.worker")


def now_micros() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class WorkerOptions:
    bootstrap: str | KafkaAccess
    keyring: Keyring
    group: str = m.DEFAULT_GROUP
    slots: int = 4
    worker_id: str = ""
    duration: float | None = None
    stop_grace: float = 10.0
    log_dir: Path = Path(".")
    session_timeout_ms: int = 4000
    allow: AllowList = field(default_factory=AllowList)


class _Placing(ConsumerRebalanceListener):  # type: ignore[misc]
    """Places newly assigned partitions before anything is fetched from them."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Let a start under way publish its transition and commit before the partition
        moves (its next owner then sees the transition); bounded, a rebalance never hangs."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.worker.handling.acquire(), 3)
            self.worker.handling.release()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.worker._place(assigned)


class Worker(WorkerControl):
    """One worker process: four Kafka clients, its runs, its outbox and its heartbeat."""

    def __init__(self, opts: WorkerOptions) -> None:
        self.opts = opts
        self.access = KafkaAccess.of(opts.bootstrap)
        self.keyring = opts.keyring
        self.refusals = Refusals(log)
        self.id = opts.worker_id
        self.host = socket.gethostname()
        self.runner = ProcessRunner(kill_grace=3.0)
        self.journal = Journal(opts.log_dir / "journal" / f"{file_name(self.id)}.started")
        self.running: dict[str, ProcessRun] = {}
        self.cancelled: Bounded[str, str] = Bounded(10_000)
        # command id -> "partition:offset" of the record it first came in: the same id in
        # another record is a copy (a replay), never run
        self.seen: Bounded[str, str] = Bounded(200_000)
        self.outcomes: Bounded[str, m.RunEvent] = Bounded(1000)
        self.transitions: Bounded[str, m.RunEvent] = Bounded(1000)
        self._republished = 0.0
        self._last_beat = -1  # offset of the last heartbeat the broker took
        self._beating = asyncio.Lock()
        self.handling = asyncio.Lock()  # held while one command is answered or started
        self.state = "alive"
        self.stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._keys = itertools.count(1)
        self._beats = itertools.count(1)  # each heartbeat's count (its order, with the start)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.started_at = time.time()
        self.pub = Publisher(self.access, self.keyring, self._event_sent, self.broker_restarted)
        self.runs: Any = None
        self.events: Any = None
        self.probe: Any = None
        self.view: EventsView | None = None
        self.control: Any = None
        self.ready = False
        self._read_problem: str | None = None

    # ---- clients -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create the topics, catch up; a broker that does not answer is bad input."""
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.errors import KafkaConnectionError

        where = f"kafka {self.access.bootstrap}"
        try:
            await self.pub.ensure_topics()
        except Exception as exc:
            refused = self.access.refusal(exc)
            if refused is not None:
                raise Unavailable(refused) from None
            if isinstance(exc, TimeoutError):
                reason = "no broker answered within 5s"
            elif isinstance(exc, KafkaConnectionError):
                reason = "no broker answers there"
            else:
                reason = describe(exc)
            raise BadInput("--kafka", f"{where}: {reason}") from None
        common = {**self.access.options(), "request_timeout_ms": 3000}
        await self.pub.start()
        self.events = AIOKafkaConsumer(
            **common, enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=10
        )
        self.control = AIOKafkaConsumer(
            **common, enable_auto_commit=False, auto_offset_reset="latest", fetch_max_wait_ms=100
        )
        self.probe = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await self.events.start()
        await self.control.start()
        await self.probe.start()
        self.view = EventsView(self.events, self.probe, self.broker_restarted, self.keyring)
        await self.view.start()
        await self.control.topics()
        parts = self.control.partitions_for_topic(m.CONTROL_TOPIC) or range(m.DEFAULT_PARTITIONS)
        tps = [TopicPartition(m.CONTROL_TOPIC, p) for p in sorted(parts)]
        self.control.assign(tps)
        await self.control.seek_to_end(*tps)
        for tp in tps:
            await self.control.position(tp)  # resolved now: later controls are seen
        heartbeat_ms = max(100, self.opts.session_timeout_ms // 6)
        self.runs = AIOKafkaConsumer(
            **self.access.options(),
            group_id=self.opts.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # out of range: the broker restarted, topics anew
            fetch_max_wait_ms=10,
            session_timeout_ms=self.opts.session_timeout_ms,
            heartbeat_interval_ms=heartbeat_ms,
            request_timeout_ms=max(3000, self.opts.session_timeout_ms + 1000),
            max_poll_records=self.opts.slots,
        )
        await self.runs.start()
        self.runs.subscribe([m.RUNS_TOPIC], listener=_Placing(self))

    async def emit(self, event: m.RunEvent) -> None:
        if event.type != RUN_TRANSITION:
            self.outcomes.put(event.command_id, event)  # for a resend
        await self.pub.emit(event)

    def _event_sent(self, partition: int, offset: int) -> None:
        if self.view is not None:
            self.view.sent(partition, offset)

    def _event(self, kind: str, command_id: str, run_id: str | None, **payload: Any) -> m.RunEvent:
        return m.RunEvent(
            m.new_event_id(), kind, command_id, run_id, self.id, now_micros(), payload
        )

    async def heartbeat(self) -> bool:
        beat = m.Heartbeat(
            worker=self.id,
            host=self.host,
            slots=self.opts.slots,
            running=tuple(self.running),
            version=__version__,
            at=now_micros(),
            state=self.state,
            group=self.opts.group,
            log_dir=str(self.opts.log_dir),
            refused=self.refusals.snapshot(),
            insecure=self.keyring.insecure,
            boot=int(self.started_at * MICROS),
            seq=next(self._beats),
        )
        try:
            async with self._beating:  # one at a time: their offsets are compared
                meta = await self.pub.send(m.WORKERS_TOPIC, self.id, beat.encode())
        except Exception as exc:
            log.debug("heartbeat not sent: %s", describe(exc))
            return False
        # Offsets only grow in a topic that lives: a heartbeat (always the same partition,
        # its key is the worker id) below the last one means the broker came back empty.
        if meta.offset < self._last_beat:
            self.broker_restarted()
        self._last_beat = meta.offset
        return True

    async def _heartbeats(self) -> None:
        """Every 2 s; every 0.5 s while the broker is away, so a broker back empty is seen
        soon (its lost events are sent again before the engine gives up on them)."""
        while True:
            sent = await self.heartbeat()
            await asyncio.sleep(m.HEARTBEAT_EVERY_S if sent else 0.5)

    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- commands ----------------------------------------------------------------------------

    async def _commit(self, tp: Any, offset: int) -> str | None:
        """Commit; the reason when that failed (logged), else None."""
        try:
            await asyncio.wait_for(self.runs.commit({tp: offset}), 3)
        except Exception as exc:
            reason = describe(exc)
            log.warning("cannot commit %s[%d]@%d: %s", tp.topic, tp.partition, offset, reason)
            return reason
        return None

    async def _place(self, assigned: Any) -> None:
        """A partition the group has no offset for (a new group; a broker restarted empty)
        starts at the first command published since this worker started (less a margin
        for clocks), and that offset is committed at once: a later rebalance never skips
        past commands nobody took, and a new group never reads old history."""
        fresh = []
        for tp in assigned:
            with contextlib.suppress(Exception):
                if await self.runs.committed(tp) is None:
                    fresh.append(tp)
        if fresh:
            since = int(self.started_at * 1000) - 5000
            try:
                found = await self.runs.offsets_for_times(dict.fromkeys(fresh, since))
                ends = await self.runs.end_offsets(fresh)
                offsets = {}
                for tp in fresh:
                    hit = found.get(tp)  # Tansu: timestamp -1 when nothing is that recent
                    offsets[tp] = hit.offset if hit is not None and hit.timestamp >= 0 else ends[tp]
                    self.runs.seek(tp, offsets[tp])
                await asyncio.wait_for(self.runs.commit(offsets), 3)
            except Exception as exc:
                log.warning("cannot place the partitions given to this worker: %s", describe(exc))
        if assigned and not self.ready:
            self.ready = True
            log.info(
                "worker %s ready: group %s, %d slots, logs in %s",
                self.id, self.opts.group, self.opts.slots, self.opts.log_dir,
            )  # fmt: skip
            self._spawn_task(self.heartbeat())

    async def _consume(self) -> None:
        while not self.stopping.is_set():
            free = self.opts.slots - len(self.running)
            if free <= 0:
                parts = self.runs.assignment()
                self.runs.pause(*parts)
                self._slot_freed.clear()
                stop = asyncio.ensure_future(self.stopping.wait())
                freed = asyncio.ensure_future(self._slot_freed.wait())
                await asyncio.wait({stop, freed}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                freed.cancel()
                self.runs.resume(*self.runs.assignment())
                continue
            try:
                batch = await self.runs.getmany(timeout_ms=200, max_records=free)
            except Exception as exc:
                problem = describe(exc)
                if problem != self._read_problem:  # once per kind of trouble, not 2 a second
                    log.warning("reading run commands failed: %s", problem)
                self._read_problem = problem
                await asyncio.sleep(0.5)
                continue
            self._read_problem = None
            checked = False
            for tp, records in batch.items():
                refused_to: int | None = None  # commit past refused records, once
                for record in records:
                    if self.stopping.is_set():
                        return  # not committed: redelivered to another worker
                    if self._refused(tp, record):  # no read of the events topic, no commit
                        refused_to = record.offset + 1
                        continue
                    refused_to = None  # this record's own commit covers them
                    if not checked:  # once a batch: read events to their end as of now
                        if not await self.view.read_to_end():
                            self.runs.seek(tp, record.offset)
                            await asyncio.sleep(0.5)
                            break
                        checked = True
                    if tp not in self.runs.assignment():
                        break  # revoked meanwhile: its new owner gets these
                    async with self.handling:  # a revoke waits for this start to commit
                        handled = await self._handle(tp, record)
                    if not handled:
                        self.runs.seek(tp, record.offset)  # again, once the broker is back
                        await asyncio.sleep(0.5)
                        break
                else:
                    if refused_to is not None and tp in self.runs.assignment():
                        await self._commit(tp, refused_to)

    def _refused(self, tp: Any, record: Any) -> bool:
        """A record that is no command of this worker's engine: its signature does not
        check (counted, logged), or, without a key, the engine signed it (this worker
        cannot tell a real one from a copy)."""
        where = f"{tp.topic}[{tp.partition}]@{record.offset}"
        if self.keyring.insecure:
            if any(name == SIG_HEADER for name, _ in record.headers or ()):
                self.refusals.refuse("unverifiable_command", f"{where}: this worker has no key")
                return True
            return False
        forged = self.keyring.check(
            tp.topic, record.key, record.value, record.headers, partition=tp.partition
        )
        if forged is not None:
            self.refusals.refuse("forged_command", f"{forged}, {where}")
            return True
        return False

    async def _handle(self, tp: Any, record: Any) -> bool:
        """Answer or start one command (its signature checked already, `_refused`); False:
        nothing done, read it again later. Only a command the engine signed, seen in no
        other record, before its deadline, of a program this worker allows, is started."""
        where = f"{tp.topic}[{tp.partition}]@{record.offset}"
        try:
            command = m.RunCommand.decode(record.value)
        except m.BadMessage as exc:
            log.warning("skipped %s: %s", where, exc)
            await self._commit(tp, record.offset + 1)
            return True
        cid = command.command_id
        here = f"{tp.partition}:{record.offset}"
        first = self.seen.get(cid) or self.view.origin.get(cid)
        if first is not None and first != here:
            self.refusals.refuse("replayed_command", f"{cid} again at {where} (first at {first})")
            await self._commit(tp, record.offset + 1)
            return True
        self.seen.put(cid, here)
        answer: m.RunEvent | None = None
        started_by = self.view.started_by.get(cid)
        if cid in self.running or cid in self.view.finished or cid in self.outcomes:
            pass  # running here now, or over: nothing to say
        elif cid in self.journal or started_by == self.id:
            answer = self._event(RUN_INTERRUPTED, cid, None, detail="worker restarted")
        elif started_by is not None:
            pass  # another worker has it
        elif cid in self.cancelled:
            answer = self._event(RUN_CANCELED, cid, None, detail=self.cancelled.pop(cid))
        elif command.deadline <= now_micros():
            late = (now_micros() - command.deadline) / MICROS
            detail = f"deadline {iso(command.deadline)} passed {late:.1f}s before a worker got it"
            self.refusals.refuse("expired_command", f"{cid} at {where}: {detail}")
            answer = self._event(RUN_FAILED, cid, None, exit_code=None, error_code=m.DEADLINE,
                                 detail=detail)  # fmt: skip
        else:
            return await self._start(tp, record.offset, command)
        if answer is not None:
            await self.emit(answer)
        await self._commit(tp, record.offset + 1)
        return True

    def _env(self, command: m.RunCommand) -> tuple[dict[str, str], dict[str, str]]:
        marker = {
            "TICKUI_OCCURRENCE_ID": str(command.occurrence_id),
            "TICKUI_SCHEDULED_FOR": iso(command.scheduled_for) or "",
            "TICKUI_ENGINE": command.owner,
            "TICKUI_COMMAND_ID": command.command_id,
        }
        env = dict(os.environ)
        env.update(command.env)
        env.update(TICKUI_TASK=command.task, TICKUI_KIND=command.kind, TICKUI_WORKER=self.id)
        env.update(marker)
        return env, marker

    async def _start(self, tp: Any, offset: int, command: m.RunCommand) -> bool:
        cid = command.command_id
        env, marker = self._env(command)
        log_path = self.opts.log_dir / f"{file_name(cid)}.log"
        argv, why = self.opts.allow.resolve(command.argv, command.env, command.cwd)
        if argv is None:
            program = visible(command.argv[0])[:200]
            self.refusals.refuse("disallowed_command", f"{cid}: {program}: {why}")
            detail = str(bound(redact(f"{program}: {why}")))
            await self.emit(self._event(RUN_FAILED, cid, None, exit_code=None,
                                        error_code="DISPATCH_FAILED", detail=detail))  # fmt: skip
            await self._commit(tp, offset + 1)
            return True
        try:
            run = await self.runner.spawn(
                next(self._keys), argv, cwd=command.cwd, env=env, log_path=log_path,
                gated=True, tag=command, marker=marker,
            )  # fmt: skip
        except Exception as exc:
            argv0 = visible(command.argv[0])[:200]
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else describe(exc)
            detail = str(bound(redact(f"{argv0}: {reason}")))
            await self.emit(self._event(RUN_FAILED, cid, None, exit_code=None,
                                        error_code="DISPATCH_FAILED", detail=detail))  # fmt: skip
            await self._commit(tp, offset + 1)
            return True
        self.running[cid] = run
        transition = self._event(
            RUN_TRANSITION, cid, run.run_id, state="running", worker=self.id, host=self.host,
            pid=run.process.pid, log_path=str(log_path), record=f"{tp.partition}:{offset}",
        )  # fmt: skip
        try:
            if self.pub.outbox:
                raise RuntimeError("the broker has not taken earlier events yet")
            await self.pub.send(m.EVENTS_TOPIC, cid, transition.encode())
        except Exception as exc:
            log.warning("command %s not started: %s", redact(cid), describe(exc))
            self.pub.outage_began(exc)
            with contextlib.suppress(Exception):
                await self.runner.abort(run)
            self.running.pop(cid, None)
            return False
        self.journal.add(cid)
        self.view.started_by.put(cid, self.id)
        self.transitions.put(cid, transition)
        failed = await self._commit(tp, offset + 1)
        if failed is not None:
            # Another worker may get it now (a rebalance). Its check of the events topic
            # should find the transition, but at most once must not hang on that: not run.
            with contextlib.suppress(Exception):
                await self.runner.abort(run)
            self.running.pop(cid, None)
            self._slot_freed.set()
            why = (
                "the group rebalanced before its offset was committed"
                if "CommitFailedError" in failed
                else f"its offset could not be committed ({failed})"
            )
            detail = str(bound(f"not started: {why}"))
            await self.emit(self._event(RUN_INTERRUPTED, cid, run.run_id, detail=detail))
            return True
        with contextlib.suppress(OSError):  # cancelled meanwhile: the watcher reports it
            open_gate(run)
        self._spawn_task(self._watch(run, command))
        return True

    async def _watch(self, run: ProcessRun, command: m.RunCommand) -> None:
        cid = command.command_id
        timeout = int(command.timeout_s * MICROS) if command.timeout_s else None
        try:
            timed_out = await self.runner.wait(run, timeout)
            await self.runner.finish_output(run)
            kind, payload = self.runner.outcome(run, timeout, timed_out)
        except Exception as exc:
            log.exception("watching command %s failed", redact(cid))
            with contextlib.suppress(Exception):
                await self.runner.terminate(run)
            kind = RUN_FAILED
            payload = {"exit_code": run.process.returncode, "error_code": "DISPATCH_FAILED",
                       "detail": bound(f"watching the run failed: {describe(exc)}")}  # fmt: skip
        finally:
            await self.runner.finish_output(run)
            await self.runner.end_rest(run)
        payload.setdefault("error_code", None)
        payload.setdefault("detail", None)
        tail = read_tail(run.log_path, m.TAIL_MAX_BYTES)
        payload["tail"] = redact(tail)[-m.TAIL_MAX_BYTES :]
        payload["log_path"] = str(run.log_path)
        try:
            await self.emit(self._event(kind, cid, run.run_id, **payload))
        finally:
            self.running.pop(cid, None)
            run.done.set()
            self._slot_freed.set()

    # ---- the whole life ------------------------------------------------------------------------

    async def run(self) -> int:
        await self.start()
        loop = asyncio.get_running_loop()
        with stop_on_signals(loop, self.stopping.set, (signal.SIGTERM, signal.SIGINT)):
            background = [
                asyncio.create_task(self.view.read()),
                asyncio.create_task(self._read_control()),
                asyncio.create_task(self._heartbeats()),
            ]
            consume = asyncio.create_task(self._consume())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.opts.duration)
            self.stopping.set()
            await self.drain(consume, background)
        return 0

    async def drain(self, consume: asyncio.Task[None], background: list[asyncio.Task[Any]]) -> None:
        """No new commands; running ones get the stop grace, then are cancelled; outcomes
        and a last `drained` heartbeat go out; then the clients close."""
        self.state = "draining"
        log.info("worker %s draining: %d running", self.id, len(self.running))
        try:
            await asyncio.wait_for(consume, 5)
        except (TimeoutError, Exception):
            consume.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.runs.stop(), 5)  # leaves the group: others take over
        self._spawn_task(self.heartbeat())
        runs = list(self.running.values())
        if runs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(r.done.wait() for r in runs)), self.opts.stop_grace
                )
        left = [r for r in runs if not r.done.is_set()]
        await asyncio.gather(*(self.runner.cancel(r, "worker stopped") for r in left))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in left)), 10)
        await self.pub.drain(5)
        self.state = "drained"
        await self.heartbeat()
        for task in background + list(self._tasks):
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self.pub.stop()
        for client in (self.events, self.control, self.probe):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.stop(), 3)
        await self.runner.shutdown()
        self.journal.close()
        log.info("worker %s drained", self.id)
