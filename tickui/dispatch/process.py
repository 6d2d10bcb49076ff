"""The process runner the local dispatcher and the Kafka worker share: one run's process
in its own group and session (cwd, env, an optional start gate), every descendant
contained (containment/), output into a BoundedLog, a timeout, and the outcome
classified as the event log names it. Callers decide what the run is for and where its
events go; nothing here knows about occurrences, stores or Kafka."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickui.common.timeutil import MICROS, format_duration
from tickui.dispatch.containment import Containment, end_group
from tickui.dispatch.output import (
    HEAD_BYTES_DEFAULT,
    TAIL_BYTES_DEFAULT,
    BoundedLog,
    OutputHealth,
    OutputPump,
)
from tickui.model.occurrence import RUN_CANCELED, RUN_COMPLETED, RUN_FAILED, bound

log = logging.getLogger("tickui.dispatch")

# The start gate: a tiny sh waits for one line on its stdin (the gate pipe), then gives the
# command /dev/null as stdin, as ungated runs get, and execs it (same pid, group and env);
# EOF instead of the line ends it with 125, the command unrun.
GATE = ("/bin/sh", "-c", 'read -r _ || exit 125; exec </dev/null; exec "$@"', "tickui-gate")


@dataclass
class ProcessRun:
    """One started process. `key` names it in the containment (unique per runner); `tag`
    is the caller's (the occurrence, the run command)."""

    key: int
    process: asyncio.subprocess.Process
    run_id: str
    log_path: Path
    sink: BoundedLog | None = None
    output: OutputPump | None = None
    cancel_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    gate: int | None = None  # write end of the start gate, while the command waits on it
    tag: Any = None


def open_gate(run: ProcessRun) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        try:
            os.write(gate, b"go\n")
        finally:
            os.close(gate)


def close_gate(run: ProcessRun) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        os.close(gate)


def check_program(program: str, cwd: str | None, env: Mapping[str, str]) -> None:
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


class ProcessRunner:
    """Starts, contains, times out and ends runs' processes. Never the place where a
    run's events are recorded: `outcome` only says what they are."""

    def __init__(
        self,
        kill_grace: float = 3.0,
        head_bytes: int = HEAD_BYTES_DEFAULT,
        tail_bytes: int = TAIL_BYTES_DEFAULT,
        health: OutputHealth | None = None,
    ) -> None:
        self.kill_grace = kill_grace
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.health = health if health is not None else OutputHealth()
        self.containment = Containment()  # every descendant of a run ends with it

    async def spawn(
        self,
        key: int,
        argv: Sequence[str],
        *,
        cwd: str | None,
        env: dict[str, str],
        log_path: Path,
        gated: bool = False,
        tag: Any = None,
        marker: Mapping[str, str] | None = None,
    ) -> ProcessRun:
        """Start one process; on any failure nothing is left open and the error is raised.

        `gated`: the process is created, but waits (in a tiny `sh`, before it execs the
        command) until `open_gate` says go, so a check can come after the fork, right
        before the command runs; `close_gate` instead ends it unrun. `marker`: the
        TICKUI_* entries of `env` that name this run; given, the run is tracked (its
        descendants contained) before this returns."""
        self.containment.spawning += 1
        try:
            run = await self._spawn(key, argv, cwd, env, log_path, gated, tag)
            if marker is not None:
                self.track(run, marker)
            return run
        finally:
            self.containment.spawning -= 1

    async def _spawn(
        self,
        key: int,
        argv: Sequence[str],
        cwd: str | None,
        env: dict[str, str],
        log_path: Path,
        gated: bool,
        tag: Any,
    ) -> ProcessRun:
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        sink: BoundedLog | None = None
        read_end = write_end = gate_read = gate_write = -1
        try:
            sink = BoundedLog(log_path, self.head_bytes, self.tail_bytes, self.health)
            read_end, write_end = os.pipe()  # both close-on-exec; the child gets a dup
            command = list(argv)
            if gated:
                check_program(command[0], cwd, env)  # as exec would refuse it
                gate_read, gate_write = os.pipe()
                command = [*GATE, *command]
            process = await asyncio.create_subprocess_exec(
                *command,
                cwd=cwd or None,
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
        run = ProcessRun(key, process, f"run-{uuid.uuid4().hex[:16]}", log_path, sink, tag=tag)
        run.gate = gate_write if gate_write >= 0 else None
        try:
            run.output = OutputPump(asyncio.get_running_loop(), read_end, sink)
        except Exception:  # the run goes on; its output is not kept
            log.exception("cannot read the output of run %s", key)
            with contextlib.suppress(OSError):
                os.close(read_end)
            sink.close()
        return run

    def track(self, run: ProcessRun, marker: Mapping[str, str]) -> None:
        """Follow the run's descendants (`marker`: the TICKUI_* entries of its env).
        Never raises: a run that cannot be followed is ended by its group."""
        try:
            pipe = run.output.fd if run.output is not None else None
            self.containment.follow(run.key, marker, run.process.pid, pipe)
        except Exception:
            log.exception("cannot track the processes of run %s", run.key)

    async def abort(self, run: ProcessRun) -> None:
        """The gated process must not run its command: close the gate, end what is left."""
        close_gate(run)
        if self.containment.knows(run.key):
            await self.containment.end(run.key, 0)
        else:
            await end_group(run.process.pid, 0)
        await run.process.wait()
        await self.finish_output(run)

    async def wait(self, run: ProcessRun, timeout: int | None) -> bool:
        """Wait for the main process (up to `timeout` micros, then end it): True if timed out."""
        try:
            await asyncio.wait_for(run.process.wait(), timeout / MICROS if timeout else None)
        except TimeoutError:
            await self.terminate(run)
            return True
        return False

    @staticmethod
    async def finish_output(run: ProcessRun) -> None:
        pump, run.output = run.output, None
        if pump is not None:
            await pump.finish()

    def outcome(
        self, run: ProcessRun, timeout: int | None, timed_out: bool
    ) -> tuple[str, dict[str, Any]]:
        """The outcome's event type and payload (exit_code, error_code, detail)."""
        code = run.process.returncode
        payload: dict[str, Any] = {"exit_code": code}
        if run.cancel_reason is not None:
            payload["detail"] = run.cancel_reason
            return RUN_CANCELED, payload
        if timed_out:
            payload.update(
                error_code="TIMEOUT", detail=f"timed out after {format_duration(timeout or 0)}"
            )
            return RUN_FAILED, payload
        if code == 0:
            return RUN_COMPLETED, payload
        last = run.sink.last_line() if run.sink is not None else ""
        said = f": {last}" if last else ""
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            payload.update(error_code="KILLED", detail=bound(f"killed by {name}{said}"))
        else:
            payload.update(error_code="EXIT_NONZERO", detail=bound(f"exit {code}{said}"))
        return RUN_FAILED, payload

    async def terminate(self, run: ProcessRun) -> None:
        """End the run's whole tree (its process group as a group, every descendant that
        left it): SIGTERM, then SIGKILL after the grace. See containment.py."""
        if self.containment.knows(run.key):
            await self.containment.end(run.key, self.kill_grace)
        elif run.process.returncode is None:  # not reaped: its PID is still its own
            await end_group(run.process.pid, self.kill_grace)
        await run.process.wait()

    async def end_rest(self, run: ProcessRun) -> None:
        """The main process is over: end what it left behind (a background child, a
        daemon), so nothing of a run outlives it. Never raises."""
        try:
            await self.containment.end(run.key, self.kill_grace)
        except Exception:
            log.exception("stopping what run %s left failed", run.key)

    async def cancel(self, run: ProcessRun, reason: str) -> None:
        """Mark the run cancelled and end its tree; its watcher reports the outcome."""
        run.cancel_reason = reason
        try:
            await self.terminate(run)
        except Exception:
            log.exception("stopping run %s failed", run.key)

    async def shutdown(self) -> None:
        await self.containment.shutdown(self.kill_grace)
