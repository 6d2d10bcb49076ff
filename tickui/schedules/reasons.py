"""Why a cron fire time is when it is, in words: the day-of-month / day-of-week OR rule,
and a DST gap or fold on the way to it. Pure, and read from the same rules and the same
mapping of wall times to instants as tickui.schedules.triggers fires by:

- when both day fields are restricted (neither starts with `*`), a day matches if either
  does: the reason says which did;
- a fixed-time job (neither the minute nor the hour field starts with `*`) whose wall
  time does not exist that day (the clocks jump over it) fires at the moment of the
  jump, once; one run by real time (`*/15 * * * *`, `@hourly`) skips such times;
- a wall time that happens twice (the clocks go back over it) fires once, in the first
  pass, for a fixed-time job, and in both passes for one run by real time.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from tickui.common.timeutil import from_micros
from tickui.schedules import cron as cron_rules
from tickui.schedules.triggers import COUNT_CAP, CronSchedule, offset_changes

ONE_SECOND = timedelta(seconds=1)
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def clock(wall: datetime) -> str:
    """`02:30`, or `02:30:15` when the seconds are not zero."""
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def _local(moment: int, zone: ZoneInfo) -> datetime:
    return from_micros(moment).astimezone(zone)


def _offset_text(local: datetime) -> str:
    offset = local.strftime("%z")
    return f"{local.tzname()}, {offset[:3]}:{offset[3:]}"


def day_rule(rules: cron_rules.CronRules, day: date) -> str | None:
    """Which day field matched, when both are restricted (cron's OR rule); else None."""
    if rules.day_and:
        return None
    dom, dow = rules.day_fields(day)
    weekday = DAY_NAMES[day.weekday()]
    if dom and dow:
        return f"day-of-month ({day.day}) and day-of-week ({weekday}) both matched"
    if dow:
        return f"day-of-week matched ({weekday}), day-of-month did not ({day.day})"
    return f"day-of-month matched ({day.day}), day-of-week did not ({weekday})"


def _matches_in(rules: cron_rules.CronRules, low: datetime, high: datetime) -> list[datetime]:
    """The matching wall times in [low, high) (at most COUNT_CAP of them)."""
    found: list[datetime] = []
    current = low - ONE_SECOND
    while len(found) < COUNT_CAP:
        wall = rules.next_wall(current)
        if wall is None or wall >= high:
            break
        found.append(wall)
        current = wall
    return found


def _walls(walls: list[datetime]) -> str:
    if len(walls) <= 3:
        return ", ".join(clock(w) for w in walls)
    return f"{clock(walls[0])} to {clock(walls[-1])} ({len(walls)} times)"


def cron_reasons(schedule: CronSchedule, before: int, at: int) -> list[str]:
    """The reasons for fire time `at` of `schedule`, the fire before it (or the moment the
    look ahead starts) being `before`; none for a plain fire time."""
    try:
        rules = cron_rules.rules(schedule.expr)
    except cron_rules.CronSyntaxError:
        return []
    zone = ZoneInfo(schedule.tz)
    local = _local(at, zone)
    wall = local.replace(tzinfo=None)
    reasons: list[str] = []
    matched_day = wall.date()
    for change in offset_changes(schedule.tz, before, at):
        old, new = _local(change - 1, zone), _local(change, zone)
        shift = new.utcoffset() - old.utcoffset()  # type: ignore[operator]
        if shift <= timedelta(0):
            continue  # clocks went back: no wall time is lost
        start = new.replace(tzinfo=None) - shift  # the wall times [start, new) do not exist
        lost = _matches_in(rules, start, new.replace(tzinfo=None))
        if not lost:
            continue
        jump = f"clocks jump from {clock(start)} to {clock(new)} {new.tzname()}"
        exist = "does not exist" if len(lost) == 1 else "do not exist"
        when = f"{_walls(lost)} {exist} on {start.date().isoformat()} ({jump})"
        if not rules.wildcard_time and change == at:
            matched_day = lost[0].date()
            reasons.append(f"DST gap: {when}; the run is moved to {clock(wall)} {local.tzname()}")
        else:
            skipped = "is skipped" if len(lost) == 1 else "are skipped"
            reasons.append(f"DST gap: {when}; {skipped} (run by real time)")
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() != second.utcoffset() and _both_exist(first, second):
        day = wall.date().isoformat()
        twice = (
            f"DST fold: {clock(wall)} happens twice on {day}"
            f" ({first.tzname()}, then {second.tzname()})"
        )
        if rules.wildcard_time:
            which = "second" if local.fold else "first"
            reasons.append(
                f"{twice}; runs in both (run by real time), this is the {which}"
                f" ({_offset_text(local)})"
            )
        else:
            reasons.append(f"{twice}; runs once, in the first ({_offset_text(local)})")
    rule = day_rule(rules, matched_day)
    if rule is not None:
        reasons.insert(0, rule)
    return reasons


def _both_exist(first: datetime, second: datetime) -> bool:
    """Both readings of an ambiguous wall time exist (a gap's also differ, and exist not)."""
    zone = first.tzinfo
    return all(
        moment.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == moment.replace(tzinfo=None)
        for moment in (first, second)
    )
