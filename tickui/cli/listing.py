"""`tickui task list` and `tickui history`: what they print, and how they read a SQLite
file without an event loop (tickui.store.reader, the store's own queries). A store given
otherwise, and `history --follow`, go through the `Store` (tickui.cli.task) and print
with the same functions here."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from pathlib import Path

from tickui.cli.output import print_json, say, shown_time, table, task_zone, with_reader
from tickui.common.clock import SystemClock
from tickui.common.errors import NotFound
from tickui.common.redact import safe_text
from tickui.model.retries import attempt_text, wait_text
from tickui.model.spec import check_name

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any


def print_tasks(tasks: list[Any], as_json: bool) -> None:
    if as_json:
        print_json([t.to_json() for t in tasks])
        return
    rows = [
        [
            t.name,
            t.spec.schedule_text(),
            shown_time(t.next_run_at, task_zone(t)) if t.enabled else "-",
            "yes" if t.enabled else f"no {t.note or ''}".strip(),
            t.spec.misfire,
            t.spec.concurrency,
            t.stats.last_state or "-",
            f"{t.source} (overridden)" if t.overridden else t.source,
        ]
        for t in tasks
    ]
    headers = ["NAME", "SCHEDULE", "NEXT", "ENABLED", "MISFIRE", "OVERLAP", "LAST", "SOURCE"]
    say(table(rows, headers) if rows else "no tasks")


def no_tasks(as_json: bool) -> Callable[[], None]:
    """What `task list` prints when there is no database."""
    return functools.partial(print_json, []) if as_json else functools.partial(say, "no tasks")


def no_occurrences(as_json: bool) -> Callable[[], None]:
    """What `history` prints when there is no database."""
    if as_json:
        return functools.partial(print_json, [])
    return functools.partial(say, "no occurrences")


def started_text(occ: Any, now: int, zone: str | None = None) -> str:
    """When a run started; for a queued one, when it may ("next in 40s")."""
    if occ.state == "queued":
        return wait_text(occ.retry_at if occ.retry_at is not None else occ.scheduled_for, now)
    return shown_time(occ.started_at, zone)


def history_table(occs: list[Any], tasks: list[Any]) -> str:
    """`tickui history`'s table, newest first."""
    now = SystemClock().now()
    tries = {t.name: t.spec.retries for t in tasks}
    zones = {t.name: task_zone(t) for t in tasks}
    rows = [
        [
            str(o.id),
            o.task,
            o.kind,
            shown_time(o.scheduled_for, zones.get(o.task)),
            o.state,
            started_text(o, now, zones.get(o.task)),
            attempt_text(o.attempt, tries.get(o.task, 0)).removeprefix("attempt ") or "-",
            o.error_code or "",
            safe_text(o.detail or "")[:60],
        ]
        for o in occs
    ]
    headers = [
        "ID", "TASK", "KIND", "SCHEDULED", "STATE", "STARTED", "ATTEMPT", "CODE", "DETAIL"
    ]  # fmt: skip
    if any(o.worker for o in occs):  # runs on workers (Kafka dispatch): which one
        headers.insert(6, "WORKER")
        for row, o in zip(rows, occs, strict=True):
            row.insert(6, o.worker or "-")
    return table(rows, headers) if rows else "no occurrences"


def list_now(args: argparse.Namespace, path: Path) -> int:
    """`task list` of a SQLite file, read without an event loop."""

    def action(reader: Any) -> int:
        print_tasks(reader.list_tasks(), args.json)
        return 0

    return with_reader(path, action, empty=no_tasks(args.json))


def history_now(args: argparse.Namespace, path: Path) -> int:
    """`history` (without --follow) of a SQLite file, read without an event loop."""
    if args.name:
        check_name(args.name)

    def action(reader: Any) -> int:
        if args.name and reader.find_task(args.name) is None and not reader.history(args.name, 1):
            raise NotFound(f"no task named {args.name!r}")
        occs = reader.history(args.name, args.limit)
        if args.json:
            print_json([o.to_json() for o in occs])
        else:
            say(history_table(occs, reader.list_tasks(with_stats=False)))
        return 0

    return with_reader(path, action, name=args.name, empty=no_occurrences(args.json))
