"""`tickui task ...` and `tickui history`: the commands about tasks and their runs."""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from tickui.cli.listing import history_table, no_occurrences, no_tasks, print_tasks
from tickui.cli.output import (
    UsageError,
    print_json,
    say,
    shown_time,
    shown_value,
    task_line,
    task_zone,
    with_store,
)
from tickui.common import checks
from tickui.common.clock import SystemClock
from tickui.common.errors import BadInput, NotFound
from tickui.common.redact import redact_data, safe_text
from tickui.common.timeutil import iso
from tickui.model.audit import Actor
from tickui.model.retries import attempt_text, wait_text
from tickui.model.spec import build_spec, check_name
from tickui.schedules.triggers import preview
from tickui.store import Store, lookup

# What only a shell reads in a command line: && || | ; < > & $( ${ $NAME and backquotes.
_SHELL_SYNTAX = re.compile(r"&&|\|\||[|;<>&`]|\$[({A-Za-z_]")


def check_not_shell_line(command: list[str]) -> None:
    """Refuse a command given as one argument that is a shell line (`-- "echo hi && date"`)
    or several words (`-- "echo hi"`, its first word a program on PATH): tickui runs it
    without a shell, so it would fail at every run as a missing program. A program whose
    path has spaces and exists (or is on PATH) is taken as it is."""
    if len(command) != 1:
        return
    line = command[0]
    if not any(c.isspace() for c in line) or os.path.exists(line) or shutil.which(line):
        return
    shown = safe_text(shlex.quote(line))
    if _SHELL_SYNTAX.search(line):
        raise BadInput(
            "command",
            f"{shown} is a shell line given as one program name; tickui runs commands "
            f"without a shell: write -- sh -c {shown}",
        )
    try:
        words = shlex.split(line)
    except ValueError:  # unbalanced quotes: only a shell can read it
        words = []
    if words and shutil.which(words[0]):
        raise BadInput(
            "command",
            f"{shown} is several words given as one program name: write -- "
            f"{safe_text(shlex.join(words))} (or -- sh -c {shown})",
        )


def _task_add_raw(args: argparse.Namespace, command: list[str] | None) -> dict[str, Any]:
    env = {}
    for item in args.env:
        if "=" not in item:
            raise BadInput("env", f"{checks.shown(item)} is not NAME=VALUE")
        key, _, value = item.partition("=")
        env[checks.env_name(key, "env")] = value
    raw = {
        "name": args.name,
        "cron": args.cron,
        "every": args.every,
        "at": args.at,
        "tz": args.tz,
        "misfire": args.misfire,
        "concurrency": args.concurrency,
        "timeout": args.timeout,
        "jitter": args.jitter,
        "anchor": args.anchor,
        "cwd": os.path.abspath(args.cwd) if args.cwd else args.cwd,
        "env": env,
        "disabled": args.disabled,
        "command": command,
        "retries": args.retries,
        "retry_delay": args.retry_delay,
        "retry_max_delay": args.retry_max_delay,
        "retry_on": args.retry_on,
        "pause_after": args.pause_after,
    }
    return {key: value for key, value in raw.items() if value is not None}


def _task_edit_raw(args: argparse.Namespace, command: list[str] | None) -> dict[str, Any]:
    """What `task edit` changes, as build_spec fields: only the options given (see
    _only_given), the command when one follows --, `name` for --rename."""
    given = [dest for dest in args._task_options if hasattr(args, dest)]
    full = argparse.Namespace(**vars(args))
    for dest in args._task_options:
        if not hasattr(full, dest):
            setattr(full, dest, [] if dest == "env" else None)
    made = _task_add_raw(full, command)
    changes: dict[str, Any] = {key: made.get(key) for key in given}
    if command is not None:
        changes["command"] = command
    if args.rename:
        changes["name"] = args.rename
    return changes


async def retry_facts(store: Store, task: Any, now: int) -> dict[str, Any]:
    """For `task show`: the count of consecutive failed slots and the pending retry."""
    facts: dict[str, Any] = {"failures": await store.failures_of(task.id), "pending": None}
    queued = await store.queued_of([task.id])
    if queued:
        occ = queued[0]
        due = occ.retry_at if occ.retry_at is not None else occ.scheduled_for
        text = attempt_text(occ.attempt, task.spec.retries)
        facts["pending"] = {
            "id": occ.id,
            "attempt": occ.attempt,
            "retry_at": iso(due),
            "text": f"{text}, {wait_text(due, now)}" if text else wait_text(due, now),
        }
    return facts


def upcoming_fires(task: Any, now: int) -> list[Any]:
    """For `task show`: the slots the task is behind on and its next 5 fire times, each
    with why it is when it is (tickui.model.upcoming), reckoned with the default grace."""
    from tickui.common.options import default
    from tickui.model.upcoming import explain

    behind = task.next_run_at if task.enabled else None
    grace = default("engine", "misfire_grace")
    return explain(task.spec, task.anchor, behind, now, grace)


def fires_text(fires: list[Any], zone: str | None) -> str:
    """`task show`'s fire times, one a line, each reason on its own line under it."""
    lines = []
    for fire in fires:
        line = shown_time(fire.at, zone)
        if fire.due != fire.at:
            line += f", planned {shown_time(fire.due, zone)}"
        if fire.pending:
            line += " (passed: the next scan)"
        lines.append(f"{'':>18}  {line}")
        lines.extend(f"{'':>18}    - {reason}" for reason in fire.reasons)
    head = f"{'fires':>18}: "
    return (
        head + (lines[0].lstrip() if lines else "none") + "".join("\n" + line for line in lines[1:])
    )


async def _read_task(path: Path | str, name: str) -> Any:
    """Task `name`, read before a change is checked: read-only, so a refused change leaves
    the file's bytes as they were; a file from an older tickui (which read-only commands
    cannot read) is opened for writing, which migrates it, as any change does."""
    from tickui.store import SCHEMA_VERSION, inspect_file

    if isinstance(path, str):  # a PostgreSQL store: opening it checks its schema
        return await with_store(path, lambda store: store.get_task(name), name=name)
    version = inspect_file(path) if lookup(path) is not None else None
    old = version is not None and version < SCHEMA_VERSION
    return await with_store(path, lambda store: store.get_task(name), readonly=not old, name=name)


async def cmd_task(args: argparse.Namespace, command: list[str] | None, path: Path | str) -> int:
    clock = SystemClock()
    actor = Actor.here("cli")  # who makes a change, for its audit entry
    if command:
        check_not_shell_line(command)
    if args.action == "add":
        if not command:
            raise BadInput("command", "give the command to run after --")
        spec = build_spec(_task_add_raw(args, command), clock.now())
    else:
        if command is not None and args.action != "edit":
            raise UsageError("", "'--' and a command only go with 'task add' and 'task edit'")
        if args.action == "edit" and command is not None and not command:
            raise BadInput("command", "give the command to run after --")
        check_name(args.name) if hasattr(args, "name") and args.name else None

    if args.action == "edit":
        from tickui.cli import changes as commands  # with the engine's requests: not for a listing

        # Read (read-only: a refused edit leaves the file's bytes as they were), check,
        # then write in one transaction that refuses a task changed meanwhile.
        changes = _task_edit_raw(args, command)
        current = await _read_task(path, args.name)
        spec = commands.edited_spec(current, changes, clock.now())
        return await with_store(
            path,
            functools.partial(
                commands.save_edit,
                task=current,
                spec=spec,
                changes=changes,
                clock=clock,
                actor=actor,
            ),
        )

    if args.action == "backfill" and args.cancel and (args.start or args.end):
        raise BadInput("--cancel", "cancels every queued backfill run: give it alone")
    if args.action == "backfill" and not args.cancel:
        from tickui.cli import changes as commands

        # Read-only first: a refused backfill (too many slots, ...) writes nothing.
        task = await _read_task(path, args.name)
        slots = commands.backfill_plan(task, args, clock.now())
        return await with_store(
            path,
            functools.partial(
                commands.save_backfill, task=task, slots=slots, clock=clock, actor=actor
            ),
        )

    async def action(store: Store) -> int:
        if args.action == "export":
            from tickui.model.export import export_text

            sys.stdout.write(export_text(await store.list_tasks(with_stats=False)))
            return 0
        if args.action == "add":
            task = await store.add_task(spec, clock.now(), actor=actor)
            nxt = (
                shown_time(task.next_run_at, task_zone(task))
                if task.next_run_at is not None
                else "none"
            )
            say(task_line("added", task.name, task.spec.schedule_text(), nxt), redacted=True)
            return 0
        if args.action == "list":
            print_tasks(await store.list_tasks(), args.json)
            return 0
        if args.action == "show":
            task = await store.get_task(args.name)
            data = task.to_json()
            now = clock.now()
            data["preview"] = [iso(t) for t in preview(task.schedule, now, 5)]
            data.update(await retry_facts(store, task, now))
            fires = upcoming_fires(task, now)
            if args.json:
                data["fires"] = [fire.to_json() for fire in fires]
                print_json([data])
            else:
                # Redacted item by item, then joined: redacting the joined text again would
                # let one argument's secret swallow the arguments after it.
                zone = task_zone(task)
                for key, value in redact_data(data).items():
                    shown = shown_value(key, value, zone)
                    if key == "pending" and isinstance(value, dict):
                        shown = value["text"]
                    say(f"{key:>18}: {shown}", redacted=True)
                say(fires_text(fires, zone), redacted=True)
            return 0
        from tickui.cli import changes as commands

        return await commands.change_task(store, args, clock, actor)

    readonly = args.action in ("list", "show", "export")
    named = None if args.action in ("add", "list", "export") else args.name
    empty = None
    if args.action == "export":
        empty = functools.partial(sys.stdout.write, "")
    if args.action == "list":
        empty = no_tasks(args.json)
    return await with_store(path, action, readonly=readonly, name=named, empty=empty)


async def cmd_history(args: argparse.Namespace, path: Path | str) -> int:
    if args.name:
        check_name(args.name)

    async def action(store: Store) -> int:
        if (
            args.name
            and await store.find_task(args.name) is None
            and not await store.history(args.name, 1)
        ):
            raise NotFound(f"no task named {args.name!r}")
        occs = await store.history(args.name, args.limit)
        if args.follow:
            from tickui.cli.follow import follow_history

            if args.json:  # JSON lines, oldest first, as the followed ones come
                for occ in reversed(occs):
                    print(json.dumps(redact_data(occ.to_json())))
            else:
                say(history_table(occs, await store.list_tasks(with_stats=False)))
            sys.stdout.flush()
            task = await store.find_task(args.name) if args.name else None
            await follow_history(store, args.name, task.id if task else None, occs, args.json)
            return 0
        if args.json:
            print_json([o.to_json() for o in occs])
            return 0
        say(history_table(occs, await store.list_tasks(with_stats=False)))
        return 0

    return await with_store(
        path, action, readonly=True, name=args.name, empty=no_occurrences(args.json)
    )
