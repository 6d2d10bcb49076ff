"""A worker's intake of run commands: the runs topic read in the worker's consumer group
as slots allow, each record checked (signed by the engine, seen in no other record, not
started by any worker, before its deadline, of an allowed program) and then answered or
started. A start is committed only once its transition is acknowledged, and its process
waits behind its start gate until then: at most once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

from aiokafka import ConsumerRebalanceListener

from tickui.common.kafka import FETCHER_LOOK_MS, KafkaAccess, describe
from tickui.common.redact import redact
from tickui.common.timeutil import MICROS, iso
from tickui.dispatch import messages as m
from tickui.dispatch.bounded import Bounded
from tickui.dispatch.output import visible
from tickui.dispatch.refusals import Refusals
from tickui.dispatch.signing import SIG_HEADER
from tickui.model.occurrence import (
    RUN_CANCELED,
    RUN_FAILED,
    RUN_INTERRUPTED,
    RUN_TRANSITION,
    bound,
)
from tickui.worker.events_view import EventsView
from tickui.worker.options import WorkerOptions
from tickui.worker.publisher import Publisher
from tickui.worker.reports import RunReports, now_micros
from tickui.worker.runs import RunSupervisor
from tickui.worker.state import file_name

log = logging.getLogger("tickui.worker")


class _Placing(ConsumerRebalanceListener):  # type: ignore[misc]
    """Places newly assigned partitions before anything is fetched from them."""

    def __init__(self, intake: CommandIntake) -> None:
        self.intake = intake

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Let a start under way publish its transition and commit before the partition
        moves (its next owner then sees the transition); bounded, a rebalance never hangs."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.intake.handling.acquire(), 3)
            self.intake.handling.release()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.intake.place(assigned)
        if self.intake.on_assigned is not None:
            self.intake.on_assigned(frozenset(tp.partition for tp in assigned))


class CommandIntake:
    """Run commands into runs for one worker. `on_ready` is called once, when the group
    first gave this worker partitions."""

    def __init__(
        self,
        opts: WorkerOptions,
        worker_id: str,
        host: str,
        started_at: float,
        refusals: Refusals,
        runs: RunSupervisor,
        reports: RunReports,
        pub: Publisher,
        stopping: asyncio.Event,
        on_ready: Callable[[], None],
    ) -> None:
        self.opts = opts
        self.access = KafkaAccess.of(opts.bootstrap)
        self.keyring = opts.keyring
        self.worker_id = worker_id
        self.host = host
        self.started_at = started_at
        self.refusals = refusals
        self.runs = runs
        self.reports = reports
        self.pub = pub
        self.stopping = stopping
        self.on_ready = on_ready
        self.on_commands: Callable[[], None] | None = None  # records came (the pace quickens)
        # the group gave this worker these partitions (all it holds now)
        self.on_assigned: Callable[[frozenset[int]], None] | None = None
        # command id -> "partition:offset" of the record it first came in: the same id in
        # another record is a copy (a replay), never run
        self.seen: Bounded[str, str] = Bounded(200_000)
        self.handling = asyncio.Lock()  # held while one command is answered or started
        self.ready = False
        self.consumer: Any = None
        self.view: EventsView | None = None
        self._read_problem: str | None = None

    async def open(self, view: EventsView) -> None:
        """Join the group on the runs topic; `view` tells which commands were started."""
        from aiokafka import AIOKafkaConsumer

        self.view = view
        heartbeat_ms = max(100, self.opts.session_timeout_ms // 6)
        self.consumer = AIOKafkaConsumer(
            **self.access.options(),
            group_id=self.opts.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # out of range: the broker restarted, topics anew
            fetch_max_wait_ms=10,
            session_timeout_ms=self.opts.session_timeout_ms,
            heartbeat_interval_ms=heartbeat_ms,
            request_timeout_ms=max(3000, self.opts.session_timeout_ms + 1000),
            max_poll_records=self.opts.slots,
            consumer_timeout_ms=FETCHER_LOOK_MS,
            # the runs topic missing (a broker come back empty, not made yet): looked for
            # again within seconds, not aiokafka's five minutes (no request makes it)
            metadata_max_age_ms=5000,
        )
        await self.consumer.start()
        self.consumer.subscribe([m.RUNS_TOPIC], listener=_Placing(self))

    async def _commit(self, tp: Any, offset: int) -> str | None:
        """Commit; the reason when that failed (logged), else None."""
        try:
            await asyncio.wait_for(self.consumer.commit({tp: offset}), 3)
        except Exception as exc:
            reason = describe(exc)
            log.warning("cannot commit %s[%d]@%d: %s", tp.topic, tp.partition, offset, reason)
            return reason
        return None

    async def place(self, assigned: Any) -> None:
        """A partition the group has no offset for (a new group; a broker restarted empty)
        starts at the first command published since this worker started (less a margin
        for clocks), and that offset is committed at once: a later rebalance never skips
        past commands nobody took, and a new group never reads old history."""
        fresh = []
        for tp in assigned:
            with contextlib.suppress(Exception):
                if await self.consumer.committed(tp) is None:
                    fresh.append(tp)
        if fresh:
            since = int(self.started_at * 1000) - 5000
            try:
                found = await self.consumer.offsets_for_times(dict.fromkeys(fresh, since))
                ends = await self.consumer.end_offsets(fresh)
                offsets = {}
                for tp in fresh:
                    hit = found.get(tp)  # Tansu: timestamp -1 when nothing is that recent
                    offsets[tp] = hit.offset if hit is not None and hit.timestamp >= 0 else ends[tp]
                    self.consumer.seek(tp, offsets[tp])
                await asyncio.wait_for(self.consumer.commit(offsets), 3)
            except Exception as exc:
                log.warning("cannot place the partitions given to this worker: %s", describe(exc))
        if assigned and not self.ready:
            self.ready = True
            log.info(
                "worker %s ready: group %s, %d slots, logs in %s",
                self.worker_id, self.opts.group, self.opts.slots, self.opts.log_dir,
            )  # fmt: skip
            self.on_ready()

    async def _fetch(self, free: int) -> dict[Any, list[Any]]:
        """What the consumer has (records wake it at once), or nothing once the worker
        stops: a stop does not wait out the fetch's look (a second at rest). Only the wait
        is given up; records not taken stay uncommitted, for the group's next owner."""
        fetch = asyncio.ensure_future(
            self.consumer.getmany(timeout_ms=FETCHER_LOOK_MS, max_records=free)
        )
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not fetch.done():
                fetch.cancel()
        if not fetch.done():  # given up (its cancel is under way)
            return {}
        return fetch.result()

    async def consume(self) -> None:
        while not self.stopping.is_set():
            free = self.opts.slots - len(self.runs.running)
            if free <= 0:
                parts = self.consumer.assignment()
                self.consumer.pause(*parts)
                await self.runs.wait_for_slot(self.stopping)
                self.consumer.resume(*self.consumer.assignment())
                continue
            try:
                batch = await self._fetch(free)
            except Exception as exc:
                problem = describe(exc)
                if problem != self._read_problem:  # once per kind of trouble, not 2 a second
                    log.warning("reading run commands failed: %s", problem)
                self._read_problem = problem
                await asyncio.sleep(0.5)
                continue
            self._read_problem = None
            if batch and self.on_commands is not None:
                self.on_commands()
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
                            self.consumer.seek(tp, record.offset)
                            await asyncio.sleep(0.5)
                            break
                        checked = True
                    if tp not in self.consumer.assignment():
                        break  # revoked meanwhile: its new owner gets these
                    async with self.handling:  # a revoke waits for this start to commit
                        handled = await self._handle(tp, record)
                    if not handled:
                        self.consumer.seek(tp, record.offset)  # again, once the broker is back
                        await asyncio.sleep(0.5)
                        break
                else:
                    if refused_to is not None and tp in self.consumer.assignment():
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
        event = self.reports.event
        started_by = self.view.started_by.get(cid)
        if cid in self.runs.running or cid in self.view.finished or self.reports.has_outcome(cid):
            pass  # running here now, or over: nothing to say
        elif cid in self.runs.journal or started_by == self.worker_id:
            answer = await self.runs.restarted(cid, self.opts.log_dir / f"{file_name(cid)}.log")
        elif started_by is not None:
            pass  # another worker has it
        elif (cancelled := self.runs.take_cancel(cid)) is not None:
            answer = event(RUN_CANCELED, cid, None, detail=cancelled)
        elif command.deadline <= now_micros():
            late = (now_micros() - command.deadline) / MICROS
            detail = f"deadline {iso(command.deadline)} passed {late:.1f}s before a worker got it"
            self.refusals.refuse("expired_command", f"{cid} at {where}: {detail}")
            answer = event(RUN_FAILED, cid, None, exit_code=None, error_code=m.DEADLINE,
                           detail=detail)  # fmt: skip
        else:
            return await self._start(tp, record.offset, command)
        if answer is not None:
            await self.reports.emit(answer)
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
        env.update(TICKUI_TASK=command.task, TICKUI_KIND=command.kind, TICKUI_WORKER=self.worker_id)
        env.update(marker)
        return env, marker

    async def _start(self, tp: Any, offset: int, command: m.RunCommand) -> bool:
        cid = command.command_id
        event = self.reports.event
        env, marker = self._env(command)
        log_path = self.opts.log_dir / f"{file_name(cid)}.log"
        argv, why = self.opts.allow.resolve(command.argv, command.env, command.cwd)
        if argv is None:
            program = visible(command.argv[0])[:200]
            self.refusals.refuse("disallowed_command", f"{cid}: {program}: {why}")
            detail = str(bound(redact(f"{program}: {why}")))
            await self.reports.emit(event(RUN_FAILED, cid, None, exit_code=None,
                                          error_code="DISPATCH_FAILED", detail=detail))  # fmt: skip
            await self._commit(tp, offset + 1)
            return True
        try:
            run = await self.runs.start(command, argv, env, log_path, marker)
        except Exception as exc:
            argv0 = visible(command.argv[0])[:200]
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else describe(exc)
            detail = str(bound(redact(f"{argv0}: {reason}")))
            await self.reports.emit(event(RUN_FAILED, cid, None, exit_code=None,
                                          error_code="DISPATCH_FAILED", detail=detail))  # fmt: skip
            await self._commit(tp, offset + 1)
            return True
        transition = event(
            RUN_TRANSITION, cid, run.run_id, state="running", worker=self.worker_id,
            host=self.host, pid=run.process.pid, log_path=str(log_path),
            record=f"{tp.partition}:{offset}",
        )  # fmt: skip
        try:
            if self.pub.outbox:
                raise RuntimeError("the broker has not taken earlier events yet")
            await self.pub.send(m.EVENTS_TOPIC, cid, transition.encode())
        except Exception as exc:
            log.warning("command %s not started: %s", redact(cid), describe(exc))
            self.pub.outage_began(exc)
            await self.runs.abort(cid, run)
            return False
        self.runs.journal.add(cid)
        self.view.started_by.put(cid, self.worker_id)
        self.reports.started(cid, transition)
        failed = await self._commit(tp, offset + 1)
        if failed is not None:
            # Another worker may get it now (a rebalance). Its check of the events topic
            # should find the transition, but at most once must not hang on that: not run.
            await self.runs.abort(cid, run)
            self.runs.slot_freed()
            why = (
                "the group rebalanced before its offset was committed"
                if "CommitFailedError" in failed
                else f"its offset could not be committed ({failed})"
            )
            detail = str(bound(f"not started: {why}"))
            await self.reports.emit(event(RUN_INTERRUPTED, cid, run.run_id, detail=detail))
            return True
        self.runs.release(run, command)
        return True
