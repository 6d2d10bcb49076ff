"""The supervisor server: forks run supervisors from one long-lived interpreter that has
already imported them, so that a run costs a fork instead of a new interpreter.

    python -I -S -c SERVE_BOOT SOURCE_ROOT FD

FD is its end of a Unix SOCK_SEQPACKET socket pair with the process that started it (one
message per datagram, marshal-encoded, never blocking either side):

- request: (id, supervisor args, environment items as bytes pairs) with SCM_RIGHTS fds
  [gate read end, notes write end] or [..., directory fd of the cwd];
- reply `(STARTED, id, pid)` with the supervisor's pidfd, or `(FAILED, id, errno)`;
- `(EXITED, pid, status)` once a supervisor it forked has exited and been reaped
  (status: os.waitstatus_to_exitcode).

A forked supervisor gets the gate as stdin, /dev/null as stdout, the notes pipe as
stderr, the cwd, nothing else open, and runs tickui.supervisor.main with the given
environment for the command. It needs nothing of the server once forked: the server ends
at EOF on its socket (its starter closed it or died) and leaves running supervisors to
their work. It never becomes a subreaper, so what a killed supervisor leaves behind goes
to the starter's subreaper as before.
"""

from __future__ import annotations

import _signal as signal
import collections
import contextlib
import gc
import marshal
import os
import select
import socket
import sys

from tickui.supervisor.main import EXIT_START_FAILED, main

STARTED, FAILED, EXITED = "started", "failed", "exited"
MESSAGE_MAX = 1 << 20  # a request: the arguments and the command's environment
FDS_MAX = 3


def _noted(signum: int, frame: object) -> None:
    """SIGCHLD reaches the loop through the wakeup pipe."""


class Server:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.poller = select.poll()
        self.poller.register(self.wake_r, select.POLLIN)
        self.poller.register(self.sock.fileno(), select.POLLIN)
        # replies not yet sent: the starter may be frozen, and the server never waits on it
        self.outbox: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self.children: set[int] = set()

    def serve(self) -> int:
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _noted)
        for sig in (signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the starter's terminal is not its business
        while True:
            for fd, events in self.poller.poll():
                if fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError, InterruptedError):
                        os.read(self.wake_r, 512)
                    self.reap()
                    continue
                if events & select.POLLOUT:
                    self.flush()
                if events & ~select.POLLOUT and not self.take_requests():
                    return 0

    def take_requests(self) -> bool:
        """Serve what the socket holds; False at its EOF."""
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(self.sock, MESSAGE_MAX, FDS_MAX)
            except (BlockingIOError, InterruptedError):
                return True
            except OSError:
                return False
            if not data and not fds:
                return False
            self.serve_one(data, fds, flags)

    def serve_one(self, data: bytes, fds: list[int], flags: int) -> None:
        try:
            request_id, args, env_items = marshal.loads(data)
        except (EOFError, ValueError, TypeError):
            self.close_all(fds)
            return
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) < 2:
            self.close_all(fds)
            self.send((FAILED, request_id, 0))
            return
        try:
            pid = os.fork()
        except OSError as exc:
            self.close_all(fds)
            self.send((FAILED, request_id, exc.errno or 0))
            return
        if pid == 0:
            run_supervisor(fds, list(args), dict(env_items))  # never returns
        self.close_all(fds)
        self.children.add(pid)
        try:
            pidfd = [os.pidfd_open(pid)]  # not reaped yet: it is surely this child
        except (OSError, AttributeError):
            pidfd = []
        self.send((STARTED, request_id, pid), pidfd)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            self.children.discard(pid)
            self.send((EXITED, pid, os.waitstatus_to_exitcode(status)))

    def send(self, message: tuple, fds: list[int] | None = None) -> None:
        self.outbox.append((marshal.dumps(message), fds or []))
        self.flush()

    def flush(self) -> None:
        while self.outbox:
            data, fds = self.outbox[0]
            try:
                socket.send_fds(self.sock, [data], fds)
            except (BlockingIOError, InterruptedError):
                self.poller.modify(self.sock.fileno(), select.POLLIN | select.POLLOUT)
                return
            except OSError:  # the starter is gone: the EOF ends the server
                pass
            self.outbox.popleft()
            self.close_all(fds)
        self.poller.modify(self.sock.fileno(), select.POLLIN)

    @staticmethod
    def close_all(fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def run_supervisor(fds: list[int], args: list[str], env: dict[bytes, bytes]) -> None:
    """In the forked child: the supervisor's stdio, cwd and signals as an exec'd one has
    them, then its main; exits with its status."""
    status = EXIT_START_FAILED
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        gate, notes = fds[0], fds[1]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(gate, 0)
        os.dup2(null, 1)
        os.dup2(notes, 2)
        if len(fds) > 2:
            os.fchdir(fds[2])
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536)
        status = main(args, env=env)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else EXIT_START_FAILED
    except BaseException:
        status = EXIT_START_FAILED
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(status)


def serve(args: list[str]) -> int:
    """Serve on the socket whose fd is the one argument."""
    sock = socket.socket(fileno=int(args[0]))
    server = Server(sock)
    with contextlib.suppress(ImportError):
        import _ctypes  # noqa: F401  the supervisor's subreaper call: loaded once, here
    gc.freeze()  # what is here now is never collected: a fork's collections leave it shared
    return server.serve()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
