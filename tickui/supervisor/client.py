"""The starter's side of a supervisor server (tickui.supervisor.server): starts it, asks
it for supervisors and follows them in the event loop, never blocking it.

A forked supervisor is the server's child, not ours: its exit status comes from the
server. If the server dies, the supervisors it forked go on (they need nothing of it);
each is then watched through its pidfd, and its status is taken when it was re-parented
to us (we are a subreaper), else it stays unknown (None) and the run's journal tells.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import marshal
import os
import signal
import socket
from collections.abc import Mapping, Sequence

from tickui.common.procs import stop_reading
from tickui.supervisor.launch import server_argv
from tickui.supervisor.server import EXITED, FAILED, STARTED

REPLY_WAIT = 10.0  # seconds a fork may take before the server is taken for stuck
SERVER_END_WAIT = 2.0  # seconds the server gets to end at EOF before it is killed


class ServerGone(Exception):
    """The server ended (or was ended) before it answered."""


class ForkUnknown(ServerGone):
    """The server ended (or was ended) after it was asked to fork and before it answered:
    a supervisor may have been forked for the request, unknown to the caller."""


class ServedProcess:
    """A supervisor forked by the server, with what the runner uses of an
    asyncio.subprocess.Process: pid, returncode, wait(), send_signal(), kill()."""

    def __init__(self, pid: int, pidfd: int | None, loop: asyncio.AbstractEventLoop) -> None:
        self.pid = pid
        self.pidfd = pidfd  # signals reach this process only, even once its pid is reused
        self.returncode: int | None = None
        self.ended = False  # the status may stay unknown (None) when the server died
        self._loop = loop
        self._done = asyncio.Event()

    async def wait(self) -> int | None:
        await self._done.wait()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.ended:
            raise ProcessLookupError(errno.ESRCH, os.strerror(errno.ESRCH))
        if self.pidfd is not None:
            signal.pidfd_send_signal(self.pidfd, sig)
        else:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def exited(self, code: int | None) -> None:
        if self.ended:
            return
        self.ended = True
        self.returncode = code
        self._close_pidfd()
        self._done.set()

    def orphaned(self) -> None:
        """The server is gone: watch this process through its pidfd."""
        if self.ended:
            return
        if self.pidfd is None:
            try:
                self.pidfd = os.pidfd_open(self.pid)
            except OSError:  # gone already (or no pidfds): its journal tells
                self.exited(None)
                return
        self._loop.add_reader(self.pidfd, self._pidfd_readable)

    def _pidfd_readable(self) -> None:
        code = None
        try:
            found = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG)
            if found is not None:
                killed = found.si_code in (os.CLD_KILLED, os.CLD_DUMPED)
                code = -found.si_status if killed else found.si_status
        except OSError:  # not our child (nobody's subreaper here): unknown
            pass
        self.exited(code)

    def _close_pidfd(self) -> None:
        fd, self.pidfd = self.pidfd, None
        stop_reading(self._loop, fd)


class SupervisorServer:
    """One running server and the supervisors it forked that have not ended yet."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        process: asyncio.subprocess.Process,
    ) -> None:
        self.loop = loop
        self.sock: socket.socket | None = sock
        self.process = process
        self.pending: dict[int, asyncio.Future[ServedProcess]] = {}
        self.running: dict[int, ServedProcess] = {}
        self.ids = itertools.count(1)
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    @classmethod
    async def start(cls) -> SupervisorServer:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            process = await asyncio.create_subprocess_exec(
                *server_argv(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                # a group of its own in our session: not signalled with our terminal's
                # group, and not taken for a run's orphan (those leave our session)
                process_group=0,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(loop, ours, process)

    @property
    def alive(self) -> bool:
        return self.sock is not None

    async def fork(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        fds: Sequence[int],
    ) -> ServedProcess:
        """A supervisor running `args` (its command line after the interpreter's), the
        command's environment `env`; `fds`: its stdin, its stderr and, optionally, a
        directory fd of its cwd. Raises OSError when the fork failed, ServerGone or
        TimeoutError when the server did not answer (it is then killed: a supervisor it
        forked for this request before it died is still returned, never left running
        unknown beside the one a caller would start instead)."""
        if self.sock is None:
            raise ServerGone("the supervisor server has ended")
        request_id = next(self.ids)
        env_items = [(os.fsencode(k), os.fsencode(v)) for k, v in env.items()]
        data = marshal.dumps((request_id, list(args), env_items))
        answer: asyncio.Future[ServedProcess] = self.loop.create_future()
        self.pending[request_id] = answer
        try:
            try:
                await self._send(data, fds)
            except TimeoutError:  # nothing was sent
                self.end(kill=True)
                raise
            try:
                return await asyncio.wait_for(asyncio.shield(answer), REPLY_WAIT)
            except ServerGone as exc:
                raise ForkUnknown(str(exc)) from None
            except TimeoutError:
                # stuck: killed, and what it said before dying read up to its EOF
                self._kill_process()
                try:
                    return await asyncio.wait_for(answer, SERVER_END_WAIT)
                except ServerGone as exc:
                    raise ForkUnknown(str(exc)) from None
                except TimeoutError:
                    self._lost()
                    raise ForkUnknown("the supervisor server did not answer") from None
        finally:
            self.pending.pop(request_id, None)

    async def _send(self, data: bytes, fds: Sequence[int]) -> None:
        while True:
            if self.sock is None:
                raise ServerGone("the supervisor server has ended")
            try:
                socket.send_fds(self.sock, [data], list(fds))
                return
            except (BlockingIOError, InterruptedError):
                await self._writable()
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                    self._lost()
                    raise ServerGone("the supervisor server has ended") from exc
                raise

    async def _writable(self) -> None:
        assert self.sock is not None
        fd = self.sock.fileno()
        ready = self.loop.create_future()
        self.loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, REPLY_WAIT)
        finally:
            self.loop.remove_writer(fd)

    def _readable(self) -> None:
        while self.sock is not None:
            try:
                data, fds, _flags, _ = socket.recv_fds(self.sock, 4096, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data, fds = b"", []
            if not data:
                close_fds(fds)
                self._lost()
                return
            try:
                message = marshal.loads(data)
            except (EOFError, ValueError, TypeError):
                close_fds(fds)
                continue
            self._take(message, fds)

    def _take(self, message: tuple, fds: list[int]) -> None:
        kind = message[0]
        if kind == STARTED:
            _, request_id, pid = message
            process = ServedProcess(pid, fds[0] if fds else None, self.loop)
            close_fds(fds[1:])
            self.running[pid] = process
            answer = self.pending.get(request_id)
            if answer is not None and not answer.done():
                answer.set_result(process)
        elif kind == FAILED:
            _, request_id, code = message
            close_fds(fds)
            answer = self.pending.get(request_id)
            if answer is not None and not answer.done():
                text = os.strerror(code) if code else "the supervisor could not be forked"
                answer.set_exception(OSError(code, text))
        elif kind == EXITED:
            _, pid, code = message
            close_fds(fds)
            process = self.running.pop(pid, None)
            if process is not None:
                process.exited(code)

    def _lost(self) -> None:
        """EOF: the server is gone. What it forked goes on and is watched by pidfd."""
        sock, self.sock = self.sock, None
        if sock is None:
            return
        with contextlib.suppress(Exception):
            self.loop.remove_reader(sock.fileno())
        sock.close()
        for answer in self.pending.values():
            if not answer.done():
                answer.set_exception(ServerGone("the supervisor server has ended"))
        running, self.running = self.running, {}
        for process in running.values():
            process.orphaned()

    def end(self, kill: bool = False) -> None:
        """Close our end: the server ends at EOF (`kill`: at once), leaving its running
        supervisors to their work, followed by pidfd from here."""
        if kill:
            self._kill_process()
        self._lost()

    def _kill_process(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    async def close(self) -> None:
        self.end()
        try:
            await asyncio.wait_for(self.process.wait(), SERVER_END_WAIT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
