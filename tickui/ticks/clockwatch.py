"""Being told when the system's wall clock is set, instead of looking for it.

A ticker sleeping for a whole interval must still notice at once when the wall clock is
stepped (an NTP step, a resume from suspend, someone setting the date). Looking every
0.1 s costs ten wakeups a second, which on these machines is most of an idle dashboard's
CPU. Linux says it instead: a timerfd on CLOCK_REALTIME armed with TFD_TIMER_CANCEL_ON_SET
becomes readable (its read fails with ECANCELED) whenever the clock is set, so the ticker
sleeps to its deadline and is woken by a step. Only the real system clock is announced
this way; any other clock (a test's, time-lapse) is still looked at every 0.1 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import functools
import logging
import os
import sys

log = logging.getLogger("tickui.ticker")

CLOCK_REALTIME = 0
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1
TFD_TIMER_CANCEL_ON_SET = 2
NEVER = 2**33  # an absolute expiry far beyond any real date: the timer itself never fires


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, once (the process's own symbols: find_library runs ldconfig)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


class ClockSetWatch:
    """Wakes its waiters when the system wall clock is set. `open()` gives None where
    the kernel cannot tell (not Linux, no timerfd): the caller then has to look."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[bool]] = set()
        self.announced = 0  # how many times the clock was set while watched

    @classmethod
    def open(cls) -> ClockSetWatch | None:
        libc = _libc()
        if libc is None:
            return None
        try:
            fd = libc.timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        except AttributeError:
            return None
        if fd < 0:
            return None
        watch = cls(libc, fd)
        if not watch._arm():
            os.close(fd)
            return None
        return watch

    def _arm(self) -> bool:
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(NEVER, 0))
        flags = TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET
        return self._libc.timerfd_settime(self._fd, flags, ctypes.byref(spec), None) == 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._fd, self._readable)

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.interrupt()

    def interrupt(self) -> None:
        """End every wait now (the ticker is stopping)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(False)

    def _readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.ECANCELED:
                log.warning("clock-set watch failed (%s): looking every 0.1 s instead", exc)
                self.close()
                return
            self.announced += 1
            if not self._arm():  # cannot watch on: waiters fall back to looking
                log.warning("clock-set watch could not be re-armed: looking instead")
                self.close()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(True)

    @property
    def watching(self) -> bool:
        return self._fd >= 0 and self._loop is not None

    async def wait(self, timeout: float) -> bool:
        """Sleep `timeout` s, or less when the clock is set meanwhile (then True)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(timeout, _settle, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)


def _settle(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)
