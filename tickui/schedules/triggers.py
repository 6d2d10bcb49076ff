"""When a task fires: cron, fixed interval, or once. Pure functions of time.

All instants are integer microseconds since the epoch (UTC). Cron expressions
(tickui.schedules.cron: Debian cron's fields) match local wall-clock time in the task's zone and
are mapped to instants on DST days as cron(8) does:

- a fixed-time job (neither the minute nor the hour field starts with `*`) fires once
  in a repeated hour (the first pass), and a local time that does not exist fires at
  the first valid instant after it (the moment of the change);
- a job whose minute or hour field starts with `*` (`*/15 * * * *`, `@hourly`,
  `0 */2 * * *`) runs by real time: at every instant whose local time matches, so
  both passes of a repeated hour fire and a local time that does not exist never does.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tickui.common.errors import BadInput
from tickui.common.timeutil import MICROS, format_duration, from_micros, iso, to_micros
from tickui.schedules import cron as cron_rules

MIN_INTERVAL = 100_000  # 100 ms
MAX_INTERVAL = 366 * 86400 * MICROS
MACROS = tuple(cron_rules.MACROS)
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
    """A cron expression (5 fields, 6 with seconds first, or a macro) in an IANA zone.

    An expression the rules refuse (stored before they were checked) never fires.
    """

    expr: str
    tz: str = "UTC"
    kind: str = "cron"

    @property
    def text(self) -> str:
        return self.expr if self.tz == "UTC" else f"{self.expr} ({self.tz})"

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def _rules(self) -> cron_rules.CronRules | None:
        try:
            return cron_rules.rules(self.expr)
        except cron_rules.CronSyntaxError:
            return None

    def _instant(self, wall: datetime) -> int:
        """Map a naive local wall time to the one instant a fixed-time job fires for it."""
        zone = self._zone
        first = wall.replace(tzinfo=zone, fold=0)
        as_utc = first.astimezone(UTC)
        if as_utc.astimezone(zone).replace(tzinfo=None) == wall:
            return to_micros(as_utc)  # exists; fold=0 is the first of an ambiguous pair
        return _gap_end(zone, to_micros(wall.replace(tzinfo=zone, fold=1)), to_micros(as_utc))

    def _wall(self, moment: int) -> datetime:
        return from_micros(moment).astimezone(self._zone).replace(tzinfo=None)

    def _offset(self, moment: int) -> int:
        offset = from_micros(moment).astimezone(self._zone).utcoffset()
        return 0 if offset is None else offset // timedelta(microseconds=1)

    def next_after(self, after: int) -> int | None:
        rules = self._rules
        if rules is None:
            return None
        if rules.wildcard_time:
            return self._next_real(rules, after + 1)
        wall = self._wall(after)
        while True:
            found = rules.next_wall(wall)
            if found is None:
                return None
            candidate = self._instant(found)
            if candidate > after:
                return candidate
            wall = found

    def _next_real(self, rules: cron_rules.CronRules, start: int) -> int | None:
        """The first instant at or after `start` whose local wall time matches (None when
        none does before the horizon: every match falls in a DST gap, as `* 2 * 3 0L` in
        Europe/Berlin, whose last-Sunday-of-March 02:xx never exists)."""
        limit = _real_horizon(start)
        while True:
            offset = self._offset(start)
            found = rules.next_wall(_naive(start + offset - 1))
            if found is None:
                return None
            candidate = _naive_micros(found) - offset
            if candidate > limit:
                return None
            changes = _changes_between(self.tz, start, candidate)
            if not changes:
                return candidate
            start = changes[0]  # the offset changed before the candidate: look again there

    def _prev_real(self, rules: cron_rules.CronRules, stop: int, floor: int) -> int | None:
        """The last instant at or before `stop` whose local wall time matches (None when
        there is none at or after `floor`)."""
        while True:
            offset = self._offset(stop)
            found = rules.prev_wall(_naive(stop + offset))
            if found is None:
                return None
            candidate = _naive_micros(found) - offset
            if candidate < floor - _MAX_OFFSET:
                return None
            changes = _changes_between(self.tz, candidate, stop)
            if not changes:
                return candidate
            stop = changes[-1] - 1

    def _prev_fixed(self, rules: cron_rules.CronRules, stop: int, floor: int) -> int | None:
        local = from_micros(stop).astimezone(self._zone)
        wall = local.replace(tzinfo=None)
        if local.fold:  # second pass of a repeated hour: first-pass times up to here count
            wall += local.replace(fold=0).utcoffset() - local.utcoffset()
        while True:
            found = rules.prev_wall(wall)
            if found is None:
                return None
            candidate = self._instant(found)
            if candidate <= stop:
                return candidate
            wall = found - timedelta(seconds=1)

    def _newest_at_or_before(self, end: int, start: int, keep: int) -> list[int]:
        rules = self._rules
        if rules is None:
            return []
        prev = self._prev_real if rules.wildcard_time else self._prev_fixed
        found: list[int] = []
        current = end
        while len(found) < keep:
            candidate = prev(rules, current, start)
            if candidate is None or candidate < start:
                break
            found.append(candidate)
            current = candidate - 1
        found.reverse()
        return found

    def slots(self, start: int, end: int, keep: int) -> SlotWindow:
        if end < start:
            return SlotWindow(0, [])
        count, capped, current = 0, False, start - 1
        while True:
            following = self.next_after(current)
            if following is None or following > end:
                break
            current = following
            count += 1
            if count >= COUNT_CAP:
                capped = True
                break
        newest = self._newest_at_or_before(end, start, keep) if keep and count else []
        return SlotWindow(count, newest, capped)


_EPOCH = datetime(1970, 1, 1)
# Zone rules are explicit up to 2037 and a yearly rule after it, which repeats with the
# 400-year calendar: a real-time job with no fire in the 401 years after
# max(start, 2038) never fires.
_RULES_PERIODIC_FROM = 2038
_MAX_OFFSET = 2 * 86400 * MICROS  # more than any zone's offset from UTC


def _real_horizon(start: int) -> int:
    year = max(from_micros(start).year, _RULES_PERIODIC_FROM) + 401
    if year > 9999:
        return to_micros(datetime(9999, 12, 31, tzinfo=UTC))
    return to_micros(datetime(year, 1, 1, tzinfo=UTC))


def _naive(micros: int) -> datetime:
    """A wall time given as microseconds since the naive epoch."""
    return _EPOCH + timedelta(microseconds=micros)


def _naive_micros(wall: datetime) -> int:
    return (wall - _EPOCH) // timedelta(microseconds=1)


# Offsets are sampled this often to find a zone's changes; real zones change months apart.
_SAMPLE = 6 * 3600 * MICROS


@lru_cache(maxsize=4096)
def _changes_in_year(tz: str, year: int) -> tuple[int, ...]:
    """Instants X in (1 Jan year, 1 Jan year+1] (UTC) at which the zone's offset changes:
    the offset at X differs from the offset just before X."""
    zone = ZoneInfo(tz)
    low = to_micros(datetime(year, 1, 1, tzinfo=UTC))
    high = to_micros(datetime(year + 1, 1, 1, tzinfo=UTC))

    def offset(moment: int) -> timedelta | None:
        return from_micros(moment).astimezone(zone).utcoffset()

    found: list[int] = []
    before, previous = low, offset(low)
    while before < high:
        after = min(before + _SAMPLE, high)
        current = offset(after)
        if current != previous:
            lo_s, hi_s = before // MICROS, after // MICROS  # offset(lo) old, offset(hi) new
            while hi_s - lo_s > 1:
                mid = (lo_s + hi_s) // 2
                if offset(mid * MICROS) == previous:
                    lo_s = mid
                else:
                    hi_s = mid
            found.append(hi_s * MICROS)
        before, previous = after, current
    return tuple(found)


def _changes_between(tz: str, low: int, high: int) -> list[int]:
    """Offset changes X with low < X <= high, in order."""
    if tz == "UTC" or high <= low:
        return []
    first, last = from_micros(low).year - 1, from_micros(high).year
    found: list[int] = []
    for year in range(first, last + 1):
        changes = _changes_in_year(tz, year)
        found.extend(changes[bisect_right(changes, low) : bisect_left(changes, high + 1)])
    return found


def offset_changes(tz: str, low: int, high: int) -> list[int]:
    """The instants X with low < X <= high at which the zone's offset from UTC changes."""
    return _changes_between(tz, low, high)


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
        import difflib  # only when a zone is not found

        close = difflib.get_close_matches(tz, sorted(available_timezones()), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "use an IANA name such as Europe/Berlin"
        raise BadInput(field, f"unknown time zone {tz!r} ({hint})") from None
    return tz


def cron(expr: str, tz: str = "UTC", field: str = "cron", now: int | None = None) -> CronSchedule:
    """Validate a cron expression (tickui.schedules.cron: Debian cron's rules): 5 fields, 6 with
    seconds first, or a macro. A job run by real time whose every matching local time
    falls in a DST gap of its zone never fires there, and is refused like one no date
    matches."""
    check_zone(tz)
    schedule = CronSchedule(cron_rules.check(expr, field), tz)
    rules = schedule._rules
    if rules is not None and rules.wildcard_time and tz != "UTC":
        after = _NEVER_FIRES_FROM if now is None else now
        if schedule.next_after(after) is None:
            raise BadInput(
                field,
                f"{expr!r} never fires in {tz}: every local time it matches falls in a"
                " daylight-saving gap there",
            )
    return schedule


_NEVER_FIRES_FROM = to_micros(datetime(2000, 1, 1, tzinfo=UTC))


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
    import hashlib  # loads OpenSSL: paid only by a task with jitter

    digest = hashlib.blake2b(f"{task}\0{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter + 1)
