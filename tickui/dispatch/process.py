"""The process runner the local dispatcher and the Kafka worker share: one run's process
in its own group and session (cwd, env, an optional start gate), every descendant
contained (containment/), output into a BoundedLog, a timeout, and the outcome
classified as the event log names it. Callers decide what the run is for and where its
events go; nothing here knows about occurrences, stores or Kafka.

Each run is started through its run supervisor (tickui.supervisor): the supervisor keeps
the start gate, writes the bounded log, ends the command's whole tree on SIGTERM (after
the kill grace) or when the runner's lease file runs out, and records each step in the
run's journal, so a run ends and its end is known even when this process freezes or
dies. The outcome is read from that journal.

Supervisors are forked by a supervisor server (tickui.supervisor.server) the runner
starts at its first run: a fork of an interpreter that has them imported costs a small
part of starting a new one. When the server cannot be started or cannot fork, a run's
supervisor is started as a program of its own instead."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tickui.common.procs import stop_reading
from tickui.common.timeutil import MICROS, format_duration
from tickui.dispatch.containment import Containment
from tickui.dispatch.journals import (
    journal_exit_code,
    journal_outcome,
)
from tickui.dispatch.output import HEAD_BYTES_DEFAULT, TAIL_BYTES_DEFAULT, OutputHealth
from tickui.model.occurrence import RUN_CANCELED, RUN_FAILED
from tickui.supervisor import journal as j
from tickui.supervisor.client import ForkUnknown, ServedProcess, ServerGone, SupervisorServer
from tickui.supervisor.launch import supervisor_args, supervisor_command
from tickui.supervisor.lease import write_lease
from tickui.supervisor.main import KILL_WAIT, LEASE_CHECK, OUTPUT_FAILING, OUTPUT_WRITTEN_AGAIN

log = logging.getLogger("tickui.dispatch")

SAID = "tickui supervisor: "
NOTES_MAX = 64 * 1024  # of a supervisor's stderr kept for its lines (it says little)
GATE_WAIT = 10.0  # seconds a supervisor gets to end after its gate was closed
SERVER_RETRY = 30.0  # seconds after a server failed to start before another is tried
# the server follows its supervisors by pidfd (Linux 5.3) and passes fds over a socket
FORK_SERVER = sys.platform.startswith("linux")


@dataclass
class ProcessRun:
    """One started run: `process` is its supervisor. `key` names it in the containment
    (unique per runner); `tag` is the caller's (the occurrence, the run command)."""

    key: int
    process: asyncio.subprocess.Process | ServedProcess
    run_id: str
    log_path: Path
    journal_path: Path
    notes: SupervisorNotes | None = None
    cancel_reason: str | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    gate: int | None = None  # write end of the start gate, while the command waits on it
    tag: Any = None
    record: dict[str, Any] | None = None  # the journal's last record, once the run ended


class SupervisorNotes:
    """Reads a supervisor's stderr in the event loop: its output-health lines feed the
    runner's OutputHealth (one warning per outage, as when tickui wrote the logs itself);
    anything else it says is logged."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, health: OutputHealth, name: str
    ) -> None:
        self.loop = loop
        self.fd: int | None = fd
        self.health = health
        self.name = name
        self.pending = b""
        self.failing = False  # this run's output could not all be written
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        while self.fd is not None:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self.close()
                break
            self.pending = (self.pending + data)[-NOTES_MAX:]
            *lines, self.pending = self.pending.split(b"\n")
            for line in lines:
                self._take(line.decode("utf-8", "replace"))

    def _take(self, line: str) -> None:
        text = line.removeprefix(SAID)
        if text.startswith(OUTPUT_FAILING):
            self.failing = True
            self.health.failed(0, text.removeprefix(OUTPUT_FAILING))
        elif text.startswith(OUTPUT_WRITTEN_AGAIN):
            lost = text.removeprefix(OUTPUT_WRITTEN_AGAIN)
            if self.health.problem is not None and lost.isdigit():
                self.health.lost += int(lost)
            self.health.recovered()
        elif text.strip():
            log.warning("run %s: %s", self.name, text.strip()[:500])

    def finish(self) -> None:
        """The supervisor has exited: take the rest of what it said."""
        self._readable()
        if self.pending:
            self._take(self.pending.decode("utf-8", "replace"))
            self.pending = b""
        self.close()

    def close(self) -> None:
        fd, self.fd = self.fd, None
        stop_reading(self.loop, fd)


def open_gate(run: ProcessRun) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        try:
            os.write(gate, b"go\n")
        except BrokenPipeError:
            # The supervisor ended before the go (it could not open the log, say): its
            # command never ran, and its watcher records how it ended, as for any start
            # that failed. Not a failure of the whole batch.
            pass
        finally:
            os.close(gate)


def close_gate(run: ProcessRun) -> None:
    gate, run.gate = run.gate, None
    if gate is not None:
        os.close(gate)


def check_arguments(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse what exec cannot take, as the subprocess module does (a supervisor forked by
    the server would otherwise pass it on, and the command fail with its own exit code)."""
    if any("\0" in arg for arg in argv):
        raise ValueError("embedded null byte")
    for name, value in env.items():
        if "=" in name:
            raise ValueError("illegal environment variable name")
        if "\0" in name or "\0" in value:
            raise ValueError("embedded null byte")


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
    run's events are recorded: `outcome` only says what they are.

    `lease`: the lease file every run is fenced by, once `renew` gave it a deadline
    (before that, and without one, runs are not fenced). `fork_server`: supervisors are
    forked by a supervisor server (else each is started as a program of its own)."""

    def __init__(
        self,
        kill_grace: float = 3.0,
        head_bytes: int = HEAD_BYTES_DEFAULT,
        tail_bytes: int = TAIL_BYTES_DEFAULT,
        health: OutputHealth | None = None,
        lease: Path | None = None,
        fork_server: bool = FORK_SERVER,
    ) -> None:
        self.kill_grace = kill_grace
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.health = health if health is not None else OutputHealth()
        self.lease = lease
        self.lease_deadline: float | None = None  # time.monotonic(), as last written
        self.containment = Containment()  # a supervisor that is killed leaves no orphan
        self.fork_server = fork_server
        self.server: SupervisorServer | None = None
        self._server_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._server_failed_at: float | None = None  # time.monotonic() of the last failure
        self._fallback_said = False

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
        journal_path: Path | None = None,
    ) -> ProcessRun:
        """Start one run's supervisor; on any failure nothing is left open and the error
        is raised.

        `gated`: the supervisor waits until `open_gate` says go, so a check can come after
        the fork, right before the command runs; `close_gate` instead ends it unrun
        (recorded `not_started`). `marker`: the TICKUI_* entries of `env` that name this
        run; given, the run is tracked (its descendants contained) before this returns.
        `journal_path`: where its journal goes (default: beside the log, `.journal`)."""
        self.containment.spawning += 1
        try:
            run = await self._spawn(key, argv, cwd, env, log_path, gated, tag, journal_path)
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
        journal_path: Path | None,
    ) -> ProcessRun:
        log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        journal = journal_path if journal_path is not None else log_path.with_suffix(".journal")
        journal.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        command = list(argv)
        check_arguments(command, env)
        check_program(command[0], cwd, env)  # refused here, as exec would, not in the run
        gate_read = gate_write = notes_read = notes_write = -1
        try:
            gate_read, gate_write = os.pipe()
            notes_read, notes_write = os.pipe()
            args = supervisor_args(
                command,
                journal=journal,
                log=log_path,
                lease=self.lease if self.lease_deadline is not None else None,
                lease_deadline=self.lease_deadline if self.lease is not None else None,
                grace=self.kill_grace,
                head=self.head_bytes,
                tail=self.tail_bytes,
            )
            try:
                process = await self._start_supervisor(args, cwd, env, gate_read, notes_write)
            except ForkUnknown as exc:
                # The server ended after it was asked: a supervisor it forked may wait on
                # this gate. Another started beside it would share its gate and journal.
                os.close(gate_read)
                gate_read = -1
                if not await _unread(gate_write):
                    raise OSError(
                        errno.EIO, f"its supervisor server ended while forking it ({exc})"
                    ) from None  # closing the gate (below) ends that one unrun
                os.close(gate_write)
                gate_read, gate_write = os.pipe()  # none was forked: one as a program
                process = await self._start_supervisor(
                    args, cwd, env, gate_read, notes_write, forked=False
                )
        except BaseException:
            for fd in (gate_read, gate_write, notes_read, notes_write):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            raise
        os.close(gate_read)
        os.close(notes_write)
        run = ProcessRun(key, process, f"run-{uuid.uuid4().hex[:16]}", log_path, journal, tag=tag)
        run.gate = gate_write
        try:
            loop = asyncio.get_running_loop()
            run.notes = SupervisorNotes(loop, notes_read, self.health, log_path.name)
        except Exception:  # the run goes on; what its supervisor says is not read
            log.exception("cannot read what the supervisor of run %s says", key)
            with contextlib.suppress(OSError):
                os.close(notes_read)
        if not gated:
            open_gate(run)
        return run

    async def _start_supervisor(
        self,
        args: list[str],
        cwd: str | None,
        env: dict[str, str],
        gate: int,
        notes: int,
        forked: bool = True,
    ) -> asyncio.subprocess.Process | ServedProcess:
        """The run's supervisor, forked by the server (unless not `forked`), else started
        as a program. Raises ForkUnknown when the server ended once asked."""
        if forked and self.fork_server:
            process = await self._fork_supervisor(args, cwd, env, gate, notes)
            if process is not None:
                return process
        return await asyncio.create_subprocess_exec(
            *supervisor_command(args),
            cwd=cwd or None,
            env=env,
            stdin=gate,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=notes,
            start_new_session=True,
        )

    async def _fork_supervisor(
        self, args: list[str], cwd: str | None, env: dict[str, str], gate: int, notes: int
    ) -> ServedProcess | None:
        """Forked by the server; None when it cannot be (said once). A cwd that cannot
        be entered raises as it does for a supervisor started as a program."""
        directory = -1
        if cwd:
            directory = os.open(cwd, getattr(os, "O_PATH", 0) | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if directory >= 0 and not os.access(cwd or ".", os.X_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), cwd)
            server = await self._server()
            if server is None:
                return None
            fds = [gate, notes] if directory < 0 else [gate, notes, directory]
            try:
                return await server.fork(args, env, fds)
            except ForkUnknown as exc:
                self._fell_back(f"it ended while forking one: {exc}")
                raise
            except (OSError, ServerGone, TimeoutError) as exc:
                self._fell_back(f"it could not fork one: {exc}")
                return None
        finally:
            if directory >= 0:
                os.close(directory)

    async def _server(self) -> SupervisorServer | None:
        """The running server of this loop, started if there is none (a dead one is
        replaced); None if it cannot be started."""
        loop = asyncio.get_running_loop()
        if self._server_lock is None or self._server_lock[0] is not loop:
            self._server_lock = (loop, asyncio.Lock())  # one start at a time, in this loop
        async with self._server_lock[1]:
            server = self.server
            if server is not None and server.alive and server.loop is loop:
                return server
            if server is not None:
                server.end()
                self.server = None
            failed = self._server_failed_at
            if failed is not None and time.monotonic() < failed + SERVER_RETRY:
                return None
            try:
                self.server = await SupervisorServer.start()
            except Exception as exc:
                self._server_failed_at = time.monotonic()
                self._fell_back(f"it could not be started: {exc}")
                return None
            return self.server

    def _fell_back(self, why: str) -> None:
        if not self._fallback_said:
            self._fallback_said = True
            log.warning("supervisor server: %s; run supervisors are started as programs", why)

    def renew(self, deadline: float) -> None:
        """Runs end once time.monotonic() passes `deadline` (unless renewed again): written
        to the lease file every supervisor reads. Never raises (a lease that cannot be
        written stays at its old deadline, and the runs are fenced then)."""
        if self.lease is None:
            return
        try:
            write_lease(str(self.lease), deadline)
        except OSError as exc:
            log.warning("cannot renew the runs' lease %s: %s", self.lease, exc.strerror)
            return
        self.lease_deadline = deadline

    def track(self, run: ProcessRun, marker: Mapping[str, str]) -> None:
        """Follow the run's descendants (`marker`: the TICKUI_* entries of its env), for
        a supervisor that is killed before it ended them. Never raises."""
        try:
            self.containment.follow(run.key, marker, run.process.pid, None)
        except Exception:
            log.exception("cannot track the processes of run %s", run.key)

    async def abort(self, run: ProcessRun) -> None:
        """The gated run must not run its command: close the gate (its supervisor records
        it not started and exits), end what is left."""
        close_gate(run)
        try:
            await asyncio.wait_for(asyncio.shield(run.process.wait()), GATE_WAIT)
        except TimeoutError:
            await self._kill(run)
        await self.finish(run)

    async def wait(self, run: ProcessRun, timeout: int | None) -> bool:
        """Wait for the run to end (up to `timeout` micros, then end it): True if timed out."""
        try:
            await asyncio.wait_for(
                asyncio.shield(run.process.wait()), timeout / MICROS if timeout else None
            )
        except TimeoutError:
            await self.terminate(run)
            return True
        return False

    async def finish(self, run: ProcessRun) -> None:
        """The supervisor has exited: take what it said and its journal's last record."""
        notes, run.notes = run.notes, None
        if notes is not None:
            notes.finish()
        if run.record is None:
            run.record = await asyncio.to_thread(j.read_journal, str(run.journal_path))
        if notes is not None and not notes.failing and (run.record or {}).get("state") == j.ENDED:
            self.health.recovered()  # this run's output and end were written in full

    def exit_code(self, run: ProcessRun) -> int | None:
        """The command's exit code (negative: the signal that ended it), as the journal
        records it; the supervisor's status when it recorded no end; None when the
        command never ran."""
        return journal_exit_code(run.record, run.process.returncode)

    def outcome(
        self, run: ProcessRun, timeout: int | None, timed_out: bool
    ) -> tuple[str, dict[str, Any]]:
        """The outcome's event type and payload (exit_code, error_code, detail)."""
        payload: dict[str, Any] = {"exit_code": self.exit_code(run)}
        if run.cancel_reason is not None:
            payload["detail"] = run.cancel_reason
            return RUN_CANCELED, payload
        if timed_out:
            payload.update(
                error_code="TIMEOUT", detail=f"timed out after {format_duration(timeout or 0)}"
            )
            return RUN_FAILED, payload
        return journal_outcome(run.record, run.process.returncode, run.log_path)

    async def terminate(self, run: ProcessRun) -> None:
        """End the run's whole tree: SIGTERM to its supervisor, which signals the tree
        and SIGKILLs what is left after the grace. A supervisor that does not end by then
        (frozen) is killed with everything it contains."""
        if run.process.returncode is None:  # not reaped: its PID is still its own
            with contextlib.suppress(ProcessLookupError):
                run.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(
                    asyncio.shield(run.process.wait()),
                    self.kill_grace + KILL_WAIT + 2 * LEASE_CHECK + 1.0,
                )
            except TimeoutError:
                log.warning("the supervisor of run %s did not end; killing the run", run.key)
                await self._kill(run)
        await run.process.wait()

    async def _kill(self, run: ProcessRun) -> None:
        if self.containment.knows(run.key):
            await self.containment.end(run.key, 0)
        with contextlib.suppress(ProcessLookupError):
            run.process.kill()
        await run.process.wait()

    async def end_rest(self, run: ProcessRun) -> None:
        """The supervisor is over: end anything of the run it did not (it was killed),
        so nothing of a run outlives it. Never raises."""
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
        server, self.server = self.server, None
        if server is not None:
            try:
                await server.close()
            except Exception:
                log.exception("ending the supervisor server failed")
        if self.lease is not None:  # its runs are over: no one reads it any more
            with contextlib.suppress(OSError):
                self.lease.unlink()


async def _unread(write_end: int, wait: float = 1.0) -> bool:
    """Whether no process holds the read end of the pipe `write_end` writes to (poll says
    POLLERR on a write end with no reader), looked at for up to `wait` seconds: the fds
    a dead server held, or that were in flight to it, are let go as it is reaped."""
    poller = select.poll()
    poller.register(write_end, 0)
    end = time.monotonic() + wait
    while True:
        if any(events & select.POLLERR for _, events in poller.poll(0)):
            return True
        if time.monotonic() >= end:
            return False
        await asyncio.sleep(0.02)
