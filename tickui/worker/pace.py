"""How long a worker's fetches wait. Tansu answers a fetch only when its wait is over, even
when a record came meanwhile: the wait is how late a command can be seen, and every fetch
costs CPU. So a worker at rest waits long (`idle_ms`), and waits FAST_MS from `lead` before
an instant the engine said a run is due until its command came (or WINDOW_US after that
instant), while it runs something, and for AFTER_US after a command came or a run ended.
An instant whose notice names partitions of the runs topic counts only for a worker that
holds one of them: the others stay at rest. Pure: the worker applies it to its consumers
(core.py)."""

from __future__ import annotations

from tickui.common.timeutil import MICROS

FAST_MS = 10
CONTROL_FAST_MS = 100  # the control topic's wait while fast (cancels of running runs)
# its wait at rest: the engine tells a due instant up to a minute ahead, again and again
CONTROL_REST_MS = 1000
WINDOW_US = 3 * MICROS  # an engine ticking once a second sends a due command within ~1 s
AFTER_US = 2 * MICROS  # a burst, a retry or a follow-up comes soon after a run
HORIZON_US = 10 * 60 * MICROS  # instants further out are not kept
KEEP = 16  # instants kept, the nearest


class Pace:
    """Whether to poll fast at a wall-clock instant (micros). `lead`: long enough for the
    slow fetch in flight to end (it keeps its wait) and a margin for clocks."""

    def __init__(self, idle_ms: int) -> None:
        self.idle_ms = max(FAST_MS, int(idle_ms))
        self.lead = 2 * self.idle_ms * 1000 + MICROS // 2
        # announced instants not met yet -> the partitions their commands go to (empty: any)
        self._due: dict[int, frozenset[int]] = {}
        self._busy_until = 0
        self.owned: frozenset[int] = frozenset()  # the runs topic's partitions held now

    @property
    def control_ms(self) -> int:
        """The control topic's wait at rest (never below the intake's)."""
        return max(CONTROL_REST_MS, self.idle_ms)

    def _prune(self, now: int) -> None:
        self._due = {d: p for d, p in self._due.items() if d + WINDOW_US > now}
        if len(self._due) > KEEP:
            self._due = {d: self._due[d] for d in sorted(self._due)[:KEEP]}

    def _mine(self) -> list[int]:
        """The instants this worker waits for: any partition's, or one it holds."""
        return [d for d, parts in self._due.items() if not parts or parts & self.owned]

    def announced(self, due: int, now: int, partitions: tuple[int, ...] = ()) -> bool:
        """The engine said a run is due at `due` on `partitions` (() for any); False when
        that is past or too far out."""
        if due + WINDOW_US <= now or due > now + HORIZON_US:
            return False
        # told again with other partitions (a task added, or moved): the newest word counts
        self._due[due] = frozenset(partitions)
        self._prune(now)
        return True

    def command_came(self, now: int) -> None:
        """A command came: the instants whose fast stretch had begun are met."""
        self._busy_until = max(self._busy_until, now + AFTER_US)
        self._due = {d: p for d, p in self._due.items() if d - self.lead > now}

    def run_ended(self, now: int) -> None:
        self._busy_until = max(self._busy_until, now + AFTER_US)

    def fast(self, now: int, running: bool) -> bool:
        if running or now < self._busy_until:
            return True
        return any(d - self.lead <= now < d + WINDOW_US for d in self._mine())

    def next_change(self, now: int) -> int | None:
        """The next instant at which `fast` may change by itself (runs aside)."""
        self._prune(now)
        mine = self._mine()
        points = [self._busy_until, *(d - self.lead for d in mine)]
        points += [d + WINDOW_US for d in mine]
        return min((p for p in points if p > now), default=None)

    def waiting_for(self, now: int) -> int:
        """The nearest announced instant not met yet (0: none), as heartbeats say it."""
        self._prune(now)
        return min(self._mine(), default=0)
