"""The subprocess dispatcher: runs a task's argv as a local process and watches it."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tickui import procs
from tickui.clock import Clock
from tickui.dispatch.base import (
    DispatchFailure,
    Fence,
    Job,
    NotStarted,
    Receipt,
    wait_until_done,
)
from tickui.dispatch.containment import Containment, end_group, marker_for
from tickui.dispatch.output import (
    HEAD_BYTES_DEFAULT,
    TAIL_BYTES_DEFAULT,
    BoundedLog,
    OutputHealth,
    OutputPump,
    visible,
)
from tickui.models import Occurrence
from tickui.occurrence import (
    RUN_CANCELED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_TRANSITION,
    bound,
)
from tickui.redact import redact
from tickui.store import NewEvent, Store
from tickui.timeutil import MICROS, format_duration

log = logging.getLogger("tickui.dispatch")

# A start that took longer than this after its lease check (the process was paused
# around the fork) asks the fence again; far below the lease's own margin (>= 0.1 s).
# The start gate: a tiny sh waits for one line on its stdin (the gate pipe), then gives the
# command /dev/null as stdin, as ungated runs get, and execs it (same pid, group and env);
# EOF instead of the line ends it with 125, the command unrun.
GATE = ("/bin/sh", "-c", 'read -r _ || exit 125; exec </dev/null; exec "$@"', "tickui-gate")


def _open_gate(run: _Run) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        try:
            os.write(gate, b"go\n")
        finally:
            os.close(gate)


def _close_gate(run: _Run) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        os.close(gate)


def _check_program(program: str, cwd: str | None, env: dict[str, str]) -> None:
    """Refuse, as exec would, a program that cannot run: behind the gate the exec happens
    in the child, where its failure would look like the command's own exit 127."""
    if "\0" in program:
        raise ValueError("embedded null byte")
    if "/" in program:
        path = program if os.path.isabs(program) else os.path.join(cwd or os.getcwd(), program)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
        if found is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        path = found
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)


@dataclass
class _Run:
    occurrence: Occurrence
    process: asyncio.subprocess.Process
    run_id: str
    log_path: Path
    sink: BoundedLog | None = None
    output: OutputPump | None = None
    cancel_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    gate: int | None = None  # write end of the start gate, while the command waits on it


class SubprocessDispatcher:
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
        self.kill_grace = kill_grace
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.log_dir = store.log_dir
        self.retry_min = 0.05  # seconds between attempts to write delayed events, doubling
        self.retry_max = 2.0
        self.flush_grace = 5.0  # how long shutdown waits for delayed events
        self._runs: dict[int, _Run] = {}
        self._containment = Containment()  # every descendant of a run ends with it
        self._watchers: set[asyncio.Task[None]] = set()
        self._outbox: list[NewEvent] = []
        self._flusher: asyncio.Task[None] | None = None
        self._outage: str | None = None
        self._outage_since = 0.0
        self._output_health = OutputHealth()  # one warning per outage, for all runs

    def active(self) -> int:
        return len(self._runs)

    @property
    def recording_problem(self) -> str | None:
        """Why run events cannot be written right now (None when they can)."""
        return self._outage

    @property
    def output_problem(self) -> str | None:
        """Why run output cannot be written to the logs right now (None when it can)."""
        return self._output_health.problem

    def _env(self, job: Job) -> dict[str, str]:
        occ = job.occurrence
        env = dict(os.environ)
        env.update(job.task.spec.env)
        env.update({"TICKUI_TASK": occ.task, "TICKUI_KIND": occ.kind, **marker_for(occ)})
        return env

    # ---- starting ----------------------------------------------------------------------

    async def _spawn(self, job: Job, gated: bool = False) -> _Run:
        """Start one run; on any failure nothing is left open and the error is raised.

        `gated`: the process is created, but waits (in a tiny `sh`, before it execs the
        command) until `_open_gate` says go, so the lease can be checked after the fork,
        immediately before the command runs; closing the gate instead ends it unrun."""
        spec = job.task.spec
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path = self.log_dir / f"{job.occurrence.id}.log"
        sink: BoundedLog | None = None
        read_end = write_end = gate_read = gate_write = -1
        try:
            env = self._env(job)
            sink = BoundedLog(log_path, self.head_bytes, self.tail_bytes, self._output_health)
            read_end, write_end = os.pipe()  # both close-on-exec; the child gets a dup
            argv = list(spec.command)
            if gated:
                _check_program(spec.command[0], spec.cwd, env)  # as exec would refuse it
                gate_read, gate_write = os.pipe()
                argv = [*GATE, *spec.command]
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=spec.cwd or None,
                env=env,
                stdin=gate_read if gated else asyncio.subprocess.DEVNULL,
                stdout=write_end,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            for fd in (read_end, write_end, gate_read, gate_write):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            if sink is not None:
                sink.close()
                with contextlib.suppress(OSError):
                    log_path.unlink()
            raise
        os.close(write_end)
        if gate_read >= 0:
            os.close(gate_read)
        run = _Run(job.occurrence, process, f"run-{uuid.uuid4().hex[:16]}", log_path, sink)
        run.gate = gate_write if gate_write >= 0 else None
        try:
            run.output = OutputPump(asyncio.get_running_loop(), read_end, sink)
        except Exception:  # the run goes on; its output is not kept
            log.exception("cannot read the output of occurrence %s", job.occurrence.id)
            with contextlib.suppress(OSError):
                os.close(read_end)
            sink.close()
        return run

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
                self._runs[job.occurrence.id] = run
                try:  # the run has started: a tracking fault must not end the batch
                    pipe = run.output.fd if run.output is not None else None
                    self._containment.track(job.occurrence, run.process.pid, pipe)
                except Exception:
                    log.exception("cannot track the processes of occurrence %s", run.occurrence.id)
                if may_start is not None:
                    # The fork took time, and a pause (SIGSTOP, a suspend) may have fallen
                    # in it: ask again, then open the gate with no await in between.
                    fenced = await self._fence(may_start)
                    if fenced is not None:
                        results.append(await self._abort(run, fenced))
                        continue
                    _open_gate(run)
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
            run.occurrence.id,
        )
        _close_gate(run)
        try:
            if self._containment.knows(run.occurrence.id):
                await self._containment.end(run.occurrence.id, 0)
            else:
                await end_group(run.process.pid, 0)
            await run.process.wait()
            await self._finish_output(run)
        except Exception:
            log.exception("stopping occurrence %s failed", run.occurrence.id)
        finally:
            self._runs.pop(run.occurrence.id, None)
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
            run.occurrence.command_id,
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
        timed_out = False
        outcome: NewEvent | None = None
        try:
            try:
                await asyncio.wait_for(run.process.wait(), timeout / MICROS if timeout else None)
            except TimeoutError:
                timed_out = True
                await self._terminate(run)
            await self._finish_output(run)
            outcome = self._outcome(run, timeout, timed_out)
        except Exception as exc:
            log.exception("watching occurrence %s failed", run.occurrence.id)
            outcome = await self._watch_failed(run, exc)
        finally:
            await self._finish_output(run)
            await self._end_rest(run)
            self._runs.pop(run.occurrence.id, None)
            try:
                if outcome is not None:
                    await self._record([outcome])
            finally:
                run.done.set()

    async def _watch_failed(self, run: _Run, exc: Exception) -> NewEvent:
        """Watching broke: make sure the run is over, and record it as failed."""
        if run.process.returncode is None:
            try:
                await self._terminate(run)
            except Exception:
                log.exception("stopping occurrence %s failed", run.occurrence.id)
        payload: dict[str, object] = {
            "exit_code": run.process.returncode,
            "error_code": "DISPATCH_FAILED",
            "detail": bound(f"watching the run failed: {_describe(exc)}"),
        }
        occ = run.occurrence
        return NewEvent(self.clock.now(), RUN_FAILED, occ.command_id, run.run_id, payload)

    @staticmethod
    async def _finish_output(run: _Run) -> None:
        pump, run.output = run.output, None
        if pump is not None:
            await pump.finish()

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
            last = run.sink.last_line() if run.sink is not None else ""
            said = f": {last}" if last else ""
            if code is not None and code < 0:
                name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
                payload.update(error_code="KILLED", detail=bound(f"killed by {name}{said}"))
            else:
                payload.update(error_code="EXIT_NONZERO", detail=bound(f"exit {code}{said}"))
        return NewEvent(self.clock.now(), kind, occ.command_id, run.run_id, payload)

    async def _terminate(self, run: _Run) -> None:
        """End the run's whole tree (its process group as a group, every descendant that
        left it): SIGTERM, then SIGKILL after the grace. See containment.py."""
        key = run.occurrence.id
        if self._containment.knows(key):
            await self._containment.end(key, self.kill_grace)
        elif run.process.returncode is None:  # not reaped: its PID is still its own
            await end_group(run.process.pid, self.kill_grace)
        await run.process.wait()

    async def _end_rest(self, run: _Run) -> None:
        """The main process is over: end what it left behind (a background child, a
        daemon), so nothing of a run outlives it. Never raises."""
        try:
            await self._containment.end(run.occurrence.id, self.kill_grace)
        except Exception:
            log.exception("stopping what occurrence %s left failed", run.occurrence.id)

    async def cancel(self, occurrence_id: int, reason: str) -> bool:
        """Stop a run this dispatcher started; its outcome is recorded as cancelled."""
        run = self._runs.get(occurrence_id)
        if run is None:
            return False
        run.cancel_reason = reason
        try:
            await self._terminate(run)
        except Exception:
            log.exception("stopping occurrence %s failed", occurrence_id)
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
        await self._containment.shutdown(self.kill_grace)

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
