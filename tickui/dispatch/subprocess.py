"""The subprocess dispatcher: runs a task's argv as a local process and watches it."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Sequence

from tickui.common import procs
from tickui.common.clock import Clock
from tickui.common.redact import redact
from tickui.dispatch.base import (
    Dispatcher,
    DispatchFailure,
    Fence,
    Job,
    NotStarted,
    Receipt,
    wait_until_done,
)
from tickui.dispatch.containment import Containment, marker_for
from tickui.dispatch.journals import (
    ENGINE_LEASES,
    RENEWED_BY,
    fence_deadline,
    fence_fits,
    fence_lead,
    runs_lease_path,
)
from tickui.dispatch.output import (
    HEAD_BYTES_DEFAULT,
    TAIL_BYTES_DEFAULT,
    OutputHealth,
    visible,
)
from tickui.dispatch.process import ProcessRun, ProcessRunner, open_gate
from tickui.model.occurrence import RUN_FAILED, RUN_TRANSITION, bound
from tickui.model.records import Occurrence
from tickui.store import NewEvent, Store

log = logging.getLogger("tickui.dispatch")

_Run = ProcessRun  # its `tag` is the occurrence


def _occ(run: ProcessRun) -> Occurrence:
    return run.tag


class SubprocessDispatcher(Dispatcher):
    """Runs a task's argv in its own process group, with cwd, env, timeout and a log file.

    Whatever goes wrong starting or watching one run fails that run alone: `dispatch`,
    `cancel` and `shutdown` never raise for it. Events that cannot be appended (a full
    disk, a locked database) wait in an outbox and are retried until written.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        kill_grace: float = 3.0,
        head_bytes: int = HEAD_BYTES_DEFAULT,
        tail_bytes: int = TAIL_BYTES_DEFAULT,
    ) -> None:
        self.store = store
        self.clock = clock
        self.log_dir = store.log_dir
        lease = runs_lease_path(self.log_dir, ENGINE_LEASES)
        self.runner = ProcessRunner(kill_grace, head_bytes, tail_bytes, OutputHealth(), lease)
        self.retry_min = 0.05  # seconds between attempts to write delayed events, doubling
        self.retry_max = 2.0
        self.flush_grace = 5.0  # how long shutdown waits for delayed events
        self._runs: dict[int, _Run] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._outbox: list[NewEvent] = []
        self._flusher: asyncio.Task[None] | None = None
        self._outage: str | None = None
        self._outage_since = 0.0
        self._fence_checked = False

    @property
    def kill_grace(self) -> float:
        return self.runner.kill_grace

    @kill_grace.setter
    def kill_grace(self, value: float) -> None:
        self.runner.kill_grace = value

    @property
    def _containment(self) -> Containment:
        return self.runner.containment

    @property
    def _output_health(self) -> OutputHealth:
        return self.runner.health  # one warning per outage, for all runs

    def active(self) -> int:
        return len(self._runs)

    def lease_confirmed(self, asked: float, ttl: float) -> None:
        """Runs end by themselves (their supervisors fence them) before the engine's lease
        may pass to another engine, if this process is frozen or gone and cannot renew."""
        if not self._fence_checked:
            self._fence_checked = True
            if not fence_fits(ttl, self.kill_grace):
                log.warning(
                    "the lease TTL (%gs) is too short for the kill grace (%gs): a frozen"
                    " engine's runs may outlive its lease by up to %.1fs; make it at least %gs",
                    ttl, self.kill_grace, fence_lead(self.kill_grace) - ttl * (1 - RENEWED_BY),
                    math.ceil(fence_lead(self.kill_grace) / (1 - RENEWED_BY)),
                )  # fmt: skip
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.runner.renew(fence_deadline(asked, ttl, self.kill_grace))

    @property
    def recording_problem(self) -> str | None:
        """Why run events cannot be written right now (None when they can)."""
        return self._outage

    @property
    def output_problem(self) -> str | None:
        """Why run output cannot be written to the logs right now (None when it can)."""
        return self._output_health.problem

    def problems(self) -> list[str]:
        said = super().problems()
        if self.recording_problem is not None:
            said.append(f"run events not recorded ({self.recording_problem})")
        if self.output_problem is not None:
            said.append(f"run output not written ({self.output_problem})")
        return said

    def _env(self, job: Job) -> dict[str, str]:
        occ = job.occurrence
        env = dict(os.environ)
        env.update(job.task.spec.env)
        env.update({"TICKUI_TASK": occ.task, "TICKUI_KIND": occ.kind, **marker_for(occ)})
        return env

    # ---- starting ----------------------------------------------------------------------

    async def _spawn(self, job: Job, gated: bool = False) -> _Run:
        """Start one run; on any failure nothing is left open and the error is raised.

        `gated`: the run's supervisor is created, but waits until `open_gate` says go, so
        the lease can be checked after the fork, immediately before the command runs;
        closing the gate instead ends it unrun. Its journal goes beside its log."""
        spec = job.task.spec
        return await self.runner.spawn(
            job.occurrence.id,
            spec.command,
            cwd=spec.cwd,
            env=self._env(job),
            log_path=self.log_dir / f"{job.occurrence.id}.log",
            gated=gated,
            tag=job.occurrence,
            marker=marker_for(job.occurrence),
        )

    async def dispatch(
        self, jobs: Sequence[Job], may_start: Fence | None = None
    ) -> list[Receipt | DispatchFailure | NotStarted]:
        """Start each job's run. `may_start` is awaited immediately before each start;
        once it says no (or fails), that job and every later one are not started."""
        results: list[Receipt | DispatchFailure | NotStarted] = []
        started: list[NewEvent] = []
        runs: list[tuple[_Run, int | None]] = []
        fenced: NotStarted | None = None
        try:
            for job in jobs:
                if fenced is None and may_start is not None:
                    fenced = await self._fence(may_start)
                if fenced is not None:
                    results.append(fenced)
                    continue
                try:
                    run = await self._spawn(job, gated=may_start is not None)
                except Exception as exc:
                    results.append(DispatchFailure("DISPATCH_FAILED", _spawn_failure(job, exc)))
                    continue
                self._runs[job.occurrence.id] = run  # tracked by the runner already
                if may_start is not None:
                    # The fork took time, and a pause (SIGSTOP, a suspend) may have fallen
                    # in it: ask again, then open the gate with no await in between.
                    fenced = await self._fence(may_start)
                    if fenced is not None:
                        results.append(await self._abort(run, fenced))
                        continue
                    open_gate(run)
                runs.append((run, job.task.spec.timeout))
                started.append(self._started(run))
                results.append(Receipt(job.occurrence.command_id or "", str(run.log_path)))
            await self._record(started)
        finally:
            for run, timeout in runs:  # every started run is watched, whatever happened
                watcher = asyncio.create_task(self._watch(run, timeout))
                self._watchers.add(watcher)
                watcher.add_done_callback(self._watchers.discard)
        return results

    async def _abort(self, run: _Run, fenced: NotStarted) -> NotStarted:
        """The lease was lost while the gated process was created: close its gate, so it
        ends without running the command, and make sure nothing of it is left."""
        log.warning(
            "occurrence %s not started: the lease was lost while its process was created",
            run.key,
        )
        try:
            await self.runner.abort(run)
        except Exception:
            log.exception("stopping occurrence %s failed", run.key)
        finally:
            self._runs.pop(run.key, None)
        return fenced

    @staticmethod
    async def _fence(may_start: Fence) -> NotStarted | None:
        try:
            if await may_start():
                return None
        except Exception as exc:
            log.warning("the lease check failed, starting nothing more: %s", _describe(exc))
            return NotStarted(f"lease check failed: {_describe(exc)}")
        return NotStarted("lease lost")

    def _started(self, run: _Run) -> NewEvent:
        pid = run.process.pid
        try:
            pid_start = procs.start_ticks(pid)
        except Exception:
            pid_start = None
        return NewEvent(
            self.clock.now(),
            RUN_TRANSITION,
            _occ(run).command_id,
            run.run_id,
            {
                "state": "running",
                "pid": pid,
                "pgid": pid,
                "pid_start": pid_start,
                "log_path": str(run.log_path),
            },
        )

    # ---- watching ----------------------------------------------------------------------

    async def _watch(self, run: _Run, timeout: int | None) -> None:
        outcome: NewEvent | None = None
        command_id = _occ(run).command_id
        try:
            timed_out = await self.runner.wait(run, timeout)
            await self.runner.finish(run)
            kind, payload = self.runner.outcome(run, timeout, timed_out)
            outcome = NewEvent(self.clock.now(), kind, command_id, run.run_id, payload)
        except Exception as exc:
            log.exception("watching occurrence %s failed", run.key)
            outcome = await self._watch_failed(run, exc)
        finally:
            await self.runner.finish(run)
            await self.runner.end_rest(run)
            self._runs.pop(run.key, None)
            try:
                if outcome is not None:
                    await self._record([outcome])
            finally:
                run.done.set()

    async def _watch_failed(self, run: _Run, exc: Exception) -> NewEvent:
        """Watching broke: make sure the run is over, and record it as failed."""
        if run.process.returncode is None:
            try:
                await self.runner.terminate(run)
            except Exception:
                log.exception("stopping occurrence %s failed", run.key)
        payload: dict[str, object] = {
            "exit_code": self.runner.exit_code(run),
            "error_code": "DISPATCH_FAILED",
            "detail": bound(f"watching the run failed: {_describe(exc)}"),
        }
        command_id = _occ(run).command_id
        return NewEvent(self.clock.now(), RUN_FAILED, command_id, run.run_id, payload)

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        """Stop a run this dispatcher started; its outcome is recorded as cancelled."""
        run = self._runs.get(occurrence_id)
        if run is None:
            return False
        await self.runner.cancel(run, reason)
        await run.done.wait()
        return True

    async def shutdown(self, grace: float) -> None:
        """Wait up to `grace` seconds for runs to end, then cancel the rest; then write
        delayed events (bounded by `flush_grace`). Never raises."""
        try:
            await self._shutdown_runs(grace)
        except Exception:
            log.exception("stopping runs failed")
        await self._flush_before_exit()

    async def _shutdown_runs(self, grace: float) -> None:
        await wait_until_done((run.done for run in self._runs.values()), grace)
        await asyncio.gather(*(self.cancel(i, "engine_stopped") for i in list(self._runs)))
        if self._watchers:
            await asyncio.gather(*list(self._watchers), return_exceptions=True)
        await self.runner.shutdown()

    # ---- recording events ----------------------------------------------------------------

    async def _record(self, events: list[NewEvent]) -> None:
        """Append events now, or keep them (in order) for the retrying writer. Never raises."""
        if not events:
            return
        if not self._outbox:
            try:
                await self.store.append_events(events)
                return
            except Exception as exc:
                self._outage_began(exc)
        self._outbox.extend(events)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="tickui-dispatch-outbox")

    def _outage_began(self, exc: Exception) -> None:
        if self._outage is None:
            self._outage = _describe(exc)
            self._outage_since = time.monotonic()
            log.warning(
                "cannot record run events (%s); keeping them and retrying until written",
                self._outage,
            )

    async def _flush(self) -> None:
        """Write the outbox, oldest first, retrying with backoff until it is empty."""
        delay = self.retry_min
        while self._outbox:
            await asyncio.sleep(delay)
            batch = list(self._outbox)
            try:
                await self.store.append_events(batch)
            except Exception as exc:
                self._outage_began(exc)
                delay = min(self.retry_max, delay * 2)
                continue
            del self._outbox[: len(batch)]
            delay = self.retry_min
        if self._outage is not None:
            log.warning(
                "run events are recorded again (after %.1fs)",
                time.monotonic() - self._outage_since,
            )
            self._outage = None

    async def _flush_before_exit(self) -> None:
        flusher = self._flusher
        if flusher is None or flusher.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(flusher), self.flush_grace)
        except TimeoutError:
            flusher.cancel()
            log.error(
                "%d run event(s) could not be recorded (%s); the next engine will find"
                " those runs interrupted",
                len(self._outbox),
                self._outage,
            )
        except Exception:
            log.exception("writing delayed run events failed")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({visible(str(exc.filename))})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return redact(visible(f"{type(exc).__name__}: {exc}"))[:300]


def _spawn_failure(job: Job, exc: BaseException) -> str:
    """`<argv0>: <reason>` for a run that could not be started."""
    spec = job.task.spec
    argv0 = visible(str(spec.command[0])) if spec.command else "(no command)"
    argv0 = argv0 if len(argv0) <= 200 else argv0[:199] + "…"
    if isinstance(exc, OSError) and exc.strerror:
        cwd = spec.cwd or None
        if cwd is not None and exc.filename is not None and str(exc.filename) == str(cwd):
            reason = f"working directory {visible(str(cwd))}: {exc.strerror}"
        elif exc.filename is not None and spec.command and exc.filename != spec.command[0]:
            reason = f"{visible(str(exc.filename))}: {exc.strerror}"
        else:
            reason = exc.strerror
    else:
        reason = f"{type(exc).__name__}: {visible(str(exc))}"
    return str(bound(redact(f"{argv0}: {reason}")))
