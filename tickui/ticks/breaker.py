"""A circuit breaker around publishing. Pure: every call takes the monotonic time.

Monotonic time, not wall time, decides when an open breaker may probe again, so a
clock step (NTP, resume from sleep) can neither hold it open nor release it early.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

CLOSED, OPEN, HALF_OPEN = "CLOSED", "OPEN", "HALF_OPEN"


@dataclass(slots=True)
class Transition:
    at: int  # wall time (engine clock, microseconds), for people to read
    source: str
    target: str
    reason: str


class CircuitBreaker:
    """CLOSED counts consecutive failures; at the threshold it opens and refuses calls
    until the reset timeout has passed; then one probe goes through (HALF_OPEN): its
    success closes the breaker, its failure opens it again."""

    def __init__(self, threshold: int, reset_timeout: float, keep: int = 50) -> None:
        self.threshold = threshold
        self.reset_timeout = reset_timeout
        self.state = CLOSED
        self.failures = 0
        self.opened_at: float | None = None
        self.last_error: str | None = None
        self.transitions: deque[Transition] = deque(maxlen=keep)
        self._probing = False

    def _move(self, target: str, wall: int, reason: str) -> None:
        self.transitions.append(Transition(wall, self.state, target, reason))
        self.state = target

    def allow(self, mono: float, wall: int) -> bool:
        """May a call go out now? In HALF_OPEN only one probe at a time."""
        if self.state == OPEN:
            assert self.opened_at is not None
            if mono - self.opened_at < self.reset_timeout:
                return False
            self._move(HALF_OPEN, wall, f"reset timeout of {self.reset_timeout:g}s passed")
        if self.state == HALF_OPEN:
            if self._probing:
                return False
            self._probing = True
        return True

    def retry_in(self, mono: float) -> float | None:
        """Seconds until an open breaker lets a probe through (None unless OPEN)."""
        if self.state != OPEN or self.opened_at is None:
            return None
        return max(0.0, self.reset_timeout - (mono - self.opened_at))

    def success(self, mono: float, wall: int) -> None:
        self._probing = False
        self.failures = 0
        if self.state != CLOSED:
            self._move(CLOSED, wall, "probe succeeded")
        self.opened_at = None

    def failure(self, mono: float, wall: int, error: str) -> None:
        self._probing = False
        self.failures += 1
        self.last_error = error
        if self.state == HALF_OPEN:
            self.opened_at = mono
            self._move(OPEN, wall, f"probe failed: {error}")
        elif self.state == CLOSED and self.failures >= self.threshold:
            self.opened_at = mono
            self._move(OPEN, wall, f"{self.failures} consecutive failures: {error}")
