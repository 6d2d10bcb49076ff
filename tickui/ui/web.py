"""`tickui serve`: the dashboard in a browser, through textual-serve.

textual-serve runs the dashboard's command once per browser connection, as a child
process that Textual's web driver draws for the page; this module is the web server
around it, told in tickui's way: one line when it is up, one line a problem (never a
traceback, never the command it runs), and every session's dashboard told to quit when
the server stops.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import sys
from typing import Any

from aiohttp import web
from textual_serve.server import Server

from tickui.common.errors import BadInput, Unavailable
from tickui.common.redact import safe_text

SESSION_CLOSE = 60.0  # at stop, how long the sessions get to close their dashboards


class _OneLine(logging.Handler):
    """textual-serve's and aiohttp's complaints as one line each, redacted, without the
    traceback they log with."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"tickui: serve: {safe_text(record.getMessage())}", file=sys.stderr, flush=True)


class DashboardServer(Server):
    """textual-serve's server, quiet, titled tickui (the page never shows the command),
    its page pointing at the address the browser used, and the sessions it runs ended
    when it stops."""

    def __init__(self, command: str, host: str, port: int) -> None:
        super().__init__(command, host=host, port=port, title="tickui")
        self.sessions: set[asyncio.Task[Any]] = set()

    def initialize_logging(self) -> None:
        handler = _OneLine(logging.WARNING)
        for name in ("textual-serve", "aiohttp"):
            logger = logging.getLogger(name)
            logger.handlers[:] = [handler]
            logger.setLevel(logging.WARNING)
            logger.propagate = False

    async def on_startup(self, app: web.Application) -> None:
        return None  # no banner: serve() says where, once it listens

    async def handle_index(self, request: web.Request) -> Any:
        # The page's links and websocket go back to where the browser came from (with
        # --host 0.0.0.0, "0.0.0.0" would lead nowhere). The template is filled at once,
        # with nothing awaited in between, so another request cannot change it meanwhile.
        self.public_url = f"{request.scheme}://{request.host}"
        return await super().handle_index(request)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One browser's dashboard, for as long as its page is open."""
        task = asyncio.current_task()
        assert task is not None
        self.sessions.add(task)
        try:
            return await super().handle_websocket(request)
        finally:
            self.sessions.discard(task)

    async def on_shutdown(self, app: web.Application) -> None:
        """Each session's dashboard told to quit (textual-serve then waits for it to close
        its host: the commands it runs get their stop grace, then are cancelled)."""
        sessions = list(self.sessions)
        for task in sessions:
            task.cancel()
        if sessions:
            await asyncio.wait(sessions, timeout=SESSION_CLOSE)


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(command: str, host: str, port: int, warning: str | None = None) -> int:
    """Serve the dashboard that `command` runs at host:port until SIGINT, SIGTERM or
    SIGHUP; each browser connection gets its own. `warning` goes to stderr once it
    listens. A port in use: Unavailable (exit 1); an address that is not this machine's:
    BadInput (exit 2)."""
    server = DashboardServer(command, host, port)
    server.initialize_logging()
    return asyncio.run(_serve(server, host, port, warning))


async def _serve(server: DashboardServer, host: str, port: int, warning: str | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    # textual-serve's own serve() has no way to hear that the port was taken before its
    # banner, nor to end the sessions it runs: its application is run here instead.
    runner = web.AppRunner(await server._make_app(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except socket.gaierror as exc:
            raise BadInput("--host", f"cannot listen on {host}: {exc.strerror}") from None
        except OSError as exc:
            where = f"{url(host, port).removeprefix('http://')}"
            # asyncio words it "error while attempting to bind on address ...": the cause alone
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise Unavailable(f"serve: cannot listen on {where}: {why}") from None
            raise BadInput("--host", f"cannot listen on {where}: {why}") from None
        if warning:
            print(f"tickui: warning: {warning}", file=sys.stderr, flush=True)
        print(f"tickui: the dashboard at {url(host, port)} (Ctrl-C stops it)", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0
