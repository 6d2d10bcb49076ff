"""The one clock every component takes, so tests and time-lapse can steer time."""

from __future__ import annotations

import time

from tickui.common.timeutil import MICROS

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Protocol
else:  # a protocol is for the type checker; at run time Clock is a plain base
    Protocol = object


class Clock(Protocol):
    """Wall time in UTC microseconds, plus a monotonic reading for durations."""

    @property
    def scale(self) -> float: ...

    def now(self) -> int: ...

    def monotonic(self) -> float: ...


class SystemClock:
    scale = 1.0

    def now(self) -> int:
        return time.time_ns() // 1_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when a test says so."""

    scale = 1.0

    def __init__(self, start: int) -> None:
        self._now = start
        self._mono = 0.0

    def now(self) -> int:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> int:
        self._now += round(seconds * MICROS)
        self._mono += seconds
        return self._now

    def set(self, micros: int) -> None:
        """Jump the wall clock (as NTP or a resume would); monotonic time is untouched."""
        self._now = micros


class ScaledClock:
    """Time that runs `scale` times faster than the system's, from the moment it is made."""

    def __init__(self, scale: float, base: Clock | None = None) -> None:
        if not 1 <= scale <= 3600:
            from tickui.common.errors import BadInput

            raise BadInput("time-scale", f"{scale:g} is out of range (1 to 3600)")
        self.scale = float(scale)
        self._base = base or SystemClock()
        self._wall0 = self._base.now()
        self._mono0 = self._base.monotonic()

    def now(self) -> int:
        elapsed = self._base.monotonic() - self._mono0
        return self._wall0 + round(elapsed * self.scale * MICROS)

    def monotonic(self) -> float:
        return self._mono0 + (self._base.monotonic() - self._mono0) * self.scale
