"""When the engine tells its workers the next instant a run is due. A worker at rest polls
the broker slowly (Tansu holds a fetch for its whole wait when a record comes meanwhile)
and fast from a little before an instant it was told: a command due then is seen at once,
and an idle worker costs little. The notice names the runs topic's partitions the due
commands go to, so only the workers holding them poll fast (the others would take CPU
from the one starting the run). Told again when the instant changes, and every REPEAT_US
(a worker that started since hears it); never for an instant past or beyond HORIZON_US. A
lost or missed notice only makes that run wait for the slow poll. Pure: the dispatcher sends."""

from __future__ import annotations

from tickui.common.timeutil import MICROS

LOOK_EVERY_US = MICROS  # how often the store is asked for the next due instant
HORIZON_US = 60 * MICROS
REPEAT_US = 10 * MICROS
NAMED_TASKS = 256  # more due at one instant than this: every worker is told, not some


class DueNotices:
    def __init__(self) -> None:
        self._looked: int | None = None
        self._said: tuple[int, tuple[int, ...]] | None = None
        self._said_at = 0

    def time_to_look(self, now: int) -> bool:
        return self._looked is None or now - self._looked >= LOOK_EVERY_US or now < self._looked

    @staticmethod
    def near(now: int, due: int | None) -> bool:
        """Whether `due` is an instant to tell at `now` (coming, within the horizon)."""
        return due is not None and now < due <= now + HORIZON_US

    def to_say(self, now: int, due: int | None, partitions: tuple[int, ...] = ()) -> int | None:
        """The instant to tell the workers now, given the next one due and the runs
        topic's partitions its commands go to (() for all); None: nothing."""
        self._looked = now
        if due is None or not self.near(now, due):
            return None
        said = (due, partitions)
        if said == self._said and 0 <= now - self._said_at < REPEAT_US:
            return None
        self._said, self._said_at = said, now
        return due


def due_partitions(partitions: list[int | None], named_all: bool) -> tuple[int, ...]:
    """The partitions a due notice names, from those of the tasks due: () (every worker)
    when not all of them were named or one's partition is not known yet."""
    if named_all and partitions and None not in partitions:
        return tuple(sorted({p for p in partitions if p is not None}))
    return ()
