"""When a task fires: cron, fixed interval, or once. Pure functions of time.

All instants are integer microseconds since the epoch (UTC). Cron expressions are
evaluated on local wall-clock time in the task's zone, then mapped to instants:
a wall time that does not exist (spring forward) fires at the first valid instant
after it, and an ambiguous one (fall back) fires once, at its first occurrence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from tickui.errors import BadInput
from tickui.timeutil import MICROS, format_duration, from_micros, iso, to_micros

MIN_INTERVAL = 100_000  # 100 ms
MAX_INTERVAL = 366 * 86400 * MICROS
MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Counting missed cron slots walks them one by one; past this many the count is a floor.
COUNT_CAP = 10_000


@dataclass(slots=True)
class SlotWindow:
    """Fire times in a closed range: how many, and the newest few of them (ascending)."""

    count: int
    newest: list[int]
    capped: bool = False


class Schedule(Protocol):
    kind: str

    @property
    def text(self) -> str: ...

    def next_after(self, after: int) -> int | None: ...

    def slots(self, start: int, end: int, keep: int) -> SlotWindow: ...


def preview(schedule: Schedule, after: int, n: int) -> list[int]:
    """The next `n` fire times strictly after `after` (fewer if the schedule ends)."""
    times: list[int] = []
    current = after
    while len(times) < n:
        nxt = schedule.next_after(current)
        if nxt is None:
            break
        times.append(nxt)
        current = nxt
    return times


@dataclass(slots=True)
class IntervalSchedule:
    """Fires at anchor + k*every, so restarts never shift the grid."""

    every: int
    anchor: int
    kind: str = "interval"

    @property
    def text(self) -> str:
        return f"every {format_duration(self.every)}"

    def next_after(self, after: int) -> int:
        if after < self.anchor:
            return self.anchor
        return self.anchor + ((after - self.anchor) // self.every + 1) * self.every

    def _index_at_or_before(self, moment: int) -> int:
        return (moment - self.anchor) // self.every

    def slots(self, start: int, end: int, keep: int) -> SlotWindow:
        first = max(0, -((self.anchor - start) // self.every))  # ceil((start-anchor)/every)
        last = self._index_at_or_before(end)
        if last < first:
            return SlotWindow(0, [])
        count = last - first + 1
        lo = max(first, last - keep + 1)
        return SlotWindow(count, [self.anchor + k * self.every for k in range(lo, last + 1)])


@dataclass(slots=True)
class OnceSchedule:
    at: int
    kind: str = "once"

    @property
    def text(self) -> str:
        return f"at {iso(self.at)}"

    def next_after(self, after: int) -> int | None:
        return self.at if self.at > after else None

    def slots(self, start: int, end: int, keep: int) -> SlotWindow:
        inside = start <= self.at <= end
        return SlotWindow(int(inside), [self.at] if inside and keep > 0 else [])


@dataclass(slots=True)
class CronSchedule:
    """A cron expression (5 fields, 6 with seconds first, or a macro) in an IANA zone."""

    expr: str
    tz: str = "UTC"
    kind: str = "cron"

    @property
    def text(self) -> str:
        return self.expr if self.tz == "UTC" else f"{self.expr} ({self.tz})"

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def _iter(self, start: datetime, backwards: bool = False) -> croniter:
        return croniter(
            self.expr, start, ret_type=datetime, second_at_beginning=True, is_prev=backwards
        )

    def _instant(self, wall: datetime) -> int:
        """Map a naive local wall time to the one instant at which it fires."""
        zone = self._zone
        first = wall.replace(tzinfo=zone, fold=0)
        as_utc = first.astimezone(UTC)
        if as_utc.astimezone(zone).replace(tzinfo=None) == wall:
            return to_micros(as_utc)  # exists; fold=0 is the first of an ambiguous pair
        return _gap_end(zone, to_micros(wall.replace(tzinfo=zone, fold=1)), to_micros(as_utc))

    def _wall(self, moment: int) -> datetime:
        return from_micros(moment).astimezone(self._zone).replace(tzinfo=None)

    def next_after(self, after: int) -> int:
        it = self._iter(self._wall(after))
        while True:
            candidate = self._instant(it.get_next(datetime))
            if candidate > after:
                return candidate

    def _newest_at_or_before(self, end: int, start: int, keep: int) -> list[int]:
        local = from_micros(end).astimezone(self._zone)
        wall = local.replace(tzinfo=None)
        if local.fold:  # second pass of a repeated hour: first-pass slots up to here count
            wall += local.replace(fold=0).utcoffset() - local.utcoffset()
        it = self._iter(wall + timedelta(seconds=1), backwards=True)
        found: list[int] = []
        while len(found) < keep:
            candidate = self._instant(it.get_prev(datetime))
            if candidate < start:
                break
            if candidate <= end and (not found or candidate != found[-1]):
                found.append(candidate)
        found.reverse()
        return found

    def slots(self, start: int, end: int, keep: int) -> SlotWindow:
        if end < start:
            return SlotWindow(0, [])
        count, capped, current = 0, False, start - 1
        while True:
            current = self.next_after(current)
            if current > end:
                break
            count += 1
            if count >= COUNT_CAP:
                capped = True
                break
        newest = self._newest_at_or_before(end, start, keep) if keep and count else []
        return SlotWindow(count, newest, capped)


def _gap_end(zone: ZoneInfo, low: int, high: int) -> int:
    """First instant at or after the transition that opened a wall-clock gap."""
    after_offset = from_micros(high).astimezone(zone).utcoffset()
    low_s, high_s = low // MICROS, -(-high // MICROS)
    while high_s - low_s > 1:
        mid = (low_s + high_s) // 2
        if from_micros(mid * MICROS).astimezone(zone).utcoffset() == after_offset:
            high_s = mid
        else:
            low_s = mid
    return high_s * MICROS


def check_zone(tz: str, field: str = "tz") -> str:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        hint = "use an IANA name such as Europe/Berlin"
        raise BadInput(field, f"unknown time zone {tz!r} ({hint})") from None
    return tz


def cron(expr: str, tz: str = "UTC", field: str = "cron") -> CronSchedule:
    """Validate a cron expression: 5 fields, 6 with seconds first, or a macro."""
    text = " ".join(str(expr).split())
    check_zone(tz)
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise BadInput(field, f"unknown macro {text!r} (use one of {', '.join(MACROS)})")
        text = text.lower()
    else:
        fields = text.split(" ") if text else []
        if len(fields) not in (5, 6):
            raise BadInput(
                field, f"{expr!r} has {len(fields)} fields; cron needs 5 (or 6 with seconds first)"
            )
    try:
        croniter(text, datetime(2000, 1, 1), second_at_beginning=True).get_next(datetime)
    except CroniterBadDateError:
        raise BadInput(field, f"{expr!r} never fires") from None
    except (CroniterError, ValueError, KeyError) as exc:
        raise BadInput(field, f"{expr!r} is not valid cron: {exc}") from None
    return CronSchedule(text, tz)


def interval(every: int, anchor: int, field: str = "every") -> IntervalSchedule:
    if not MIN_INTERVAL <= every <= MAX_INTERVAL:
        raise BadInput(field, f"{format_duration(every)} is out of range (100ms to 366d)")
    return IntervalSchedule(every, anchor)


def once(at: int, now: int, field: str = "at") -> OnceSchedule:
    if at <= now:
        raise BadInput(field, f"{iso(at)} is in the past")
    return OnceSchedule(at)


def jitter_offset(task: str, slot: int, jitter: int) -> int:
    """A delay in [0, jitter] fixed by (task, slot), so it is the same after a restart."""
    if jitter <= 0:
        return 0
    digest = hashlib.blake2b(f"{task}\0{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter + 1)
