"""The Kafka dispatcher: runs go to `tickui worker` processes as RunCommands, and come
back as run events the engine appends to its event log (reconcile settles them as any
run's). What no worker reports on is settled here, on the engine's clock: a command no
worker started by its deadline (DISPATCH_TIMEOUT), a run whose worker went silent
(WORKER_LOST). A broker that is down delays commands (an outbox), never the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tickui.common import procs
from tickui.common.kafka import KafkaAccess
from tickui.common.timeutil import MICROS
from tickui.dispatch.base import Dispatcher, DispatchFailure, Fence, Job, NotStarted, Receipt
from tickui.dispatch.kafka_feeds import EventFeed, HeartbeatFeed
from tickui.dispatch.kafka_link import KafkaLink, LinkDown
from tickui.dispatch.messages import (
    CONTROL_TOPIC,
    DEFAULT_PARTITIONS,
    DISPATCH_TIMEOUT,
    RUNS_TOPIC,
    WORKER_LOST,
    WORKER_TIMEOUT_S,
    Control,
    Heartbeat,
    RunCommand,
)
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import Keyring
from tickui.model.occurrence import RUN_CANCELED, RUN_FAILED
from tickui.model.records import Occurrence, WorkerInfo
from tickui.store import Beat, NewEvent, Store

log = logging.getLogger("tickui.dispatch.kafka")

GRACE = 2 * MICROS  # after a deadline, before DISPATCH_TIMEOUT (a transition in flight)
RESEND_AFTER = 2  # heartbeats of its worker not naming a running command: ask again
FLUSH_EVERY_S = 0.5


@dataclass
class _Pending:
    """A message the broker has not taken yet; dropped once `until` (engine clock) passed."""

    topic: str
    key: bytes
    value: bytes
    until: int | None
    command_id: str


class KafkaDispatcher(Dispatcher):
    """Dispatcher over Kafka (see the module doc). `tend(now)` is called on every engine
    tick while it holds the lease."""

    remote = True

    def __init__(
        self,
        store: Store,
        clock,
        access: str | KafkaAccess,
        *,
        keyring: Keyring,
        partitions: int = DEFAULT_PARTITIONS,
        start_timeout: float = 30.0,
        worker_timeout: float = WORKER_TIMEOUT_S,
        group: str | None = None,
        request_timeout: float = 2.0,
    ) -> None:
        self.store = store
        self.clock = clock
        self.access = KafkaAccess.of(access)
        self.bootstrap = self.access.bootstrap
        self.keyring = keyring
        self.refusals = Refusals(log)
        self.start_timeout = int(start_timeout * MICROS)
        self.worker_timeout = int(worker_timeout * MICROS)
        self.link = KafkaLink(self.access, partitions, request_timeout, keyring)
        timeout_ms = self.link.request_timeout_ms
        signed = {"keyring": keyring, "refusals": self.refusals}
        self.events = EventFeed(
            self.access, self._ours, self._record_events, timeout_ms,
            second_start=self._stop_second_start, **signed,
        )  # fmt: skip
        self.heartbeats = HeartbeatFeed(
            self.access, self._record_beats, group, timeout_ms, **signed
        )
        self._refusals_stored: dict[str, int] | None = None  # as last written to the store
        # (who, kind, count so far, the last detail): the engine's refusals and those its
        # workers report in their heartbeats, as they happen (the hooks listen)
        self.refusal_listeners: list[Callable[[str, str, int, str], None]] = []
        self.refusals.listeners.append(
            lambda kind, count, detail: self._tell(f"engine {procs.host()}", kind, count, detail)
        )
        self._worker_refused: dict[str, dict[str, int]] | None = None  # as last heard
        self._beat_at: dict[str, tuple[int, int]] = {}  # worker -> its newest heartbeat's order
        self.events.prepare = self.heartbeats.prepare = self.link.ready
        self.events.restarted = self.heartbeats.restarted = self._restarted
        self.heartbeats.opened = self._hearing
        self._heard_since: int | None = None  # engine clock: heartbeats read since then
        self._outbox: list[_Pending] = []
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._misses: dict[str, int] = {}  # command id -> heartbeats of its worker without it
        self._timed_out: set[str] = set()  # command ids cancelled for DISPATCH_TIMEOUT
        self._mine: set[str] = set()  # run command ids this dispatcher handed out
        self._unsent: set[str] = set()  # of those, dropped at their deadline, never sent
        self._send_error: str | None = None  # why the broker last failed to take a message
        # engine clock: the broker last seen down or restarted empty (events may be lost or
        # late until its workers sent them again)
        self._trouble_at: int | None = None
        self._tended_at: int | None = None  # engine clock: the last tick's `tend`
        self._tend_gap = 0  # between the two ticks before it
        self._started = False

    # ---- what the engine reads ---------------------------------------------------------

    def problems(self) -> list[str]:
        said = super().problems()
        if self.keyring.insecure:
            said.append(
                "dispatch unsigned (INSECURE: anyone who can write to the topics can run"
                " commands on workers)"
            )
        return said

    @property
    def dispatch_problem(self) -> str | None:  # type: ignore[override]
        problem = self.link.problem
        if problem is None and self._outbox:
            problem = f"kafka {self.bootstrap}: {len(self._outbox)} message(s) waiting to be sent"
        return problem

    def active(self) -> int:
        return 0  # runs live on workers: nothing here to wait for at shutdown

    # ---- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Begin reading events and heartbeats and sending what waits; never waits for
        the broker (a broker that is down is retried in the background)."""
        if self._started:
            return
        self._started = True
        self.events.start()
        self.heartbeats.start()
        self._flusher = asyncio.create_task(self._flush_loop(), name="tickui-kafka-outbox")

    async def shutdown(self, grace: float) -> None:
        """Runs go on on their workers (their events are read by the next engine). What
        waits in the outbox gets up to `grace` seconds (bounded) to be sent."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._flush(), max(0.1, min(grace, 5.0)))
        if self._outbox:
            log.warning("%d kafka message(s) not sent at shutdown", len(self._outbox))
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._flusher
            self._flusher = None
        await self.events.stop()
        await self.heartbeats.stop()
        await self.link.close()
        self._started = False

    # ---- dispatch ------------------------------------------------------------------------

    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure | NotStarted]:
        """One RunCommand per job, after the fence says yes for it. Its command id and
        deadline are stored before it is sent, so an engine restart still knows it; a
        broker that does not take it leaves it in the outbox until its deadline."""
        if not self._started:
            await self.start()
        results: list[Receipt | DispatchFailure | NotStarted] = []
        commands: list[tuple[int, RunCommand]] = []
        fenced: NotStarted | None = None
        now = self.clock.now()
        for job in jobs:
            if fenced is None and may_start is not None:
                fenced = await _fence(may_start)
            if fenced is not None:
                results.append(fenced)
                continue
            command = self._command(job, now)
            commands.append((len(results), command))
            results.append(Receipt(command.command_id, None))
        if commands:
            self._mine.update(c.command_id for _, c in commands)
            await self.store.set_deadlines(
                [(c.occurrence_id, c.deadline, c.command_id) for _, c in commands]
            )
            pending = [
                _Pending(RUNS_TOPIC, c.task.encode(), c.encode(), c.deadline, c.command_id)
                for _, c in commands
            ]
            await self._send(pending)
        return results

    def _command(self, job: Job, now: int) -> RunCommand:
        occ, spec = job.occurrence, job.task.spec
        env = {**spec.env, "TICKUI_TASK": occ.task, "TICKUI_KIND": occ.kind}
        return RunCommand(
            command_id=f"cmd-{occ.id}-{uuid.uuid4().hex[:12]}",
            occurrence_id=occ.id,
            task=occ.task,
            argv=tuple(spec.command),
            env=env,
            cwd=spec.cwd or None,
            timeout_s=spec.timeout / MICROS if spec.timeout else None,
            scheduled_for=occ.scheduled_for,
            attempt=occ.attempt,
            deadline=now + self.start_timeout,
            owner=occ.owner or f"tickui-{procs.host()}",
            lease_token=occ.lease_token or 0,
            kind=occ.kind,
        )

    async def _send(self, pending: list[_Pending], wait: bool = False) -> None:
        """Send now; what the broker does not take waits in the outbox. While the broker
        is known to be down, nothing waits on it here (`wait`: the outbox's own retries)."""
        if self.link.down_since is not None and not wait:
            errors: list[str | None] = ["down"] * len(pending)
        else:
            try:
                errors = await self.link.send_all([(p.topic, p.key, p.value) for p in pending])
            except LinkDown:
                errors = ["down"] * len(pending)
        left = [p for p, error in zip(pending, errors, strict=True) if error is not None]
        if left:
            self._trouble_at = self.clock.now()
            said = [e for e in errors if e not in (None, "down")]
            self._send_error = said[0] if said else self.link.error or self._send_error
            self._outbox.extend(left)
            self._wake.set()

    async def _flush(self) -> None:
        """Send what waits, dropping what is past its deadline (tend() fails those)."""
        now = self.clock.now()
        waiting = [p for p in self._outbox if p.until is None or p.until > now]
        self._unsent.update(
            p.command_id
            for p in self._outbox
            if p.topic == RUNS_TOPIC and p.until is not None and p.until <= now
        )
        self._outbox = []
        if waiting:
            try:
                await self._send(waiting, wait=True)
            except asyncio.CancelledError:  # (shutdown's bound) still unsent: keep them
                self._outbox = waiting + self._outbox
                raise

    async def _flush_loop(self) -> None:
        """Retry what waits; while the broker is down with nothing waiting, see whether it
        is back (so the status stops saying it is down)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 1.0)
            self._wake.clear()
            with contextlib.suppress(Exception):
                if self._outbox:
                    await asyncio.sleep(FLUSH_EVERY_S)
                    await self._flush()
                elif self.link.down_since is not None:
                    await self.link.ready()

    # ---- cancel --------------------------------------------------------------------------

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        """Ask the worker running it to stop (it reports run.canceled). One no worker has
        started yet ends cancelled now, and the cancel keeps any worker from starting it."""
        found = await self.store.occurrences_by_id([occurrence_id])
        if not found or not found[0].active or found[0].deadline is None:
            return False
        occ = found[0]
        command_id = occ.command_id or ""
        started = await self.store.started_commands([command_id])
        if occ.worker is None and command_id not in started:
            await self.store.append_events(
                [
                    NewEvent(
                        self.clock.now(),
                        RUN_CANCELED,
                        command_id,
                        None,
                        {"error_code": reason, "detail": f"{reason}: not started by a worker"},
                        event_id=f"{command_id}:cancel",
                    )
                ]
            )
        await self._control("cancel", command_id, occ.worker, reason)
        return True

    async def _control(self, kind: str, command_id: str, worker: str | None, reason: str) -> None:
        message = Control(kind, command_id, worker, reason, self.clock.now())
        key = (worker or command_id).encode()
        until = self.clock.now() + self.start_timeout + self.worker_timeout
        await self._send([_Pending(CONTROL_TOPIC, key, message.encode(), until, command_id)])

    # ---- what workers say -----------------------------------------------------------------

    def _restarted(self) -> None:
        """The broker came back empty: what it had acknowledged is gone until workers send
        it again (they do when they notice)."""
        self.link.forget_topics()
        self._trouble_at = self.clock.now()

    def _hearing(self) -> None:
        self._heard_since = self.clock.now()

    async def _ours(self, command_ids: list[str]) -> dict[str, str | None]:
        found = await self.store.occurrences_by_command(command_ids)
        return {command_id: occ.worker for command_id, occ in found.items()}

    async def _stop_second_start(self, command_id: str, worker: str, starter: str) -> None:
        """A worker started a command another worker had started (a replayed copy read by
        a second worker at the same moment): tell that worker alone to stop it."""
        log.warning(
            "worker %s started %s, which worker %s had started: stopping the second run",
            worker, command_id, starter,
        )  # fmt: skip
        await self._control("cancel", command_id, worker, "started twice: another worker has it")

    async def _record_events(self, events: list[NewEvent]) -> None:
        await self.store.append_events(events)

    def _tell(self, who: str, kind: str, count: int, detail: str) -> None:
        for listener in list(self.refusal_listeners):
            try:
                listener(who, kind, count, detail)
            except Exception:
                log.exception("a refusal listener failed")

    async def _workers_refusals(self, beats: list[Heartbeat]) -> None:
        """Counts a worker's heartbeat says it refused that went up: told to the listeners
        (the first heartbeats after a start are compared with what the store last had)."""
        if self._worker_refused is None:
            self._worker_refused = {w.id: dict(w.refused) for w in await self.store.list_workers()}
        for beat in beats:
            before = self._worker_refused.get(beat.worker, {})
            for kind, count in beat.refused.items():
                if count > before.get(kind, 0):
                    self._tell(f"worker {beat.worker}", kind, count, "told by its heartbeat")
            self._worker_refused[beat.worker] = dict(beat.refused)

    async def _record_beats(self, beats: list[Heartbeat]) -> None:
        """A heartbeat counts only when it is newer than the last one of its worker (its
        signed process start and count): an old one sent again cannot keep a gone worker
        alive, nor bring back a state, a running list or counts it has left behind."""
        fresh = []
        for beat in beats:
            if beat.order > self._beat_at.get(beat.worker, (-1, -1)):
                self._beat_at[beat.worker] = beat.order
                fresh.append(beat)
        beats = fresh
        if not beats:
            return
        now = self.clock.now()
        if any(b.refused for b in beats):
            await self._workers_refusals(beats)
        back = await self.store.record_heartbeats(
            [
                Beat(
                    b.worker,
                    b.host,
                    b.slots,
                    b.running,
                    b.version,
                    b.state,
                    now,
                    b.log_dir,
                    b.group,
                    b.refused,
                    b.insecure,
                )
                for b in beats
            ]
        )
        for worker in back:
            log.warning("worker %s is heard again", worker)
        await self._check_running(beats)

    async def _check_running(self, beats: list[Heartbeat]) -> None:
        """A run its worker no longer lists, with no outcome heard: after RESEND_AFTER
        heartbeats, ask that worker for the outcome again (lost with a broker restart)."""
        beats = [b for b in beats if b.state in ("alive", "draining")]
        if not beats:
            return
        by_worker: dict[str, list] = {}
        for occ in await self.store.remote_active():
            if occ.state == "running" and occ.worker and occ.command_id:
                by_worker.setdefault(occ.worker, []).append(occ)
        for beat in beats:  # in order: one batch may hold several of one worker's
            for occ in by_worker.get(beat.worker, ()):
                command_id = occ.command_id
                if command_id in beat.running or (occ.started_at or 0) >= beat.at:
                    self._misses.pop(command_id, None)
                    continue
                misses = self._misses.get(command_id, 0) + 1
                self._misses[command_id] = misses
                if misses >= RESEND_AFTER:
                    self._misses[command_id] = 0
                    log.warning(
                        "asking worker %s to resend the outcome of %s", beat.worker, command_id
                    )
                    await self._control("resend", command_id, beat.worker, "no outcome heard")

    # ---- on each tick --------------------------------------------------------------------

    async def tend(self, now: int) -> None:
        """Settle what no worker will report: commands past their deadline that no worker
        started, and runs of workers silent for longer than worker_timeout."""
        if self.link.down_since is not None or self.events.error or self.heartbeats.error:
            self._trouble_at = now
        self._after_a_gap(now)
        await self._store_refusals(now)
        silent = []
        can_tell = self._can_tell_lost(now)
        if can_tell:
            silent = await self.store.silent_workers(now - self.worker_timeout)
        if silent:
            await self.store.mark_workers_lost([w.id for w in silent], now)
            for worker in silent:
                log.warning(
                    "worker %s lost: silent for %ds", worker.id, (now - worker.last_seen) // MICROS
                )
        remote = await self.store.remote_active()
        if not remote:
            self._misses.clear()
            self._timed_out.clear()
            self._mine.clear()
            self._unsent.clear()
            return
        workers = {w.id: w for w in await self.store.list_workers()}
        late = [o for o in remote if o.worker is None and o.deadline + GRACE < now]
        started = await self.store.started_commands([o.command_id or "" for o in late])
        events: list[NewEvent] = []
        heard_all = self._heard_all(now)
        for occ in late:
            command_id = occ.command_id or ""
            if command_id in started:
                continue  # its transition is in the log: reconcile moves it
            if not self._never_sent(command_id) and not heard_all:
                continue  # a worker may have started it; its report may be on the way
            events.append(
                self._failed(now, command_id, DISPATCH_TIMEOUT, self._why_late(command_id))
            )
            if command_id not in self._timed_out:  # so a late worker never starts it
                self._timed_out.add(command_id)
                await self._control("cancel", command_id, None, DISPATCH_TIMEOUT)
        for occ in remote:
            detail = self._lost_detail(occ, workers, now, can_tell)
            if detail is not None:
                events.append(self._failed(now, occ.command_id or "", WORKER_LOST, detail))
        if events:
            await self.store.append_events(events)
        active = {o.command_id for o in remote}
        for command_id in [c for c in self._misses if c not in active]:
            del self._misses[command_id]
        self._timed_out &= active
        self._mine &= active
        self._unsent &= active

    async def _store_refusals(self, now: int) -> None:
        """What this engine refused, and whether it signs at all, for `tickui workers` and
        the dashboard: written at the first tick and when a count moved."""
        counts = self.refusals.snapshot()
        if counts == self._refusals_stored:
            return
        owner = f"engine {procs.host()}"
        await self.store.record_dispatch_security(
            owner, self.keyring.insecure, self.keyring.signing_kid, counts, now
        )
        self._refusals_stored = counts

    def _after_a_gap(self, now: int) -> None:
        """No tick for longer than worker_timeout, and far longer than usual: the engine was
        not listening (a machine asleep, a paused VM, a stopped process). Its workers' silence
        meanwhile says nothing, and their reports may still be on the way: for worker_timeout
        it calls no worker lost (a retry would start a run still going on its worker) and
        fails no sent command as never started, as after a broker outage."""
        if self._tended_at is not None:
            gap = now - self._tended_at
            if gap > self.worker_timeout and gap > 3 * self._tend_gap:
                self._trouble_at = now
                if self._heard_since is not None:
                    self._heard_since = now
                log.warning(
                    "no tick for %ds: workers get %ds to be heard before one is called lost",
                    gap // MICROS, self.worker_timeout // MICROS,
                )  # fmt: skip
            self._tend_gap = gap
        self._tended_at = now

    def _lost_detail(
        self, occ: Occurrence, workers: dict[str, WorkerInfo], now: int, can_tell: bool
    ) -> str | None:
        """Why a run on a worker will never be reported, or None while it still may be:
        its worker was declared lost; or, while heartbeats can be heard, its worker was
        never heard from at all (a row older than worker_timeout), or it said it drained
        and stopped more than worker_timeout ago without reporting this run."""
        if occ.state != "running" or not occ.worker:
            return None
        worker = workers.get(occ.worker)
        if worker is not None and worker.state == "lost":
            return f"worker {worker.id} silent for {(now - worker.last_seen) // MICROS}s"
        if not can_tell:
            return None
        if worker is None:
            since = occ.started_at or occ.claimed_at
            if since < now - self.worker_timeout:
                return f"worker {occ.worker} never heard from ({(now - since) // MICROS}s running)"
        elif worker.state == "drained" and worker.last_seen < now - self.worker_timeout:
            silent_for = (now - worker.last_seen) // MICROS
            return f"worker {worker.id} stopped {silent_for}s ago without reporting this run"
        return None

    def _never_sent(self, command_id: str) -> bool:
        waiting = any(p.command_id == command_id and p.topic == RUNS_TOPIC for p in self._outbox)
        return waiting or command_id in self._unsent

    def _heard_all(self, now: int) -> bool:
        """Every run event of a command sent is in by now, unless the broker was down or
        restarted empty within worker_timeout: a worker that started it before its deadline
        may be sending its transition again (the same bound as a silent worker's)."""
        return self._trouble_at is None or self._trouble_at <= now - self.worker_timeout

    def _can_tell_lost(self, now: int) -> bool:
        """Silence means a lost worker only while heartbeats can be heard, and have been
        for worker_timeout: a broker outage silences every worker at once."""
        if self.heartbeats.error is not None or self.link.down_since is not None:
            return False
        return self._heard_since is not None and self._heard_since <= now - self.worker_timeout

    def _why_late(self, command_id: str) -> str:
        """A broker down now; a command the broker never took before its deadline (the
        broker may be back by now: the reason is what kept it, not the state today); one
        an earlier engine handed out (its outbox died with it); or one no worker started."""
        if self.link.problem is not None:
            return f"broker down: {self.link.error}"
        within = f"within {self.start_timeout // MICROS}s"
        if self._never_sent(command_id):
            return f"never sent {within}: {self._send_error or 'the broker did not take it'}"
        if command_id not in self._mine:
            earlier = "an earlier engine handed it out and may not have sent it"
            return f"no worker started it {within}; {earlier}"
        return f"no worker started it {within}"

    @staticmethod
    def _failed(now: int, command_id: str, code: str, detail: str) -> NewEvent:
        return NewEvent(
            now,
            RUN_FAILED,
            command_id,
            None,
            {"error_code": code, "detail": detail},
            event_id=f"{command_id}:{code}",
        )


async def _fence(may_start: Fence) -> NotStarted | None:
    try:
        if await may_start():
            return None
    except Exception as exc:
        return NotStarted(f"lease check failed: {type(exc).__name__}")
    return NotStarted("lease lost")
