"""The dashboard's output outlives its terminal (a real pseudo-terminal whose other end
is closed, as a closed window or a killed tmux session does)."""

from __future__ import annotations

import os
import pty
import threading

import pytest
from textual.drivers._writer_thread import MAX_QUEUED_WRITES, WriterThread

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
