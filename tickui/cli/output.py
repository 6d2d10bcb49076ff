"""How the command line prints and opens the database: every line redacted, JSON
redacted, read-only opens that create nothing."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, tzinfo
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tickui.common.errors import BadInput, NotFound
from tickui.common.redact import printable, redact_data, safe_text
from tickui.common.timeutil import from_micros, machine_zone, to_micros

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

JSON_FLAG = "one JSON array"  # the help of a listing's --json


class UsageError(BadInput):
    """A command line that argparse accepted but that makes no sense (exit 2)."""


def say(text: Any, redacted: bool = False) -> None:
    """Every line the CLI prints: redacted, control characters made visible. `redacted`:
    the caller redacted each part already (a second pass over the joined line could let
    one argument's secret swallow the arguments after it)."""
    print(printable(text, newlines=True) if redacted else safe_text(text, newlines=True))


def task_line(verb: str, name: str, schedule: str, nxt: str) -> str:
    """ "added NAME: SCHEDULE, next run ...", each part redacted on its own: as one line, a
    task called "secret" read as `secret: <value>` and hid its schedule."""
    return f"{verb} {safe_text(name)}: {safe_text(schedule)}, next run {safe_text(nxt)}"


def print_json(value: Any) -> None:
    """JSON output: every string redacted; JSON's escaping makes control characters visible."""
    json.dump(redact_data(value), sys.stdout, indent=2)
    sys.stdout.write("\n")


def no_database(path: Path, name: str | None = None, empty: Any = None) -> bool:
    """With no database at `path` nothing is created: a command about one named task says
    that task does not exist (NotFound, exit 2); a listing says there is no database and
    prints `empty` (True: nothing more to do, exit 0)."""
    from tickui.store import lookup

    missing = isinstance(path, Path) and lookup(path) is None  # a store URL: its server says
    if (name is None and empty is None) or not missing:
        return False
    if name is not None:
        raise NotFound(f"no task named {name!r} (no database at {path})")
    print(
        f"tickui: no database at {safe_text(path)} (tickui task add or tickui run creates one)",
        file=sys.stderr,
    )
    empty()
    return True


async def with_store(
    path: Path | str, action, readonly: bool = False, name: str | None = None, empty: Any = None
) -> int:
    """Run `action` on the database. Read-only commands open it read-only. With no database
    at `path`: see no_database."""
    from tickui.store import DATABASE_ERRORS, Store, database_failure

    if no_database(path, name, empty):
        return 0
    store = await Store.open(path, readonly=readonly)
    try:
        return await action(store)
    except DATABASE_ERRORS as exc:
        raise database_failure(exc, path) from None
    finally:
        await store.close()


def with_reader(path: Path, action, name: str | None = None, empty: Any = None) -> int:
    """with_store for a listing of a SQLite file, read through a blocking read-only
    connection (tickui.store.reader) instead of the Store: no event loop started for it."""
    from tickui.store import DATABASE_ERRORS, Reader, database_failure

    if no_database(path, name, empty):
        return 0
    reader = Reader.open(path)
    try:
        return action(reader)
    except DATABASE_ERRORS as exc:
        raise database_failure(exc, path) from None
    finally:
        reader.close()


def table(rows: list[list[Any]], headers: list[str]) -> str:
    rows = [[safe_text(cell) for cell in row] for row in rows]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


STAMP = "%Y-%m-%d %H:%M:%S %Z"


def shown_time(value: int | None, task_zone: str | None = None) -> str:
    """A time as the CLI's human output shows it: to the second in the machine's zone,
    named (`2026-12-05 14:03:07 CET`); a cron task's own zone (`task_zone`) after it
    when that reads otherwise (`... UTC (2026-12-06 09:00:00 JST)`); `-` for none. JSON
    keeps ISO 8601."""
    if value is None:
        return "-"
    moment = from_micros(value)
    shown = moment.astimezone(machine_zone()).strftime(STAMP)
    zone = _zone(task_zone)
    if zone is not None:
        own = moment.astimezone(zone).strftime(STAMP)
        if own != shown:
            shown += f" ({own})"
    return shown


def task_zone(task: Any) -> str | None:
    """The zone a task's slots are reckoned in, when it has one: a cron's."""
    return task.spec.tz if task.spec.kind == "cron" else None


@lru_cache(maxsize=64)
def _zone(name: str | None) -> tzinfo | None:
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError):
        return None


_ISO_INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00")


def shown_value(key: str, value: Any, zone: str | None = None) -> str:
    """A field of a record's JSON as the human output shows it: times as shown_time (in
    `zone` too, a cron task's own), yes/no, commands as a shell would write them, lists
    joined by commas."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "command" and isinstance(value, list):
        import shlex  # a command's words: for `task show` only

        return shlex.join(str(word) for word in value)
    if isinstance(value, list):
        return ", ".join(shown_value(key, item, zone) for item in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={shown_value(k, v, zone)}" for k, v in value.items()) or "-"
    if isinstance(value, str) and _ISO_INSTANT.fullmatch(value):
        return shown_time(to_micros(datetime.fromisoformat(value)), zone)
    return str(value)
