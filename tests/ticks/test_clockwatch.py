"""The kernel tells the ticker when the system clock is set (Linux timerfd), so a sleeping
ticker needs no 0.1 s look-around on the real clock. Real steps of the system clock are
needed to prove it: each test steps it forward by one nanosecond (clock_adjtime with
ADJ_SETOFFSET, which needs CAP_SYS_TIME; skipped without it)."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
import time

import pytest

from services import cannot_here
from tickui.common.clock import SystemClock
from tickui.ticks.clockwatch import ClockSetWatch
from tickui.ticks.config import TickerConfig
from tickui.ticks.ticker import RuntimeScheduler

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux timerfd")

ADJ_SETOFFSET, ADJ_NANO = 0x0100, 0x2000


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):  # struct timex (linux/timex.h)
    _fields_ = [
        *((name, ctypes.c_long) for name in ("offset", "freq", "maxerror", "esterror")),
        ("status", ctypes.c_int),
        *((name, ctypes.c_long) for name in ("constant", "precision", "tolerance")),
        ("time", _Timeval),
        *((name, ctypes.c_long) for name in ("tick", "ppsfreq", "jitter")),
        ("shift", ctypes.c_int),
        *((name, ctypes.c_long) for name in ("stabil", "jitcnt", "calcnt", "errcnt", "stbcnt")),
        ("tai", ctypes.c_int),
        ("pad", ctypes.c_int * 11),
    ]
    _fields_.insert(0, ("modes", ctypes.c_uint))


def step_system_clock_one_nanosecond() -> None:
    """A real, harmless step of the system clock: +1 ns."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    tx = _Timex(modes=ADJ_SETOFFSET | ADJ_NANO)
    tx.time.tv_usec = 1  # nanoseconds, with ADJ_NANO
    if libc.clock_adjtime(0, ctypes.byref(tx)) < 0:
        cannot_here(f"cannot step the system clock here (errno {ctypes.get_errno()})")


def wall_offset_ns() -> int:
    """The system clock less the monotonic one: it moves only when the clock is stepped."""
    return time.time_ns() - time.monotonic_ns()


def skip_if_stepped_by_another(before: int) -> None:
    """A quiet window must be quiet: the machine's own clock steps (a VM resumed, a time
    daemon) wake the watch as rightly as ours, and make the window prove nothing."""
    moved = abs(wall_offset_ns() - before)
    if moved > 50_000_000:
        cannot_here(f"the system clock was stepped by {moved / 1e9:.3f} s by something else")


async def test_a_step_of_the_system_clock_wakes_a_waiter_at_once() -> None:
    watch = ClockSetWatch.open()
    assert watch is not None, "no timerfd on Linux"
    watch.attach(asyncio.get_running_loop())
    try:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, step_system_clock_one_nanosecond)
        began = time.monotonic()
        assert await watch.wait(30) is True
        assert time.monotonic() - began < 5, "woken by the step, not by the timeout"
        assert watch.announced == 1
        # re-armed: the next step is announced too, and a quiet wait runs its full time
        before = wall_offset_ns()
        quiet = await watch.wait(0.05)
        skip_if_stepped_by_another(before)
        assert quiet is False
        loop.call_later(0.01, step_system_clock_one_nanosecond)
        assert await watch.wait(30) is True and watch.announced == 2
    finally:
        watch.close()
    assert not watch.watching


class KernelShiftedClock:
    """The system clock plus a shift a test steps; it declares that its steps are the
    system's, so the ticker relies on the kernel's word for them and never looks."""

    scale = 1.0
    steps_announced = True

    def __init__(self) -> None:
        self.shift = 0

    def now(self) -> int:
        return SystemClock().now() + self.shift

    def monotonic(self) -> float:
        return time.monotonic()


class SubclassedSystemClock(SystemClock):
    """A clock that only looks like the system's: its steps are its own."""


async def test_a_ticker_on_the_system_clock_is_woken_by_the_kernel_and_never_looks() -> None:
    clock = KernelShiftedClock()
    ticker = RuntimeScheduler(TickerConfig(interval_ms=5000), clock=clock, align=False)
    loop = asyncio.get_running_loop()
    seen: list[float] = []

    async def record(tick) -> None:
        seen.append(loop.time())

    ticker.subscribe(record)
    await ticker.start()
    try:
        while not seen:  # tick 0, at once
            await asyncio.sleep(0.01)
        assert ticker._slots.clock_watch is not None and ticker._slots.clock_watch.watching
        clock.shift = 3600 * 1_000_000  # a jump the kernel was not told of: not looked for
        before = wall_offset_ns()
        await asyncio.sleep(0.5)
        skip_if_stepped_by_another(before)
        assert len(seen) == 1, "the ticker looked at the clock instead of sleeping on"
        stepped = loop.time()
        step_system_clock_one_nanosecond()  # the kernel's word: the ticker looks now
        while len(seen) < 2:
            assert loop.time() - stepped < 3, "the announced step was not noticed"
            await asyncio.sleep(0.005)
        assert seen[1] - stepped < 0.5  # at once (real time on a shared machine)
        assert ticker.metrics().clock_jumps == 1
    finally:
        await ticker.stop()
    assert ticker._slots.clock_watch is None


@pytest.mark.parametrize("clock", [SubclassedSystemClock(), KernelShiftedClock()])
async def test_which_clocks_the_kernel_speaks_for(clock) -> None:
    ticker = RuntimeScheduler(TickerConfig(interval_ms=1000), clock=clock, align=False)
    await ticker.start()
    try:
        await asyncio.sleep(0.05)  # the tick loop has begun
        watched = ticker._slots.clock_watch is not None
    finally:
        await ticker.stop()
    assert watched == isinstance(clock, KernelShiftedClock)


async def test_the_system_clock_itself_is_watched() -> None:
    ticker = RuntimeScheduler(TickerConfig(interval_ms=1000), clock=SystemClock(), align=False)
    await ticker.start()
    try:
        await asyncio.sleep(0.05)
        assert ticker._slots.clock_watch is not None and ticker._slots.clock_watch.watching
    finally:
        await ticker.stop()


async def test_stopping_ends_a_long_sleep_at_once() -> None:
    """Asleep until the next tick a minute away, the ticker still stops at once."""
    ticker = RuntimeScheduler(TickerConfig(interval_ms=60_000), clock=SystemClock(), align=False)
    await ticker.start()
    await asyncio.sleep(0.05)
    began = time.monotonic()
    await ticker.stop()
    assert time.monotonic() - began < 1.0
