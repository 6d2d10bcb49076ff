"""Time as integer microseconds since the epoch (UTC), and the text forms users see."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache

MICROS = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# ASCII digits only (`\d` would take full-width ones), bounded so no float overflows.
_DURATION = re.compile(r" *([0-9]{1,12}(?:\.[0-9]{1,6})?) *(ms|s|m|h|d) *", re.ASCII)
MAX_DURATION = 3660 * 86400 * MICROS  # ten years: beyond any bound a field sets
MIN_INSTANT = 0  # 1970-01-01T00:00:00Z
MAX_INSTANT = 253_402_300_799 * MICROS  # 9999-12-31T23:59:59Z
_UNIT_MICROS = {"ms": 1_000, "s": MICROS, "m": 60 * MICROS, "h": 3600 * MICROS, "d": 86400 * MICROS}


def to_micros(moment: datetime) -> int:
    """Aware datetime to integer microseconds; naive values are refused, not guessed."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: a time zone is required")
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * MICROS + delta.microseconds


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def iso(value: int | None) -> str | None:
    """ISO 8601 UTC with offset, or None for an absent time."""
    if value is None:
        return None
    return from_micros(value).isoformat(timespec="microseconds" if value % MICROS else "seconds")


def parse_duration(text: str, field: str = "duration") -> int:
    """`500ms`, `30s`, `5m`, `2h`, `1d` to microseconds."""
    from tickui.common.errors import BadInput

    match = _DURATION.fullmatch(str(text))
    if not match:
        raise BadInput(field, f"{text!r} is not a duration (use e.g. 500ms, 30s, 5m, 2h, 1d)")
    number, unit = match.groups()
    micros = round(float(number) * _UNIT_MICROS[unit])
    if micros > MAX_DURATION:
        raise BadInput(field, f"{text!r} is longer than ten years")
    return micros


def format_duration(micros: int) -> str:
    """Shortest exact text for a duration, the inverse of parse_duration where possible."""
    for unit in ("d", "h", "m", "s", "ms"):
        size = _UNIT_MICROS[unit]
        if micros and micros % size == 0:
            return f"{micros // size}{unit}"
    return f"{micros / MICROS:g}s"


def parse_instant(text: str, field: str = "at") -> int:
    """An ISO 8601 instant with an offset (or Z) to microseconds."""
    from tickui.common.errors import BadInput

    text = str(text).strip(" ")  # spaces only: a trailing newline is refused
    if not text.isascii():
        raise BadInput(field, f"{text!r} is not an ISO 8601 instant (ASCII digits only)")
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(field, f"{text!r} is not an ISO 8601 instant") from None
    if moment.tzinfo is None:
        raise BadInput(field, f"{text!r} has no UTC offset (add Z or +HH:MM)")
    try:
        micros = to_micros(moment)
    except OverflowError:
        micros = -1
    if not MIN_INSTANT <= micros <= MAX_INSTANT:
        raise BadInput(field, f"{text!r} is outside 1970 to 9999")
    return micros


def span(micros: int) -> str:
    """A compact, human span: 0.4s, 12s, 3m05s, 2h04m, 6d03h."""
    seconds = micros / MICROS
    if seconds < 10:
        return f"{max(seconds, 0):.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, sec = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


@lru_cache(maxsize=1)
def machine_zone() -> tzinfo:
    """The machine's zone with its DST rules: $TZ, else /etc/localtime, else today's offset."""
    from zoneinfo import ZoneInfo  # the dashboard's local times only: not for the parser

    name = os.environ.get("TZ", "").lstrip(":")
    try:
        if name:
            return ZoneInfo(name)
        with open("/etc/localtime", "rb") as handle:
            return ZoneInfo.from_file(handle, key=_localtime_key())
    except (OSError, ValueError):
        return datetime.now().astimezone().tzinfo or UTC


def _localtime_key() -> str | None:
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return None
    marker = "zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else None
