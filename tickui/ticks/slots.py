"""The ticker's slot loop: tick k is due at slot k (start + k * interval, on a wall-clock
multiple of the interval when aligned) plus its jitter, slept to on the loop's monotonic
clock, so ticks never drift. After a stall, one tick goes out for the newest slot and the
slots in between are counted as missed, never sent. A wall-clock jump ticks at once on
the new time and starts a new grid."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from tickui.common.clock import Clock, SystemClock
from tickui.common.timeutil import MICROS
from tickui.ticks.clockwatch import ClockSetWatch
from tickui.ticks.config import TickerConfig
from tickui.ticks.tickmath import (
    clock_jump,
    deadline,
    draw_jitter,
    first_slot,
    newest_slot,
    next_tick,
)

log = logging.getLogger("tickui.ticker")
WATCH = 0.1  # how often a sleeping ticker looks for a wall-clock jump (seconds)
SPIN = 0.0015  # the last stretch before a deadline, waited out by yielding
GUARD = 0.002  # wake this long after a wall-clock slot, so `now` is never before it

# Makes one tick: (now: None for the clock's, lateness in s, the slot's wall time or None).
Produce = Callable[[int | None, float, int | None], object]


@dataclass(slots=True)
class SlotCounts:
    missed: int = 0
    jumps: int = 0
    last_jump: float | None = None  # seconds


class SlotLoop:
    """Calls `produce` once per slot of `config`'s interval on `clock`, until told to stop.
    Holds the kernel's clock-set watch while it runs (see clockwatch.py)."""

    def __init__(
        self,
        config: TickerConfig,
        clock: Clock,
        align: bool,
        rng: random.Random,
        produce: Produce,
    ) -> None:
        self.config = config
        self.clock = clock
        self.align = align
        self.rng = rng
        self.produce = produce
        self.counts = SlotCounts()
        self.clock_watch: ClockSetWatch | None = None

    def watch_clock(self) -> None:
        """Open the clock-set watch (before the ticker takes its start time: opening it
        must not push the first ticks late)."""
        self.clock_watch = _clock_set_watch(self.clock)

    def interrupt(self) -> None:
        """Wake a sleep on the clock-set watch, which lasts to the next tick otherwise."""
        if self.clock_watch is not None:
            self.clock_watch.interrupt()

    async def run(self, stopping: asyncio.Event) -> None:
        try:
            await self._tick_on(stopping)
        finally:
            if self.clock_watch is not None:
                self.clock_watch.close()
                self.clock_watch = None

    def _slot_us(self) -> int:
        """One interval on the ticker's clock (which runs `scale` times real time)."""
        return max(1, round(self.config.interval_ms * 1000 * self.clock.scale))

    def _anchor(self, interval: float, after_jump: bool) -> tuple[float, int]:
        """Slot 0 of a fresh grid: (its monotonic deadline, its wall time in micros).

        Aligned: the first wall-clock multiple of the interval from now (after a jump,
        one at least half an interval away, so the jump's own tick is not followed at
        once by another). Not aligned: now (after a jump, one interval from now)."""
        loop = asyncio.get_running_loop()
        wall = self.clock.now()  # before the monotonic reading: slots never precede `now`
        mono = loop.time()
        slot = self._slot_us()
        if not self.align:
            return (mono + interval, wall + slot) if after_jump else (mono, wall)
        base = first_slot(wall, slot)
        if after_jump and base - wall < slot // 2:
            base += slot
        return mono + (base - wall) / MICROS / self.clock.scale + GUARD, base

    async def _tick_on(self, stopping: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.interval_ms / 1000
        jitter = self.config.jitter_ms / 1000
        slot = self._slot_us()
        start, base = self._anchor(interval, after_jump=False)
        last, offset = -1, self._offset(loop)
        while not stopping.is_set():
            planned = next_tick(start, interval, last, loop.time(), draw_jitter(self.rng, jitter))
            self.counts.missed += planned.missed
            jumped = await self._sleep_until(stopping, planned.deadline, offset, interval)
            if stopping.is_set():
                break
            offset = self._offset(loop)
            if jumped is not None:  # tick at once on the new wall time, then a new grid
                self.produce(None, 0.0, None)
                start, base = self._anchor(interval, after_jump=True)
                last = -1
                continue
            # Woken late past the whole slot (a stall): one tick, for the newest slot.
            index, skipped = newest_slot(start, interval, planned.index, loop.time())
            self.counts.missed += skipped
            last = index
            due = planned.deadline if index == planned.index else deadline(start, interval, index)
            self.produce(None, max(0.0, loop.time() - due), base + index * slot)

    def _offset(self, loop: asyncio.AbstractEventLoop) -> float:
        return self.clock.now() / MICROS / self.clock.scale - loop.time()

    async def _sleep_until(
        self, stopping: asyncio.Event, deadline: float, offset: float, interval: float
    ) -> float | None:
        """Sleep to `deadline`, looking for a wall-clock jump meanwhile; return the jump.

        On the system clock the kernel wakes the sleep when the clock is set (see
        clockwatch.py); on any other clock it is looked at every WATCH s. The selector
        sleeps in whole milliseconds (rounded up), so the last stretch is waited out by
        yielding to the loop instead: ticks land within a fraction of a ms.
        """
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            if stopping.is_set():
                return None
            watch = self.clock_watch
            if left <= SPIN:
                await asyncio.sleep(0)
            elif watch is not None and watch.watching:
                await watch.wait(left - SPIN)
            else:
                await asyncio.sleep(min(left - SPIN, WATCH))
            jump = clock_jump(offset, self._offset(loop), interval)
            if jump is not None:
                self.counts.jumps += 1
                self.counts.last_jump = jump
                log.warning("wall clock jumped by %+.3f s; ticking now", jump)
                return jump
        return None


def _clock_set_watch(clock: Clock) -> ClockSetWatch | None:
    """The kernel's word on clock steps, for the system clock itself (or a clock class
    that says its steps are the system's: `steps_announced = True` in its own body). Any
    other clock, a subclass of SystemClock included, is looked at instead."""
    announced = type(clock) is SystemClock or vars(type(clock)).get("steps_announced") is True
    if not announced or clock.scale != 1:
        return None
    watch = ClockSetWatch.open()
    if watch is not None:
        watch.attach(asyncio.get_running_loop())
    return watch
