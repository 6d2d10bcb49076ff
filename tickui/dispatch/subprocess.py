"""The subprocess dispatcher: runs a task's argv as a local process and watches it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tickui import procs
from tickui.clock import Clock
from tickui.dispatch.base import DispatchFailure, Job, Receipt
from tickui.dispatch.output import read_tail
from tickui.models import Occurrence
from tickui.occurrence import (
    RUN_CANCELED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_TRANSITION,
    bound,
)
from tickui.store import NewEvent, Store
from tickui.timeutil import MICROS, format_duration, iso

log = logging.getLogger("tickui.dispatch")


@dataclass
class _Run:
    occurrence: Occurrence
    process: asyncio.subprocess.Process
    run_id: str
    log_path: Path
    cancel_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class SubprocessDispatcher:
    """Runs a task's argv in its own process group, with cwd, env, timeout and a log file."""

    def __init__(self, store: Store, clock: Clock, kill_grace: float = 3.0) -> None:
        self.store = store
        self.clock = clock
        self.kill_grace = kill_grace
        self.log_dir = store.log_dir
        self._runs: dict[int, _Run] = {}
        self._watchers: set[asyncio.Task[None]] = set()

    def active(self) -> int:
        return len(self._runs)

    def _env(self, job: Job) -> dict[str, str]:
        occ = job.occurrence
        env = dict(os.environ)
        env.update(job.task.spec.env)
        env.update(
            {
                "TICKUI_TASK": occ.task,
                "TICKUI_OCCURRENCE_ID": str(occ.id),
                "TICKUI_KIND": occ.kind,
                "TICKUI_SCHEDULED_FOR": iso(occ.scheduled_for) or "",
            }
        )
        return env

    async def _spawn(self, job: Job) -> _Run:
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path = self.log_dir / f"{job.occurrence.id}.log"
        handle = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            process = await asyncio.create_subprocess_exec(
                *job.task.spec.command,
                cwd=job.task.spec.cwd or None,
                env=self._env(job),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=handle,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            os.close(handle)
        return _Run(job.occurrence, process, f"run-{uuid.uuid4().hex[:16]}", log_path)

    async def dispatch(self, jobs: Sequence[Job]) -> list[Receipt | DispatchFailure]:
        results: list[Receipt | DispatchFailure] = []
        started: list[NewEvent] = []
        for job in jobs:
            try:
                run = await self._spawn(job)
            except OSError as exc:
                what = job.task.spec.command[0]
                results.append(DispatchFailure("DISPATCH_FAILED", f"{what}: {exc.strerror or exc}"))
                continue
            self._runs[job.occurrence.id] = run
            pid = run.process.pid
            started.append(
                NewEvent(
                    self.clock.now(),
                    RUN_TRANSITION,
                    job.occurrence.command_id,
                    run.run_id,
                    {
                        "state": "running",
                        "pid": pid,
                        "pgid": pid,
                        "pid_start": procs.start_ticks(pid),
                        "log_path": str(run.log_path),
                    },
                )
            )
            results.append(Receipt(job.occurrence.command_id or "", str(run.log_path)))
        await self.store.append_events(started)
        for job, result in zip(jobs, results, strict=True):
            if isinstance(result, Receipt):
                run = self._runs[job.occurrence.id]
                watcher = asyncio.create_task(self._watch(run, job.task.spec.timeout))
                self._watchers.add(watcher)
                watcher.add_done_callback(self._watchers.discard)
        return results

    async def _watch(self, run: _Run, timeout: int | None) -> None:
        timed_out = False
        try:
            try:
                await asyncio.wait_for(run.process.wait(), timeout / MICROS if timeout else None)
            except TimeoutError:
                timed_out = True
                await self._terminate(run)
            await self.store.append_events([self._outcome(run, timeout, timed_out)])
        except Exception:
            log.exception("watching occurrence %s failed", run.occurrence.id)
        finally:
            self._runs.pop(run.occurrence.id, None)
            run.done.set()

    def _outcome(self, run: _Run, timeout: int | None, timed_out: bool) -> NewEvent:
        code = run.process.returncode
        occ = run.occurrence
        payload: dict[str, object] = {"exit_code": code}
        if run.cancel_reason is not None:
            kind = RUN_CANCELED
            payload["detail"] = run.cancel_reason
        elif timed_out:
            kind = RUN_FAILED
            payload.update(
                error_code="TIMEOUT", detail=f"timed out after {format_duration(timeout or 0)}"
            )
        elif code == 0:
            kind = RUN_COMPLETED
        else:
            kind = RUN_FAILED
            last = read_tail(run.log_path, 512).strip().splitlines()
            said = f": {last[-1]}" if last else ""
            if code is not None and code < 0:
                name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
                payload.update(error_code="KILLED", detail=bound(f"killed by {name}{said}"))
            else:
                payload.update(error_code="EXIT_NONZERO", detail=bound(f"exit {code}{said}"))
        return NewEvent(self.clock.now(), kind, occ.command_id, run.run_id, payload)

    async def _terminate(self, run: _Run) -> None:
        """SIGTERM the run's process group, then SIGKILL it after the grace."""
        pgid = run.process.pid
        procs.signal_group(pgid, signal.SIGTERM)
        try:
            await asyncio.wait_for(run.process.wait(), self.kill_grace)
        except TimeoutError:
            procs.signal_group(pgid, signal.SIGKILL)
            await run.process.wait()
        procs.signal_group(pgid, signal.SIGKILL)  # leftovers in the group, if any

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        """Stop a run this dispatcher started; its outcome is recorded as cancelled."""
        run = self._runs.get(occurrence_id)
        if run is None:
            return False
        run.cancel_reason = reason
        await self._terminate(run)
        await run.done.wait()
        return True

    async def shutdown(self, grace: float) -> None:
        """Wait up to `grace` seconds for runs to end, then cancel the rest."""
        waiting = [run.done.wait() for run in self._runs.values()]
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), grace)
        await asyncio.gather(*(self.cancel(i, "engine_stopped") for i in list(self._runs)))
        if self._watchers:
            await asyncio.gather(*list(self._watchers), return_exceptions=True)
