"""Cron as Debian/Vixie cron reads it (crontab(5)), plus the L, LW, nL and n#k extensions.

Every field is parsed here, by cron's grammar, into explicit sets; `CronRules.next_wall` and
`prev_wall` then find matching local wall-clock times. croniter 7 was used before and is
not trusted with any field text: it reads a one-value range (`5-5`) as the whole field,
wraps a backwards range (`10-5`) around, applies the day OR rule to `*/2`, has no `LW` or
`5L`, and finds no date at all for `18,27` OR `6#5`. Semantics follow the `cronsim`
package (tested against Debian cron), which the tests use as an oracle:

- a field is a comma list of terms: `*`, `N`, `N-M` (M >= N, else refused), each with an
  optional `/step` (step >= 1); `N/step` means `N-max/step`. Month and weekday names are
  the first three letters (any case); weekday 0 and 7 are both Sunday.
- day of month and day of week: when either field starts with `*`, a day must match
  both; otherwise it matches if it matches either (so `0 0 */2 * 1` is odd-dated Mondays,
  `0 0 13 * 5` is every 13th and every Friday).
- extensions: `L` (last day of the month) and `LW` (last weekday of the month) in the
  day-of-month field; `nL` (the month's last weekday n, as `5L`) and `n#k` (the k-th
  weekday n of the month, k 1..5) in the day-of-week field. `W` (nearest weekday), `?`,
  `H` and `R` are refused by name.

How wall times map to instants on DST days is the schedule's business (tickui.schedules.triggers);
`CronRules.wildcard_time` says which rule cron applies: a job whose minute or hour field
starts with `*` runs by real time.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import lru_cache

from tickui.common.errors import BadInput

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
LAST, LAST_WEEKDAY = -1, -2  # day-of-month items beside the plain days
# The Gregorian calendar repeats every 400 years: a pattern of wall times that matches
# nothing in that long never matches at all.
SEARCH_DAYS = 146_097 + 366
ONE_SECOND = timedelta(seconds=1)
ONE_DAY = timedelta(days=1)


class CronSyntaxError(ValueError):
    """One field is wrong; the message names the field."""


def _number(text: str, index: int) -> int:
    names: tuple[str, ...] = MONTHS if index == 4 else DAYS if index == 5 else ()
    if text in names:
        return names.index(text) + (1 if index == 4 else 0)
    if not text or not text.isascii() or not text.isdigit():
        raise CronSyntaxError(f"{FIELDS[index]} field: {text!r} is not a number")
    value = int(text)
    low, high = BOUNDS[index]
    if not low <= value <= high:
        raise CronSyntaxError(f"{FIELDS[index]} field: {value} is out of range ({low}-{high})")
    return value


def _refuse_extensions(text: str, index: int) -> None:
    """Name the extensions cron does not have, before they read as a bad number."""
    name, bare = FIELDS[index], text
    for word in (*MONTHS, *DAYS) if index in (4, 5) else ():
        bare = bare.replace(word, "")
    if "?" in bare:
        raise CronSyntaxError(f"{name} field: '?' is not cron; use *")
    for char, what in (("H", "'H' (hashed values)"), ("R", "'R' (random values)")):
        if char in bare:
            raise CronSyntaxError(f"{name} field: {what} is not supported")
    if "W" in bare.replace("LW", ""):
        where = "; LW (last weekday) is" if index == 3 else ""
        raise CronSyntaxError(f"{name} field: 'W' (nearest weekday) is not supported{where}")
    if "L" in bare and index not in (3, 5):
        raise CronSyntaxError(f"{name} field: 'L' is only for day of month or day of week")
    if "#" in bare and index != 5:
        raise CronSyntaxError(f"{name} field: '#' is only for day of week")


def _term(text: str, index: int) -> set:
    """One comma-separated term of a field, as cronsim (Debian cron) reads it."""
    low, high = BOUNDS[index]
    if text == "*":
        return set(range(low, high + 1))
    if index == 5 and "L" in text:
        if not (text[:-1].isascii() and text[:-1].isdigit()):
            raise CronSyntaxError(f"day-of-week field: {text!r} (use nL, as 5L)")
        return {(_number(text[:-1], 5), LAST)}
    if index == 5 and "#" in text:
        day, nth = text.split("#", 1)
        if not nth.isascii() or not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise CronSyntaxError(f"day-of-week field: {text!r} (use n#k, k from 1 to 5)")
        return {(_number(day, 5), int(nth))}
    if "/" in text:
        base, step_text = text.split("/", 1)
        if not step_text.isascii() or not step_text.isdigit() or int(step_text) == 0:
            raise CronSyntaxError(f"{FIELDS[index]} field: step {step_text!r} in {text!r}")
        step = int(step_text)
        items = _term(base, index)
        if items in ({LAST}, {LAST_WEEKDAY}):
            return items
        if len(items) == 1 and "-" not in base:  # N/step: from N to the field's end
            return set(range(next(iter(items)), high + 1, step))
        return set(sorted(items)[::step])
    if "-" in text:
        first, last = (_number(part, index) for part in text.split("-", 1))
        if last < first:
            raise CronSyntaxError(f"{FIELDS[index]} field: range {text} runs backwards")
        return set(range(first, last + 1))
    if index == 3 and text == "LW":
        return {LAST_WEEKDAY}
    if index == 3 and text == "L":
        return {LAST}
    return {_number(text, index)}


def _field(text: str, index: int) -> set:
    _refuse_extensions(text, index)
    found: set = set()
    for term in text.split(","):
        if not term:
            raise CronSyntaxError(f"{FIELDS[index]} field: empty item in {text!r}")
        found |= _term(term, index)
    return found


def _last_weekday(year: int, month: int) -> int:
    first_dow, days = calendar.monthrange(year, month)
    last_dow = (first_dow + days - 1) % 7  # Monday 0
    return days - 2 if last_dow == 6 else days - 1 if last_dow == 5 else days


@dataclass(frozen=True, slots=True)
class CronRules:
    """One expression's sets; wall times are naive datetimes at whole seconds."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    days: frozenset[int]  # 1..31
    last_day: bool  # L
    last_weekday: bool  # LW
    weekdays: frozenset[int]  # Sunday 0 .. Saturday 6
    weekday_rules: tuple[tuple[int, int], ...]  # (weekday, LAST) for nL, (weekday, k) for n#k
    day_and: bool  # either day field starts with "*": a day must match both
    wildcard_time: bool  # minute or hour field starts with "*": cron runs it by real time

    def _dom(self, day: date) -> bool:
        if day.day in self.days:
            return True
        if day.day < 26 or not (self.last_day or self.last_weekday):
            return False
        if self.last_day and day.day == calendar.monthrange(day.year, day.month)[1]:
            return True
        return self.last_weekday and day.day == _last_weekday(day.year, day.month)

    def _dow(self, day: date) -> bool:
        dow = (day.weekday() + 1) % 7
        if dow in self.weekdays:
            return True
        for wanted, which in self.weekday_rules:
            if wanted != dow:
                continue
            if which == LAST:
                if day.day + 7 > calendar.monthrange(day.year, day.month)[1]:
                    return True
            elif (day.day + 6) // 7 == which:
                return True
        return False

    def day_fields(self, day: date) -> tuple[bool, bool]:
        """Whether the day-of-month field and the day-of-week field each match `day`."""
        return self._dom(day), self._dow(day)

    def day_matches(self, day: date) -> bool:
        if self.day_and:
            return self._dom(day) and self._dow(day)
        return self._dom(day) or self._dow(day)

    def _first_time_from(self, hour: int, minute: int, second: int) -> time | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return time(hour, minute, seconds[k])
                j += 1
            if j < len(minutes):
                return time(hour, minutes[j], seconds[0])
            i += 1
        if i < len(hours):
            return time(hours[i], minutes[0], seconds[0])
        return None

    def _last_time_to(self, hour: int, minute: int, second: int) -> time | None:
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect_right(hours, hour) - 1
        if i >= 0 and hours[i] == hour:
            j = bisect_right(minutes, minute) - 1
            if j >= 0 and minutes[j] == minute:
                k = bisect_right(seconds, second) - 1
                if k >= 0:
                    return time(hour, minute, seconds[k])
            if j >= 0 and minutes[j] == minute:
                j -= 1
            if j >= 0:
                return time(hour, minutes[j], seconds[-1])
            i -= 1
        if i >= 0:
            return time(hours[i], minutes[-1], seconds[-1])
        return None

    def next_wall(self, after: datetime) -> datetime | None:
        """The first matching wall time strictly after `after` (None: none in 400 years)."""
        start = after.replace(microsecond=0) + ONE_SECOND
        day, clock = start.date(), (start.hour, start.minute, start.second)
        try:
            limit = day + timedelta(days=SEARCH_DAYS)
            while day <= limit:
                if day.month not in self.months:
                    month = day.month % 12 + 1
                    day = date(day.year + (month == 1), month, 1)
                elif self.day_matches(day):
                    found = self._first_time_from(*clock)
                    if found is not None:
                        return datetime.combine(day, found)
                    day += ONE_DAY
                else:
                    day += ONE_DAY
                clock = (0, 0, 0)
        except OverflowError:
            pass
        return None

    def prev_wall(self, at_or_before: datetime) -> datetime | None:
        """The last matching wall time at or before `at_or_before`."""
        day = at_or_before.date()
        clock = (at_or_before.hour, at_or_before.minute, at_or_before.second)
        try:
            limit = day - timedelta(days=SEARCH_DAYS)
            while day >= limit:
                if day.month not in self.months:
                    day = day.replace(day=1) - ONE_DAY
                elif self.day_matches(day):
                    found = self._last_time_to(*clock)
                    if found is not None:
                        return datetime.combine(day, found)
                    day -= ONE_DAY
                else:
                    day -= ONE_DAY
                clock = (23, 59, 59)
        except OverflowError:
            pass
        return None


def normalise(expr: str) -> str:
    """Whitespace collapsed, macros lower-cased: the text tickui stores."""
    text = " ".join(str(expr).split())
    return text.lower() if text.startswith("@") else text


@lru_cache(maxsize=8192)
def rules(text: str) -> CronRules:
    """Parse a normalised expression; raises CronSyntaxError naming the bad field. Kept
    for a config's every distinct expression (`m h * * *` alone has 1,440)."""
    if text.startswith("@"):
        if text.lower() not in MACROS:
            raise CronSyntaxError(f"unknown macro {text!r} (use one of {', '.join(MACROS)})")
        text = MACROS[text.lower()]
    parts = text.upper().split()
    if len(parts) not in (5, 6):
        raise CronSyntaxError(f"{len(parts)} fields; cron needs 5 (or 6 with seconds first)")
    if len(parts) == 5:
        parts.insert(0, "0")
    sets = [_field(part, index) for index, part in enumerate(parts)]
    dows = sets[5]
    return CronRules(
        seconds=tuple(sorted(sets[0])),
        minutes=tuple(sorted(sets[1])),
        hours=tuple(sorted(sets[2])),
        months=frozenset(sets[4]),
        days=frozenset(item for item in sets[3] if item > 0),
        last_day=LAST in sets[3],
        last_weekday=LAST_WEEKDAY in sets[3],
        weekdays=frozenset(item % 7 for item in dows if isinstance(item, int)),
        weekday_rules=tuple(
            sorted((day % 7, which) for day, which in (i for i in dows if isinstance(i, tuple)))
        ),
        day_and=parts[3].startswith("*") or parts[5].startswith("*"),
        wildcard_time=parts[1].startswith("*") or parts[2].startswith("*"),
    )


def check(expr: str, field: str = "cron") -> str:
    """Validate `expr`; return its normalised text. One-line BadInput naming the problem."""
    text = normalise(expr)
    try:
        parsed = rules(text)
    except CronSyntaxError as exc:
        if text.startswith("@"):
            raise BadInput(field, str(exc)) from None
        if "fields; cron needs" in str(exc):
            raise BadInput(field, f"{expr!r} has {exc}") from None
        raise BadInput(field, f"{expr!r} is not valid cron: {exc}") from None
    if parsed.next_wall(datetime(2000, 1, 1)) is None:
        raise BadInput(field, f"{expr!r} never fires (no date matches it)")
    return text
