"""Task changes from the command line: edit, enable, disable, remove and run-now requests."""

from __future__ import annotations

import argparse
import asyncio

from tickui.cli.output import shown_time, task_line, task_zone
from tickui.common import procs
from tickui.common.clock import Clock
from tickui.common.errors import BadInput, TickuiError
from tickui.common.redact import printable, safe_text
from tickui.engine import RunNowRefused, queue_run_now
from tickui.engine.requests import CANCEL_BACKFILL
from tickui.model.audit import Actor
from tickui.model.backfill import backfill_slots
from tickui.model.export import spec_fields
from tickui.model.records import Task
from tickui.model.spec import TaskSpec, build_spec
from tickui.store import Store

REQUEST_WAIT = 5.0

SCHEDULE_KEYS = ("cron", "every", "at")
# Fields `task edit` clears when given as '' (back to their default).
CLEARABLE = ("tz", "timeout", "jitter", "anchor", "cwd")


class Refused(TickuiError):
    pass


async def engine_alive(store: Store, now: int) -> bool:
    """Whether some engine holds the lease now (and, on this host, is really running)."""
    lease = await store.lease()
    if lease is None or lease.expires_at <= now:
        return False
    return lease.host != procs.host() or procs.alive(lease.pid, None)


def say(text: str) -> None:
    """Every line printed here is redacted and shows control characters escaped."""
    print(safe_text(text))


async def change_task(
    store: Store, args: argparse.Namespace, clock: Clock, actor: Actor | None = None
) -> int:
    """enable, disable, backfill --cancel, rm and run-now; `actor` is audited with each."""
    name = args.name
    if args.action == "enable":
        task = await store.set_enabled(name, True, clock.now(), actor=actor)
        nxt = (
            shown_time(task.next_run_at, task_zone(task))
            if task.next_run_at is not None
            else "none"
        )
        say(f"enabled {name}; next run {nxt}")
    elif args.action == "disable":
        await store.set_enabled(name, False, clock.now(), note=args.note, actor=actor)
        say(f"disabled {name}" + (f" ({args.note})" if args.note else ""))
    elif args.action == "backfill":  # --cancel (the rest is save_backfill)
        cancelled = await store.cancel_backfill(name, clock.now(), actor=actor)
        line = f"cancelled {cancelled} queued backfill run(s) of {name}"
        task = await store.get_task(name)
        running = [o for o in await store.active_occurrences()
                   if o.task_id == task.id and o.kind == "backfill"]  # fmt: skip
        if running:  # the engine that runs them ends them (they are not retried then)
            await store.add_request(task, CANCEL_BACKFILL, clock.now())
            await store.announce_request()
            line += f"; asked the engine to cancel the {len(running)} running"
        say(line)
    elif args.action == "rm":
        await store.remove_task(name, clock.now(), actor=actor)
        say(f"removed {name}; its history stays")
    else:
        return await request_run_now(store, name, clock, actor)
    return 0


async def request_run_now(store: Store, name: str, clock: Clock, actor: Actor | None = None) -> int:
    """Ask the lease holder to run a task now; wait briefly for its answer."""
    task = await store.get_task(name)
    now = clock.now()
    try:
        request = await queue_run_now(store, task, now, actor)
    except RunNowRefused as exc:
        raise Refused(f"run-now of {name} refused ({exc.code}: {exc.reason})") from None
    if not await engine_alive(store, now):
        say(
            f"queued run-now of {name} (request {request}); no engine is running,"
            " it runs when one starts"
        )
        return 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + REQUEST_WAIT
    while loop.time() < deadline:
        outcome, occurrence, reason = await store.request(request)
        if outcome == "started":
            say(f"started {name}: occurrence {occurrence}")
            return 0
        if outcome == "refused":
            raise Refused(f"run-now of {name} refused ({reason})")
        await asyncio.sleep(0.1)
    say(f"queued run-now of {name} (request {request}); the engine has not taken it yet")
    return 0


def edited_spec_fields(current: dict, changes: dict) -> dict:
    """The build_spec fields of a task after `task edit`: `current` (spec_fields of the
    task) with `changes` laid over it. A new schedule replaces the old one whatever its
    kind; '' for one of CLEARABLE drops the field; `disabled` is handled by the caller."""
    raw = dict(current)
    if any(key in changes for key in SCHEDULE_KEYS):
        for key in SCHEDULE_KEYS:
            raw.pop(key, None)
    for key, value in changes.items():
        if key == "disabled":
            continue
        if key in CLEARABLE and value == "":
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


def edited_spec(task: Task, changes: dict, now: int) -> TaskSpec:
    """`task edit`: the task's definition with the options given laid over it, checked
    as `task add` checks (BadInput, before anything is written)."""
    if not changes:
        raise BadInput("edit", "give an option to change (those of task add) or -- ARGV")
    raw = edited_spec_fields(spec_fields(task.spec), changes)
    # A one-time task whose instant passed keeps it; a new --at must be in the future.
    return build_spec(raw, now, allow_past="at" not in changes)


async def save_edit(
    store: Store,
    task: Task,
    spec: TaskSpec,
    changes: dict,
    clock: Clock,
    actor: Actor | None = None,
) -> int:
    """Write the edit in one transaction (Store.edit_task), refused when the task changed
    since it was read."""
    enabled = False if changes.get("disabled") else None
    result = await store.edit_task(
        task.name, spec, clock.now(), enabled=enabled, generation=task.generation, actor=actor
    )
    nxt = (
        shown_time(result.next_run_at, task_zone(result))
        if result.next_run_at is not None
        else "none"
    )
    line = task_line("edited", result.name, result.spec.schedule_text(), nxt)
    if not result.enabled:
        line += " (disabled)"
    if result.overridden:
        line += "; overrides tickui.toml until the file changes this task"
    print(printable(line))
    return 0


def backfill_plan(task: Task, args: argparse.Namespace, now: int) -> list[int]:
    """`task backfill NAME --from --to [--max N]`: the slots, checked (BadInput)."""
    if args.start is None or args.end is None:
        raise BadInput("backfill", "give --from INSTANT and --to INSTANT (or --cancel)")
    return backfill_slots(task.schedule, args.start, args.end, now, args.limit)


async def save_backfill(
    store: Store, task: Task, slots: list[int], clock: Clock, actor: Actor | None = None
) -> int:
    now = clock.now()
    ids, had = await store.queue_backfill(task.name, slots, now, actor=actor)
    line = f"queued {len(ids)} backfill run(s) of {task.name}"
    if ids:
        zone = task_zone(task)
        line += f", slots {shown_time(slots[0], zone)} to {shown_time(slots[-1], zone)}"
    if had:
        line += f"; {len(had)} slot(s) already had a run"
    if ids:
        when = "now" if await engine_alive(store, now) else "when an engine runs"
        line += f"; they start {when}, oldest first, under {task.spec.concurrency}"
    say(line)
    return 0
