"""The dashboard's output outlives its terminal (a real pseudo-terminal whose other end
is closed, as a closed window or a killed tmux session does)."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import threading

import pytest
from textual.drivers._writer_thread import MAX_QUEUED_WRITES, WriterThread

from tickui.ui.launch import HangUp
from tickui.ui.terminal import SurvivingOutput, surviving_driver, terminal_gone


@pytest.fixture
def hung_up_terminal():
    """A text stream on a pty's terminal end whose window end is already closed: every
    write to it fails with EIO. Yields the stream and its descriptor."""
    window, end = pty.openpty()
    os.close(window)
    stream = os.fdopen(end, "w", buffering=1)
    yield stream, end
    stream.close()


def test_a_hung_up_terminal_is_seen_and_fails_writes(hung_up_terminal) -> None:
    stream, fd = hung_up_terminal
    assert terminal_gone(fd)
    with pytest.raises(OSError):
        stream.write("x" * 10_000)
        stream.flush()


def test_writes_to_a_hung_up_terminal_go_nowhere_and_never_raise(
    hung_up_terminal, monkeypatch
) -> None:
    stream, fd = hung_up_terminal
    nulled: list[set[int]] = []
    monkeypatch.setattr("tickui.ui.terminal.writes_to_null", nulled.append)  # not pytest's
    out = SurvivingOutput(stream)
    for _ in range(3):
        assert out.write("frame\n" * 1000) == 6000
        out.flush()
    assert out.gone and not out.isatty()
    assert nulled == [{1, 2, fd}], "the terminal's descriptors were not led to /dev/null"


def test_textuals_writer_thread_keeps_draining_after_the_hang_up(
    hung_up_terminal, monkeypatch
) -> None:
    """The deadlock this prevents: Textual's writer thread died on EIO and the frames
    queued after it (more than its queue holds) blocked the event loop for good."""
    stream, _ = hung_up_terminal
    monkeypatch.setattr("tickui.ui.terminal.writes_to_null", lambda fds: None)
    out = SurvivingOutput(stream)
    writer = WriterThread(out)  # type: ignore[arg-type]
    writer.start()
    done = threading.Event()

    def frames() -> None:
        for n in range(MAX_QUEUED_WRITES * 4):
            writer.write(f"frame {n}\n" * 500)
        writer.stop()
        done.set()

    threading.Thread(target=frames, daemon=True).start()
    assert done.wait(10), "writes blocked after the terminal went away"
    assert out.gone


def test_a_live_terminal_is_not_taken_for_gone() -> None:
    window, end = pty.openpty()
    try:
        assert not terminal_gone(end)
    finally:
        os.close(window)
        os.close(end)


async def test_the_dashboard_uses_the_surviving_output() -> None:
    driver_class = surviving_driver()
    assert driver_class is not None

    class _App:  # what the driver reads of its app
        _debug = False

    driver = driver_class(_App(), debug=False, mouse=False)  # type: ignore[arg-type]
    assert isinstance(driver._file, SurvivingOutput)


@pytest.fixture
def signal_handlers():
    """Textual's driver puts its SIGTSTP and SIGCONT handlers in place: put back the test
    process's own afterwards."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTSTP, signal.SIGCONT)}
    yield
    for sig, handler in kept.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("hung_up", [True, False])
async def test_application_mode_starts_again_on_sigcont_only_while_the_terminal_lives(
    hung_up, signal_handlers
) -> None:
    """A terminal's hang-up sends SIGCONT too; Textual's handler would start a second input
    thread that spins on the dead terminal. Back from Ctrl-Z (a live terminal) it starts."""
    driver_class = surviving_driver()
    assert driver_class is not None

    class _App:
        _debug = False

    driver = driver_class(_App(), debug=False, mouse=False)  # type: ignore[arg-type]
    window, end = pty.openpty()
    if hung_up:
        os.close(window)
    started: list[bool] = []
    driver._auto_restart = True
    driver.resume_application_mode = lambda: started.append(True)  # type: ignore[method-assign]
    driver.fileno = end  # the terminal it looks at (stdin in a real run)
    try:
        driver._sigcont_application(signal.SIGCONT, None)
    finally:
        os.close(end)
        if not hung_up:
            os.close(window)
    assert started == ([] if hung_up else [True])


async def test_a_signal_arriving_inside_the_first_ones_handler_still_hangs_up() -> None:
    """Python runs a second signal's handler inside the first's (between any two of its
    steps): one hang-up must start all the same, and only one."""
    hang_up = HangUp()
    calls: list[object] = []

    class _App:
        is_running = True
        ready = asyncio.Event()

        def call_later(self, callback) -> None:
            calls.append(callback)

        async def hang_up(self) -> None:
            return None

    app = _App()
    app.ready.set()

    class Nesting(list):
        def append(self, item) -> None:
            super().append(item)
            if len(self) == 1:  # the second SIGHUP's handler runs right here
                hang_up.handler(signal.SIGHUP, None)

    hang_up.app = app  # type: ignore[assignment]
    hang_up.loop = asyncio.get_running_loop()
    hang_up.received = Nesting()
    hang_up.handler(signal.SIGHUP, None)
    for _ in range(50):
        if calls:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)  # a second hang-up, if any, would be in by now
    assert calls == [app.hang_up]
