"""A worker's runs while they go: started with the process runner, watched to their outcome
(reported), cancelled on the engine's word, and given the stop grace when the worker
drains. The journal of the commands started here lives with them."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from tickui.common.kafka import describe
from tickui.common.redact import redact
from tickui.common.timeutil import MICROS
from tickui.dispatch import messages as m
from tickui.dispatch.bounded import Bounded
from tickui.dispatch.journals import fence_deadline, journal_outcome, last_word
from tickui.dispatch.output import read_tail
from tickui.dispatch.process import ProcessRun, ProcessRunner, open_gate
from tickui.model.occurrence import RUN_FAILED, RUN_INTERRUPTED, bound
from tickui.supervisor import journal as j
from tickui.worker.reports import RunReports
from tickui.worker.state import Journal

log = logging.getLogger("tickui.worker")

Spawn = Callable[[Coroutine[Any, Any, Any]], None]


class RunSupervisor:
    """The runs of this worker (`running`: command id -> its run), reported by `reports`;
    `spawn` starts a background task the worker cancels when it stops."""

    def __init__(
        self,
        journal_path: Path,
        reports: RunReports,
        spawn: Spawn,
        lease_path: Path | None = None,
        engine_timeout: float = m.WORKER_TIMEOUT_S,
    ) -> None:
        self.runner = ProcessRunner(kill_grace=3.0, lease=lease_path)
        # the engine gives up on a silent worker (and may start its runs again elsewhere)
        # after this many seconds: runs are fenced before that
        self.engine_timeout = engine_timeout
        self._heard: float | None = None  # when the last heartbeat the broker took was sent
        self.journal = Journal(journal_path)
        self.reports = reports
        self.spawn = spawn
        self.running: dict[str, ProcessRun] = {}
        # command id -> the reason: cancelled before this worker got the command
        self.cancelled: Bounded[str, str] = Bounded(10_000)
        self._slot_freed = asyncio.Event()
        self._keys = itertools.count(1)
        self.on_end: Callable[[], None] | None = None  # a run ended (its outcome is out)

    async def start(
        self,
        command: m.RunCommand,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        marker: dict[str, str],
    ) -> ProcessRun:
        """Spawn the command's process behind its start gate (`release` opens it)."""
        self.engine_says(command)
        run = await self.runner.spawn(
            next(self._keys), argv, cwd=command.cwd, env=env, log_path=log_path,
            gated=True, tag=command, marker=marker,
        )  # fmt: skip
        self.running[command.command_id] = run
        return run

    async def abort(self, command_id: str, run: ProcessRun) -> None:
        """End a run whose gate never opened; it is no longer this worker's."""
        with contextlib.suppress(Exception):
            await self.runner.abort(run)
        self.running.pop(command_id, None)

    def release(self, run: ProcessRun, command: m.RunCommand) -> None:
        """Open the run's gate and watch it to its outcome."""
        with contextlib.suppress(OSError):  # cancelled meanwhile: the watcher reports it
            open_gate(run)
        self.spawn(self._watch(run, command))

    async def _watch(self, run: ProcessRun, command: m.RunCommand) -> None:
        cid = command.command_id
        timeout = int(command.timeout_s * MICROS) if command.timeout_s else None
        try:
            timed_out = await self.runner.wait(run, timeout)
            await self.runner.finish(run)
            kind, payload = self.runner.outcome(run, timeout, timed_out)
        except Exception as exc:
            log.exception("watching command %s failed", redact(cid))
            with contextlib.suppress(Exception):
                await self.runner.terminate(run)
            kind = RUN_FAILED
            payload = {"exit_code": self.runner.exit_code(run), "error_code": "DISPATCH_FAILED",
                       "detail": bound(f"watching the run failed: {describe(exc)}")}  # fmt: skip
        finally:
            await self.runner.finish(run)
            await self.runner.end_rest(run)
        payload.setdefault("error_code", None)
        payload.setdefault("detail", None)
        tail = read_tail(run.log_path, m.TAIL_MAX_BYTES)
        payload["tail"] = redact(tail)[-m.TAIL_MAX_BYTES :]
        payload["log_path"] = str(run.log_path)
        try:
            await self.reports.emit(self.reports.event(kind, cid, run.run_id, **payload))
        finally:
            self.running.pop(cid, None)
            run.done.set()
            self._slot_freed.set()
            if self.on_end is not None:
                self.on_end()

    def heard(self, asked: float) -> None:
        """The broker took a heartbeat sent at `asked` (time.monotonic()): the runs may go
        on until the engine could give up on this worker, less the time to end them."""
        self._heard = asked
        grace, every = self.runner.kill_grace, m.HEARTBEAT_EVERY_S
        self.runner.renew(fence_deadline(asked, self.engine_timeout, grace, every * 1.5))

    def engine_says(self, command: m.RunCommand) -> None:
        """A command names its engine's worker_timeout: the runs' fence follows it (at
        once, before the command starts)."""
        seconds = command.worker_timeout_s
        if seconds is None or seconds == self.engine_timeout:
            return
        self.engine_timeout = seconds
        if self._heard is not None:
            self.heard(self._heard)

    async def restarted(self, command_id: str, log_path: Path) -> m.RunEvent:
        """What a run this worker started before it restarted did, from its journal. A
        run its supervisor still keeps going (it outlived the old worker process) is
        stopped first: no one here watches it."""
        verdict, record = await last_word(log_path.with_suffix(".journal"), by_lease=False)
        if record is not None and verdict in (j.ENDED, j.START_FAILED):
            kind, payload = journal_outcome(record, None, log_path)
            if record.get("fenced") or record.get("cancelled"):
                how = "fenced (its lease ran out)" if record.get("fenced") else "stopped"
                kind = RUN_INTERRUPTED
                payload.update(
                    error_code="INTERRUPTED", detail=f"worker restarted; its run was {how}"
                )
            payload["tail"] = redact(read_tail(log_path, m.TAIL_MAX_BYTES))[-m.TAIL_MAX_BYTES :]
            payload["log_path"] = str(log_path)
            return self.reports.event(kind, command_id, None, **payload)
        if verdict in (j.NEVER_STARTED, j.NOT_STARTED):
            detail = "worker restarted; its run never started"
        else:
            detail = "worker restarted; its run supervisor vanished without recording the end"
        return self.reports.event(RUN_INTERRUPTED, command_id, None, detail=detail)

    # ---- slots ---------------------------------------------------------------------------

    def slot_freed(self) -> None:
        self._slot_freed.set()

    async def wait_for_slot(self, stopping: asyncio.Event) -> None:
        """Until a run ends (a slot is free) or the worker stops."""
        self._slot_freed.clear()
        stop = asyncio.ensure_future(stopping.wait())
        freed = asyncio.ensure_future(self._slot_freed.wait())
        await asyncio.wait({stop, freed}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        freed.cancel()

    # ---- the engine's word and the worker's end --------------------------------------------

    def cancel(self, command_id: str, reason: str) -> None:
        """Stop the run, or, before this worker got the command, keep it from starting."""
        run = self.running.get(command_id)
        if run is not None:
            self.spawn(self.runner.cancel(run, reason))
        elif not self.reports.has_outcome(command_id):
            self.cancelled.put(command_id, reason)

    def take_cancel(self, command_id: str) -> str | None:
        """Why the command was cancelled before it came here (forgotten now), or None."""
        if command_id in self.cancelled:
            return self.cancelled.pop(command_id)
        return None

    async def stop(self, grace: float) -> None:
        """Running ones get `grace` seconds to end, then are cancelled (and reported)."""
        runs = list(self.running.values())
        if runs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in runs)), grace)
        left = [r for r in runs if not r.done.is_set()]
        await asyncio.gather(*(self.runner.cancel(r, "worker stopped") for r in left))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(r.done.wait() for r in left)), 10)

    async def close(self) -> None:
        await self.runner.shutdown()
        self.journal.close()
