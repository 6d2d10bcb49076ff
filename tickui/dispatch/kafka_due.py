"""When the engine tells its workers the next instant a run is due. A worker at rest polls
the broker slowly (Tansu holds a fetch for its whole wait when a record comes meanwhile)
and fast from a little before an instant it was told: a command due then is seen at once,
and an idle worker costs little. Told again when the instant changes, and every REPEAT_US
(a worker that started since hears it); never for an instant past or beyond HORIZON_US. A
lost or missed notice only makes that run wait for the slow poll. Pure: the dispatcher sends."""

from __future__ import annotations

from tickui.common.timeutil import MICROS

LOOK_EVERY_US = MICROS  # how often the store is asked for the next due instant
HORIZON_US = 60 * MICROS
REPEAT_US = 10 * MICROS


class DueNotices:
    def __init__(self) -> None:
        self._looked: int | None = None
        self._said: int | None = None
        self._said_at = 0

    def time_to_look(self, now: int) -> bool:
        return self._looked is None or now - self._looked >= LOOK_EVERY_US or now < self._looked

    def to_say(self, now: int, due: int | None) -> int | None:
        """The instant to tell the workers now, given the next one due; None: nothing."""
        self._looked = now
        if due is None or due <= now or due > now + HORIZON_US:
            return None
        if due == self._said and 0 <= now - self._said_at < REPEAT_US:
            return None
        self._said, self._said_at = due, now
        return due
