"""A SQLite file's request bell: how a command wakes the engine that holds the file's lease.

A run-now left by another process waits for the engine's next scan; at a tick of a second
that is up to a second. The engine could look for new commits between ticks, but a timer
that wakes ten times a second costs an idle engine more than the rest of its rest. So the
lease holder listens on a datagram socket named after the database file (its device and
inode, whatever path reaches it), and a command that leaves a request sends one byte to it
after its commit. Nothing listens, or the datagram is lost: the next tick takes the
request, as before. A datagram only wakes the engine, which then reads what is stored.

Linux's abstract socket names are used (no file to leave behind when a process is killed,
nothing to clean up); the sender's user is checked from the kernel's credentials, so only
the user's own processes (or root's) can wake the engine. Abstract names belong to a
network namespace: a container sharing the file but not the host's network, like any
system but Linux, has no bell, and its requests wait for the tick."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import sys
from collections.abc import Callable
from pathlib import Path

_CREDENTIALS = struct.calcsize("3i")  # struct ucred: pid, uid, gid
# After a ring the bell is not listened to for this long (what comes meanwhile waits in
# the socket, or is dropped when it is full): a flood of datagrams wakes the engine at most
# 20 times a second, not once per datagram.
REST_S = 0.05
DRAINED_AT_MOST = 1024  # datagrams read per wake


def address(path: Path) -> bytes | None:
    """The bell's name for the database file at `path`; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"\0tickui-requests-{st.st_dev:x}-{st.st_ino:x}".encode()


def ring(path: Path) -> None:
    """Wake whoever listens for `path`'s requests, if anyone does; never fails, never waits."""
    name = address(path)
    if name is None:
        return
    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        sock.setblocking(False)
        sock.sendto(b"!", name)


class Bell:
    """The listening side: at most one process per file (the first to bind the name)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: Callable[[], None] | None = None
        self._resting: asyncio.TimerHandle | None = None
        self.ignored = 0  # datagrams from another user's processes, dropped

    @property
    def listening(self) -> bool:
        return self._sock is not None

    def listen(self, listener: Callable[[], None] | None) -> None:
        """Call `listener` in the loop at each ring; None stops listening. When another
        process holds the name, nothing is bound: calling again tries again."""
        self._listener = listener
        if listener is None:
            self.close()
            return
        if self._sock is not None:
            return
        name = address(self._path)
        if name is None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            sock.bind(name)
        except OSError:
            sock.close()
            return
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._heard)
        self._sock = sock

    def _heard(self) -> None:
        """Drain what came; ring once for all of it, if any came from the file's owner."""
        sock = self._sock
        if sock is None:
            return
        ours = False
        me = os.getuid()
        for _ in range(DRAINED_AT_MOST):
            try:
                _, ancdata, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(_CREDENTIALS))
            except OSError:  # nothing more to read (or the socket closed meanwhile)
                break
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    _pid, uid, _gid = struct.unpack("3i", data[:_CREDENTIALS])
                    if uid in (me, 0):
                        ours = True
                    else:
                        self.ignored += 1
        if self._loop is not None:
            self._loop.remove_reader(sock.fileno())
            self._resting = self._loop.call_later(REST_S, self._rested, sock)
        if ours and self._listener is not None:
            self._listener()

    def _rested(self, sock: socket.socket) -> None:
        self._resting = None
        if self._sock is sock and self._loop is not None:
            self._loop.add_reader(sock.fileno(), self._heard)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._resting is not None:
            self._resting.cancel()
            self._resting = None
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(sock.fileno())
        sock.close()
