"""`tickui worker`: runs the commands the engine publishes on Kafka, with the local
dispatcher's process runner, and reports each run on the events topic.

At most once: a command's offset is committed only after its `control.run_transition` is
acknowledged, and the command itself waits behind its start gate until then. A command
already started (by this worker id, per its journal, or by any worker, per the events
topic read up to its end) is never started again. Events the broker cannot take wait in
an outbox, retried with backoff; topics are created again after a failure (a restarted
Tansu is empty).

Here: the worker's clients, how long their fetches wait (the pace, pace.py) and its life
(start, run, drain). Its parts: the intake of commands (intake.py), its runs (runs.py),
what it reports (reports.py), the control topic (control.py), heartbeats (heartbeat.py),
the events topic's view (events_view.py) and its producer (publisher.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Coroutine
from typing import Any

from tickui.common import procs
from tickui.common.errors import BadInput, Unavailable
from tickui.common.kafka import (
    FETCHER_LOOK_MS,
    KafkaAccess,
    describe,
    quietly_stop,
    set_fetch_wait,
)
from tickui.common.procs import stop_on_signals
from tickui.dispatch.journals import fence_gone, runs_lease_path
from tickui.dispatch.refusals import Refusals
from tickui.worker.control import ControlReader
from tickui.worker.events_view import EventsView
from tickui.worker.heartbeat import Heartbeats
from tickui.worker.intake import CommandIntake
from tickui.worker.options import WorkerOptions
from tickui.worker.pace import CONTROL_FAST_MS, FAST_MS, Pace
from tickui.worker.publisher import Publisher
from tickui.worker.reports import RunReports, now_micros
from tickui.worker.runs import RunSupervisor
from tickui.worker.state import file_name

log = logging.getLogger("tickui.worker")

PACE_LOOK_S = 5.0  # the pace is looked at again at least this often


class Worker:
    """One worker process: four Kafka clients, its runs, its outbox and its heartbeat."""

    def __init__(self, opts: WorkerOptions) -> None:
        self.opts = opts
        self.access = KafkaAccess.of(opts.bootstrap)
        self.keyring = opts.keyring
        self.refusals = Refusals(log)
        self.id = opts.worker_id
        self.host = procs.host()
        self.stopping = asyncio.Event()
        self.started_at = time.time()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._resending: asyncio.Task[None] | None = None  # recent run events sent again
        self._resend_wanted = False  # another sign of an empty broker came meanwhile
        self.pub = Publisher(self.access, self.keyring, self._event_sent, self.broker_restarted)
        self.reports = RunReports(self.id, self.pub)
        journal = opts.log_dir / "journal" / f"{file_name(self.id)}.started"
        self.leases = opts.log_dir / "journal"
        lease = runs_lease_path(self.leases, file_name(self.id))
        self.runs = RunSupervisor(
            journal, self.reports, self._spawn_task, lease, opts.engine_worker_timeout
        )
        self.beats = Heartbeats(
            self.id, self.host, opts.slots, opts.group, str(opts.log_dir), self.started_at,
            self.runs, self.refusals, self.keyring, self.pub, self.broker_restarted,
        )  # fmt: skip
        self.intake = CommandIntake(
            opts, self.id, self.host, self.started_at, self.refusals, self.runs,
            self.reports, self.pub, self.stopping, self._ready,
        )  # fmt: skip
        self.control = ControlReader(self.id, self.keyring, self.refusals, self.runs, self.reports)
        self.pace = Pace(opts.idle_poll_ms)
        self._paced = asyncio.Event()  # something that may change the pace happened
        self.control.on_due = self._due
        self.intake.on_commands = self._commands_came
        self.intake.on_assigned = self._assigned
        self.runs.on_end = self._run_ended
        self.beats.due = lambda: self.pace.waiting_for(now_micros())
        self.events: Any = None
        self.probe: Any = None
        self.view: EventsView | None = None

    # ---- clients -------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, create the topics, catch up; a broker that does not answer is bad input."""
        from aiokafka import AIOKafkaConsumer
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
        common = {
            **self.access.options(),
            "request_timeout_ms": 3000,
            "consumer_timeout_ms": FETCHER_LOOK_MS,
        }
        await self.pub.start()
        self.events = AIOKafkaConsumer(
            **common, enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=10
        )
        control = AIOKafkaConsumer(
            **common, enable_auto_commit=False, auto_offset_reset="latest", fetch_max_wait_ms=100
        )
        self.probe = AIOKafkaConsumer(**common, enable_auto_commit=False)
        await self.events.start()
        await control.start()
        await self.probe.start()
        self.view = EventsView(self.events, self.probe, self.broker_restarted, self.keyring)
        await self.view.start()
        await self.control.open(control)
        await self.intake.open(self.view)

    def _event_sent(self, partition: int, offset: int) -> None:
        if self.view is not None:
            self.view.sent(partition, offset)

    # ---- the pace ----------------------------------------------------------------------------

    def _due(self, due: int, partitions: tuple[int, ...]) -> None:
        if self.pace.announced(due, now_micros(), partitions):
            self._paced.set()

    def _assigned(self, partitions: frozenset[int]) -> None:
        self.pace.owned = partitions
        self._paced.set()

    def _commands_came(self) -> None:
        self.pace.command_came(now_micros())
        self._paced.set()

    def _run_ended(self) -> None:
        self.pace.run_ended(now_micros())
        self._paced.set()

    def _set_pace(self, fast: bool) -> None:
        wait = FAST_MS if fast else self.pace.idle_ms
        for consumer in (self.intake.consumer, self.events):
            set_fetch_wait(consumer, wait)
        if self.view is not None:
            self.view.rest(not fast)  # caught up by each start meanwhile
        set_fetch_wait(self.control.consumer, CONTROL_FAST_MS if fast else self.pace.control_ms)

    async def keep_pace(self) -> None:
        """Fetches wait long at rest, briefly around due runs and while there is work."""
        fast: bool | None = None
        while True:
            self._paced.clear()
            now = now_micros()
            want = self.pace.fast(now, bool(self.runs.running))
            if want != fast:
                fast = want
                self._set_pace(fast)
            change = self.pace.next_change(now)
            wait = PACE_LOOK_S if change is None else min(PACE_LOOK_S, (change - now) / 1e6)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._paced.wait(), max(0.001, wait))

    def _ready(self) -> None:
        """The group gave this worker partitions: say so at once."""
        self._spawn_task(self.beats.beat())

    def _spawn_task(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def broker_restarted(self) -> None:
        """The broker came back empty (memory storage): what it acknowledged is gone. Send
        again (same event ids: the engine keeps one of each) the transitions and outcomes of
        the last REPUBLISH_S, and read the new events topic from its start, at every sign
        (a part of it may have been read on from a position in the old one; the broker may
        have restarted again since the last). Signs that come while they are being sent
        make one more sending after it, not one each."""
        self.pub.topics_gone()
        if self.view is not None:
            self.view.topic_is_new()
        self._resend_wanted = True
        if self._resending is None or self._resending.done():
            self._resending = self._spawn_task(self._resend_recent())

    async def _resend_recent(self) -> None:
        while self._resend_wanted:
            self._resend_wanted = False
            again = self.reports.recent()
            log.warning(
                "the broker came back empty: sending %d recent run events again", len(again)
            )
            await self.reports.republish(again)

    # ---- the whole life ------------------------------------------------------------------------

    async def run(self) -> int:
        # Before anything is heard or said: the runs of this id's earlier processes are
        # fenced. A supervisor one of them let go just before it died, that had not written
        # its journal yet, never starts its command now (its engine may take it for lost).
        await asyncio.to_thread(fence_gone, self.leases, file_name(self.id))
        await self.start()
        loop = asyncio.get_running_loop()
        with stop_on_signals(loop, self.stopping.set, (signal.SIGTERM, signal.SIGINT)):
            background = [
                asyncio.create_task(self.view.read()),
                asyncio.create_task(self.control.read()),
                asyncio.create_task(self.beats.keep_beating()),
                asyncio.create_task(self.keep_pace()),
            ]
            consume = asyncio.create_task(self.intake.consume())
            self._spawn_task(self.report_left_behind())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.opts.duration)
            self.stopping.set()
            await self.drain(consume, background)
        return 0

    async def report_left_behind(self) -> None:
        """Runs this worker id started before it restarted whose end no worker reported
        (the events topic's last LOOKBACK_S): say what they did from their journals, so
        the engine settles them by what happened instead of declaring them lost. A run
        still going is stopped first, as no one here watches it; the engine ignores a
        report for a run it has settled."""
        assert self.view is not None
        for _ in range(3):
            if await self.view.read_to_end():
                break
        else:
            return
        left = [
            cid for cid, worker in self.view.started_by.items()
            if worker == self.id and cid not in self.view.finished
            and cid not in self.runs.running and not self.reports.has_outcome(cid)
        ]  # fmt: skip
        told = 0
        for cid in left:
            log_path = self.opts.log_dir / f"{file_name(cid)}.log"
            if self.stopping.is_set() or not log_path.with_suffix(".journal").exists():
                continue
            if cid in self.runs.running or self.reports.has_outcome(cid):
                continue  # its command came again meanwhile and was answered
            await self.reports.emit(await self.runs.restarted(cid, log_path))
            told += 1
        if told:
            log.info("reported %d run(s) started before this worker restarted", told)

    async def drain(self, consume: asyncio.Task[None], background: list[asyncio.Task[Any]]) -> None:
        """No new commands; running ones get the stop grace, then are cancelled; outcomes
        and a last `drained` heartbeat go out; then the clients close."""
        self.beats.state = "draining"
        log.info("worker %s draining: %d running", self.id, len(self.runs.running))
        try:
            await asyncio.wait_for(consume, 5)
        except (TimeoutError, Exception):
            consume.cancel()
        # leaves the group: others take over. While the broker cannot be reached aiokafka's
        # consumer stop() raises the CancelledError of its own pending fetch: quietly_stop
        # keeps that from ending the drain.
        await quietly_stop(self.intake.consumer, timeout=5)
        self._spawn_task(self.beats.beat())
        await self.runs.stop(self.opts.stop_grace)
        await self.pub.drain(5)
        self.beats.state = "drained"
        await self.beats.beat()
        for task in background + list(self._tasks):
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self.pub.stop()
        for client in (self.events, self.control.consumer, self.probe):
            await quietly_stop(client)
        await self.runs.close()
        log.info("worker %s drained", self.id)
