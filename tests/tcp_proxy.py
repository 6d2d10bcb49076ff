"""A TCP proxy for tests, in a thread of its own: every connection it accepts is forwarded
to one upstream port on 127.0.0.1, and the connections of one process can be cut off while
every other client goes on. A client is told apart by its own socket: the proxy finds the
inode of the peer's end in /proc/net/tcp and looks for it among that process's open files
(Linux only), so no client needs to be told anything.

Two ways to cut a process off:
- ``drop``: its connections are closed and new ones closed as soon as they are accepted
  (a peer that went away: the client sees it at once and keeps reconnecting);
- ``hold``: nothing more is forwarded either way and new connections are accepted but never
  answered (a network partition: the client only sees its requests time out). ``heal()``
  then forwards what was held, as TCP would once the network is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path

DROP, HOLD = "drop", "hold"


def peer_inode(peer_port: int, port: int) -> str | None:
    """Inode of the IPv4 socket on 127.0.0.1 connected from `peer_port` to `port`."""
    try:
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
        if int(local, 16) == peer_port and int(remote, 16) == port:
            return fields[9]
    return None


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets process `pid` has open."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                found.add(link[8:-1])
    return found


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, inode: str | None, client: asyncio.StreamWriter) -> None:
        self.inode = inode
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.flowing = asyncio.Event()
        self.flowing.set()

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.close()


class TcpProxy:
    """``with TcpProxy(upstream_port) as proxy:`` listens on ``proxy.port``;
    ``cut(pid, DROP | HOLD)`` and ``heal()`` are called from any thread."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self.refused = 0  # connections of the cut-off process closed or held at once
        self._cut: tuple[int, str] | None = None
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="tcp-proxy", daemon=True)

    # ---- from the test's thread ----------------------------------------------------------

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10) or self._server is None:
            raise AssertionError("the TCP proxy did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def cut(self, pid: int, how: str) -> int:
        """Cut process `pid` off (DROP or HOLD); how many of its connections were live."""
        assert how in (DROP, HOLD), how
        return self._call(self._cut_off, pid, how)

    def heal(self) -> None:
        """Forward everything again, what was held first."""
        self._call(self._heal)

    def _call(self, fn, *args):
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._in_loop(fn, *args), self._loop).result(10)

    @staticmethod
    async def _in_loop(fn, *args):
        return fn(*args)

    # ---- in the proxy's loop -------------------------------------------------------------

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        try:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
        finally:
            self._ready.set()
        async with self._server:
            await self._stopped.wait()
            self._server.close()
            for link in list(self._links):
                link.close()

    def _cut_off(self, pid: int, how: str) -> int:
        self._cut = (pid, how)
        owned = socket_inodes(pid)
        hit = [link for link in self._links if link.inode in owned]
        for link in hit:
            if how == DROP:
                link.close()
            else:
                link.flowing.clear()
        return len(hit)

    def _heal(self) -> None:
        self._cut = None
        for link in self._links:
            link.flowing.set()

    def _cut_off_now(self, inode: str | None) -> str | None:
        """How a new connection is cut (DROP, HOLD), or None when it is forwarded."""
        if self._cut is None or inode is None:
            return None
        pid, how = self._cut
        return how if inode in socket_inodes(pid) else None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the proxy stops
            await self._forward(reader, writer)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        link = _Link(peer_inode(peer_port, self.port), writer)
        how = self._cut_off_now(link.inode)
        if how == DROP:
            self.refused += 1
            writer.close()
            return
        if how == HOLD:
            self.refused += 1
            link.flowing.clear()
        self._links.add(link)
        try:
            try:
                up_reader, link.upstream = await asyncio.open_connection("127.0.0.1", self.upstream)
            except OSError:
                return
            await asyncio.gather(
                self._pump(link, reader, link.upstream), self._pump(link, up_reader, writer)
            )
        finally:
            link.close()
            self._links.discard(link)

    @staticmethod
    async def _pump(
        link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while data := await reader.read(65536):
                await link.flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            link.close()
