"""The Kafka dispatcher: runs go to `tickui worker` processes as RunCommands, and come
back as run events the engine appends to its event log (reconcile settles them as any
run's). What no worker reports on is settled here, on the engine's clock: a command no
worker started by its deadline (DISPATCH_TIMEOUT), a run whose worker went silent
(WORKER_LOST). A broker that is down delays commands (an outbox), never the engine.

What waits to be sent is the Outbox's (kafka_outbox.py); heartbeats and lost workers are
the WorkerSupervisor's (kafka_supervision.py); when workers are told the next run is due,
DueNotices' (kafka_due.py); deadlines and cancels are kept here."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence

from tickui.common import procs
from tickui.common.kafka import KafkaAccess
from tickui.common.timeutil import MICROS
from tickui.dispatch.base import Dispatcher, DispatchFailure, Fence, Job, NotStarted, Receipt
from tickui.dispatch.kafka_due import NAMED_TASKS, DueNotices, due_partitions
from tickui.dispatch.kafka_feeds import EventFeed, HeartbeatFeed
from tickui.dispatch.kafka_link import KafkaLink
from tickui.dispatch.kafka_outbox import Outbox, Pending
from tickui.dispatch.kafka_supervision import WorkerSupervisor
from tickui.dispatch.messages import (
    CONTROL_TOPIC,
    DEFAULT_PARTITIONS,
    DISPATCH_TIMEOUT,
    DUE_KEY,
    RUNS_TOPIC,
    WORKER_LOST,
    WORKER_TIMEOUT_S,
    Control,
    RunCommand,
)
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import Keyring
from tickui.model.occurrence import RUN_CANCELED, RUN_FAILED
from tickui.store import NewEvent, Store

log = logging.getLogger("tickui.dispatch.kafka")

GRACE = 2 * MICROS  # after a deadline, before DISPATCH_TIMEOUT (a transition in flight)


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
        self.workers = WorkerSupervisor(
            store, clock, self.worker_timeout, ask=self._control, tell=self._tell
        )
        self.outbox = Outbox(self.link, clock, self._broker_refused)
        self.events = EventFeed(
            self.access, self._ours, self._record_events, timeout_ms,
            second_start=self._stop_second_start, **signed,
        )  # fmt: skip
        self.heartbeats = HeartbeatFeed(
            self.access, self.workers.record_beats, group, timeout_ms, **signed
        )
        self._refusals_stored: dict[str, int] | None = None  # as last written to the store
        # (who, kind, count so far, the last detail): the engine's refusals and those its
        # workers report in their heartbeats, as they happen (the hooks listen)
        self.refusal_listeners: list[Callable[[str, str, int, str], None]] = []
        self.refusals.listeners.append(
            lambda kind, count, detail: self._tell(f"engine {procs.host()}", kind, count, detail)
        )
        self.events.prepare = self.heartbeats.prepare = self.link.ready
        self.events.restarted = self.heartbeats.restarted = self._restarted
        self.link.on_new_topics = self._restarted
        self.heartbeats.opened = self.workers.hearing
        self._timed_out: set[str] = set()  # command ids cancelled for DISPATCH_TIMEOUT
        self._mine: set[str] = set()  # run command ids this dispatcher handed out
        # engine clock: the broker last seen down or restarted empty (events may be lost or
        # late until its workers sent them again)
        self._trouble_at: int | None = None
        self._started = False
        self.due_notices = DueNotices()

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
        if problem is None and len(self.outbox):
            problem = f"kafka {self.bootstrap}: {len(self.outbox)} message(s) waiting to be sent"
        return problem

    def active(self) -> int:
        return 0  # runs live on workers: nothing here to wait for at shutdown

    # ---- lifecycle -----------------------------------------------------------------------

    def on_refusal(self, listener: Callable[[str, str, int, str], None]) -> None:
        self.refusal_listeners.append(listener)

    async def start(self) -> None:
        """Begin reading events and heartbeats and sending what waits; never waits for
        the broker (a broker that is down is retried in the background)."""
        if self._started:
            return
        self._started = True
        self.events.start()
        self.heartbeats.start()
        self.outbox.start()

    async def shutdown(self, grace: float) -> None:
        """Runs go on on their workers (their events are read by the next engine). What
        waits in the outbox gets up to `grace` seconds (bounded) to be sent."""
        await self.outbox.stop(grace)
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
                Pending(RUNS_TOPIC, c.task.encode(), c.encode(), c.deadline, c.command_id)
                for _, c in commands
            ]
            await self.outbox.send(pending)
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
            worker_timeout_s=self.worker_timeout / MICROS,
        )

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
        await self.outbox.send([Pending(CONTROL_TOPIC, key, message.encode(), until, command_id)])

    # ---- what workers say -----------------------------------------------------------------

    def _restarted(self) -> None:
        """The broker came back empty: what it had acknowledged is gone until workers send
        it again (they do when they notice), and each topic is a new one, read from its
        start by every reader (one reader's positions may have been overtaken unseen)."""
        self.link.forget_topics()
        self.events.read_anew()
        self.heartbeats.read_anew()
        self._trouble_at = self.clock.now()

    def _broker_refused(self) -> None:
        """The broker did not take a message: events may be late or lost until it is back."""
        self._trouble_at = self.clock.now()

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

    # ---- on each tick --------------------------------------------------------------------

    async def tend(self, now: int) -> None:
        """Settle what no worker will report: commands past their deadline that no worker
        started, and runs of workers silent for longer than worker_timeout."""
        if self.link.down_since is not None or self.events.error or self.heartbeats.error:
            self._trouble_at = now
        if self.workers.after_a_gap(now):
            self._trouble_at = now
        await self._store_refusals(now)
        await self._tell_next_due(now)
        listening = self.heartbeats.error is None and self.link.down_since is None
        can_tell = self.workers.can_tell_lost(now, listening)
        if can_tell:
            await self.workers.mark_silent_lost(now)
        remote = await self.store.remote_active()
        if not remote:
            self.workers.forget_runs()
            self._timed_out.clear()
            self._mine.clear()
            self.outbox.forget_unsent()
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
            if not self.outbox.never_sent(command_id) and not heard_all:
                continue  # a worker may have started it; its report may be on the way
            events.append(
                self._failed(now, command_id, DISPATCH_TIMEOUT, self._why_late(command_id))
            )
            if command_id not in self._timed_out:  # so a late worker never starts it
                self._timed_out.add(command_id)
                await self._control("cancel", command_id, None, DISPATCH_TIMEOUT)
        for occ in remote:
            detail = self.workers.lost_detail(occ, workers, now, can_tell)
            if detail is not None:
                events.append(self._failed(now, occ.command_id or "", WORKER_LOST, detail))
        if events:
            await self.store.append_events(events)
        active = {o.command_id for o in remote}
        self.workers.forget_runs(active)
        self._timed_out &= active
        self._mine &= active
        self.outbox.forget_unsent(active)

    async def _tell_next_due(self, now: int) -> None:
        """Tell the workers the next instant a run is due (see kafka_due.py); dropped
        unsent once that instant has come."""
        if not self.due_notices.time_to_look(now):
            return
        due = await self.store.next_due()
        partitions: tuple[int, ...] = ()
        if due is not None and self.due_notices.near(now, due):
            names = await self.store.tasks_due_at(due, NAMED_TASKS)
            partitions = due_partitions(
                [self.link.run_partition(name.encode()) for name in names],
                len(names) < NAMED_TASKS,
            )
        due = self.due_notices.to_say(now, due, partitions)
        if due is not None:
            message = Control.next_due(due, now, partitions).encode()
            await self.outbox.send([Pending(CONTROL_TOPIC, DUE_KEY, message, due, "")])

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

    def _heard_all(self, now: int) -> bool:
        """Every run event of a command sent is in by now, unless the broker was down or
        restarted empty within worker_timeout: a worker that started it before its deadline
        may be sending its transition again (the same bound as a silent worker's)."""
        return self._trouble_at is None or self._trouble_at <= now - self.worker_timeout

    def _why_late(self, command_id: str) -> str:
        """A broker down now; a command the broker never took before its deadline (the
        broker may be back by now: the reason is what kept it, not the state today); one
        an earlier engine handed out (its outbox died with it); or one no worker started."""
        if self.link.problem is not None:
            return f"broker down: {self.link.error}"
        within = f"within {self.start_timeout // MICROS}s"
        if self.outbox.never_sent(command_id):
            return f"never sent {within}: {self.outbox.send_error or 'the broker did not take it'}"
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
