"""The dashboard's output survives its terminal going away.

When the window is closed or the tmux session killed, every write to the terminal fails
with EIO. Textual writes from one thread through a bounded queue; if that thread dies on
the error, the 31st frame queued after it blocks the event loop for good, and the hang-up
(cancel the runs, close the store, remove the demo folder) never happens. Whether the
signal or the first failed write comes first is a race, so the output itself must
survive: the first write that fails points the terminal's descriptors at /dev/null and
every later write goes there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import sys
import threading
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.driver import Driver

log = logging.getLogger("tickui.ui")
# The driver textual-serve names in TEXTUAL_DRIVER for the app it runs for a browser (tickui
# serve): its input and output are pipes to the server, not a terminal.
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


class SurvivingOutput:
    """A text stream whose writes and flushes never raise OSError: after the first one
    that fails, its descriptor (and stdout's and stderr's) lead to /dev/null."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return not self.gone and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _lose(self, exc: OSError) -> None:
        self.gone = True
        log.info("the terminal went away (%s): its output is dropped from now on", exc)
        fds = {1, 2}
        with contextlib.suppress(OSError, ValueError):
            fds.add(self._stream.fileno())
        writes_to_null(fds)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()  # what the stream still buffered goes to /dev/null now


def writes_to_null(fds: set[int] | None = None) -> None:
    """Point `fds` (stdout and stderr by default) at /dev/null, so later writes neither
    fail nor print a traceback nowhere."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in sorted(fds or {1, 2}):
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
        os.close(null)


def terminal_gone(fd: int = 1) -> bool:
    """Whether `fd` leads to a terminal that hung up (a closed window, a killed tmux
    session): the kernel then reports POLLHUP/POLLERR on it and every write fails with
    EIO. (Not `isatty` first: a hung-up terminal is no longer a tty to it.)"""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))
    except OSError:
        return True


def surviving_driver() -> type[Driver] | None:
    """Textual's terminal driver for this platform with its output made a SurvivingOutput
    (None where Textual picks another driver: Windows)."""
    if sys.platform == "win32":
        return None
    from textual.drivers.linux_driver import LinuxDriver

    class SurvivingLinuxDriver(LinuxDriver):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._file = SurvivingOutput(self._file)
            self._watching = False  # the hang-up watcher runs (it outlives a Ctrl-Z)

        # The terminal is looked at on stdin (`fileno`): the output's descriptors may lead
        # to /dev/null by then (SurvivingOutput, a hang-up), stdin never does.

        def start_application_mode(self) -> None:
            super().start_application_mode()
            if self._watching:
                return
            self._watching = True
            threading.Thread(
                target=hang_up_with_terminal, args=(self.fileno,), name="tickui-hang-up",
                daemon=True,
            ).start()  # fmt: skip

        def _sigcont_application(self, *args: Any) -> None:
            """Back from Ctrl-Z, application mode starts again; not on a terminal that hung
            up: its hang-up sends SIGCONT too, and a second input thread would spin on
            the dead terminal beside the first (whatever order the handlers ran in)."""
            if terminal_gone(self.fileno):
                return
            super()._sigcont_application(*args)

    return SurvivingLinuxDriver


def hang_up_with_terminal(fd: int) -> None:
    """Wait (without waking) until the terminal at `fd` hangs up, then hang up as SIGHUP
    does. The kernel sends SIGHUP only to the terminal's session leader, and to the
    others when the leader ends: under a leader that outlives it (`make demo`: make waits
    for its child) the dashboard never got one, and Textual's input thread, reading
    nothing from the dead terminal again and again, took a whole core for good."""
    poller = select.poll()
    poller.register(fd, 0)  # a hang-up (POLLHUP) or an error is always reported
    while True:
        try:
            events = poller.poll()
        except InterruptedError:
            continue
        except OSError:
            return
        if any(mask & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, mask in events):
            break
    os.kill(os.getpid(), signal.SIGHUP)


def served_driver() -> type[Driver]:
    """Textual's web driver (tickui serve's pages), which also hangs up when the server's
    pipe closes, as on SIGHUP: a server that was killed leaves no dashboard (and no engine)
    running without a page, and the hang-up waits for a dashboard still booting, so its
    host is closed, not left half open (an open store keeps the process from ending)."""
    from textual.drivers.web_driver import WebDriver

    class ServedDriver(WebDriver):
        def run_input_thread(self) -> None:
            super().run_input_thread()
            if not self.exit_event.is_set():  # the input ended, not the app: a hang-up
                os.kill(os.getpid(), signal.SIGHUP)

    return ServedDriver
