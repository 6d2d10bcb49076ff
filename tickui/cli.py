"""The `tickui` command line (DESIGN 5). Exit 0 on success, 2 on bad input, 1 otherwise."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tickui import backfill, checks, dbfile
from tickui import config as config_mod
from tickui.checks import arg, arg_duration, arg_number
from tickui.clock import SystemClock
from tickui.errors import BadInput, NotFound, StoreError, TickuiError
from tickui.redact import printable, redact_data, safe_text
from tickui.retries import attempt_text, wait_text
from tickui.schedules import preview
from tickui.spec import build_spec, check_name
from tickui.store import Store
from tickui.ticker_config import TOPIC
from tickui.timeutil import iso, parse_instant
from tickui.wire import DEFAULT_TOPIC, WIRES

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
MAX_HISTORY = 100_000
MAX_SECONDS = 366 * 86400.0  # --for: up to a year


class UsageError(BadInput):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line, with exit 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError("", message)


def _globals() -> argparse.ArgumentParser:
    shared = _Parser(add_help=False)
    shared.add_argument(
        "--db",
        type=arg(checks.path_text, "--db"),
        default=argparse.SUPPRESS,
        help="database file (env TICKUI_DB)",
    )
    shared.add_argument(
        "--config",
        type=arg(checks.path_text, "--config"),
        default=argparse.SUPPRESS,
        help="config file (tickui.toml)",
    )
    return shared


def build_parser() -> argparse.ArgumentParser:
    shared = _globals()
    parser = _Parser(prog="tickui", parents=[shared], description="A terminal job scheduler.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    # Given before or after the subcommand; SUPPRESS keeps a subcommand's default from
    # overwriting `tickui --time-scale 60 demo`.
    scale = arg_number("--time-scale", 1, 3600)
    seconds = arg_number("--for", 0.001, MAX_SECONDS)
    kafka = arg(checks.bootstrap, "--kafka")
    parser.add_argument("--time-scale", type=scale, default=1.0, metavar="N")
    real = "with --time-scale: run the real commands (still on a copy of the database)"
    parser.add_argument("--real-commands", action="store_true", help=real)
    demo = sub.add_parser("demo", parents=[shared], help="the dashboard on sample tasks")
    demo.add_argument("--time-scale", type=scale, default=argparse.SUPPRESS, metavar="N")
    run = sub.add_parser("run", parents=[shared], help="run the engine headless")
    run.add_argument("--for", dest="duration", type=seconds, metavar="SECONDS")
    run.add_argument("--time-scale", type=scale, default=argparse.SUPPRESS, metavar="N")
    run.add_argument("--real-commands", action="store_true", default=argparse.SUPPRESS, help=real)
    run.add_argument(
        "--stop-grace", type=arg_duration("--stop-grace", 0, 3600 * 1_000_000), metavar="DURATION"
    )
    run.add_argument(
        "--tick-interval",
        type=arg_duration("--tick-interval", 10_000, 60_000_000),
        metavar="DURATION",
    )
    run.add_argument("--kafka", type=kafka, metavar="BOOTSTRAP", help="publish ticks to Kafka")
    run.add_argument("--topic", metavar="NAME", help="tick topic (default: the wire's)")
    wires = {"choices": WIRES, "metavar": "bare|envelope"}
    run.add_argument("--wire", **wires, help="tick format on Kafka (bare: the seed's)")
    run.add_argument(
        "--valkey",
        type=arg(checks.valkey_url, "--valkey"),
        metavar="URL",
        help="keep tick sequence numbers in Valkey",
    )

    ticks = sub.add_parser("ticks", parents=[shared], help="follow ticks on Kafka")
    ticks.add_argument("--kafka", type=kafka, metavar="BOOTSTRAP")
    ticks.add_argument("--topic", metavar="NAME")
    ticks.add_argument("--wire", **wires, help="only picks the default topic; both are read")
    ticks.add_argument("--json", action="store_true", help="one JSON object per line")
    ticks.add_argument("--for", dest="duration", type=seconds, metavar="SECONDS")
    ticks.add_argument("--count", type=arg_number("--count", 1, 10**9, integer=True), metavar="N")
    ticks.add_argument("--from-beginning", action="store_true")

    task = sub.add_parser("task", parents=[shared], help="add, list, show and change tasks")
    tsub = task.add_subparsers(dest="action", parser_class=_Parser, required=True)
    add = tsub.add_parser("add", parents=[shared], help="add a task: ... -- ARGV")
    add.add_argument("name")
    task_options(add)
    edit = tsub.add_parser("edit", parents=[shared], help="change a task: add's options")
    edit.add_argument("name")
    edit.add_argument("--rename", type=arg(check_name, "--rename"), metavar="NAME")
    task_options(edit, edit=True)
    export = tsub.add_parser("export", parents=[shared], help="every task as [[task]] entries")
    export.set_defaults(name=None)
    back = tsub.add_parser("backfill", parents=[shared], help="run past slots in (from, to]")
    back.add_argument("name")
    back.add_argument("--from", dest="start", type=arg(parse_instant, "--from"), metavar="INSTANT")
    back.add_argument("--to", dest="end", type=arg(parse_instant, "--to"), metavar="INSTANT")
    most = arg_number("--max", 1, backfill.MAX_MAX, integer=True)
    back.add_argument("--max", dest="limit", type=most, default=backfill.DEFAULT_MAX, metavar="N")
    back.add_argument("--cancel", action="store_true", help="cancel its queued backfill runs")
    lst = tsub.add_parser("list", parents=[shared])
    lst.add_argument("--json", action="store_true")
    show = tsub.add_parser("show", parents=[shared])
    show.add_argument("name")
    show.add_argument("--json", action="store_true")
    for action in ("enable", "rm", "run-now"):
        tsub.add_parser(action, parents=[shared]).add_argument("name")
    disable = tsub.add_parser("disable", parents=[shared])
    disable.add_argument("name")
    disable.add_argument("--note", type=arg(checks.text, "--note"))

    hist = sub.add_parser("history", parents=[shared], help="occurrences, newest first")
    hist.add_argument("name", nargs="?")
    hist.add_argument(
        "--limit", type=arg_number("--limit", 1, MAX_HISTORY, integer=True), default=50
    )
    hist.add_argument("--json", action="store_true")
    hooks = sub.add_parser("hooks", parents=[shared], help="recent hook deliveries")
    hooks.add_argument("--json", action="store_true")
    hooks.add_argument("--limit", type=arg_number("--limit", 1, 1000, integer=True), default=50)
    return parser


def task_options(parser: argparse.ArgumentParser, edit: bool = False) -> None:
    """`task add`'s options (the schedule, policies, retries, ...): `task edit` takes the
    same ones, each optional; there only the options given are in the namespace (their
    default is SUPPRESS) and only they change. Add an option of `task add` here."""
    when = parser.add_mutually_exclusive_group(required=not edit)
    when.add_argument("--cron", metavar="EXPR")
    when.add_argument("--every", metavar="DURATION")
    when.add_argument("--at", metavar="INSTANT")
    parser.add_argument("--tz", metavar="ZONE")
    parser.add_argument("--misfire", metavar="POLICY")
    parser.add_argument("--concurrency", metavar="POLICY")
    parser.add_argument("--timeout", metavar="DURATION")
    parser.add_argument("--jitter", metavar="DURATION")
    parser.add_argument("--anchor", metavar="INSTANT")
    parser.add_argument("--cwd", metavar="DIR")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--disabled", action="store_true")
    parser.add_argument("--retries", metavar="N", help="retry a failed run N times (0-100)")
    parser.add_argument("--retry-delay", metavar="DURATION", help="first retry delay (10s)")
    parser.add_argument("--retry-max-delay", metavar="DURATION", help="longest delay (1h)")
    parser.add_argument("--retry-on", metavar="LIST", help="exit,timeout,interrupted,dispatch")
    parser.add_argument("--pause-after", metavar="N", help="disable after N failed slots")
    if edit:
        _only_given(parser)


def _only_given(parser: argparse.ArgumentParser) -> None:
    """Make each of task_options' options absent from the namespace unless given, and
    record their dests (`_task_options`) for edit_raw."""
    skip = {"help", "db", "config", "rename"}
    dests = []
    for action in parser._actions:
        if action.option_strings and action.dest not in skip:
            action.default = argparse.SUPPRESS
            dests.append(action.dest)
    parser.set_defaults(_task_options=tuple(dests))


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    args = list(argv)
    if "--" in args:
        at = args.index("--")
        return args[:at], args[at + 1 :]
    return args, None


def db_path(args: argparse.Namespace, settings: config_mod.Settings) -> Path:
    """The database path, with a leading `~` expanded here, once, so that every command
    (the read-only ones too) looks at the same file."""
    given, name = getattr(args, "db", None), "--db"
    if given is None and "TICKUI_DB" in os.environ:
        given = checks.path_text(os.environ["TICKUI_DB"], "TICKUI_DB")
        name = "TICKUI_DB"
    if given:
        try:
            return Path(given).expanduser()
        except RuntimeError:  # `~user` with no such user, or no home directory
            raise BadInput(name, f"{checks.shown(given)}: cannot expand '~' here") from None
    return settings.db or config_mod.default_db()


def say(text: Any, redacted: bool = False) -> None:
    """Every line the CLI prints: redacted, control characters made visible. `redacted`:
    the caller redacted each part already (a second pass over the joined line could let
    one argument's secret swallow the arguments after it)."""
    print(printable(text, newlines=True) if redacted else safe_text(text, newlines=True))


def _print_json(value: Any) -> None:
    """JSON output: every string redacted; JSON's escaping makes control characters visible."""
    json.dump(redact_data(value), sys.stdout, indent=2)
    sys.stdout.write("\n")


async def _with_store(
    path: Path, action, readonly: bool = False, name: str | None = None, empty: Any = None
) -> int:
    """Run `action` on the database. Read-only commands open it read-only. With no database
    at `path` nothing is created: a command about one named task says that task does not
    exist (exit 2); a listing says there is no database and prints `empty` (exit 0)."""
    if (name is not None or empty is not None) and dbfile.lookup(path) is None:
        if name is not None:
            raise NotFound(f"no task named {name!r} (no database at {path})")
        print(
            f"tickui: no database at {safe_text(path)} (tickui task add or tickui run creates one)",
            file=sys.stderr,
        )
        empty()
        return 0
    store = await Store.open(path, readonly=readonly)
    try:
        return await action(store)
    except sqlite3.Error as exc:
        raise dbfile.sqlite_failure(exc, path) from None
    finally:
        await store.close()


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


def started_text(occ: Any, now: int) -> str:
    """When a run started; for a queued one, when it may ("next in 40s")."""
    if occ.state == "queued":
        return wait_text(occ.retry_at if occ.retry_at is not None else occ.scheduled_for, now)
    return iso(occ.started_at) or "-"


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


def _table(rows: list[list[Any]], headers: list[str]) -> str:
    rows = [[safe_text(cell) for cell in row] for row in rows]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


async def _read_task(path: Path, name: str) -> Any:
    """Task `name`, read before a change is checked: read-only, so a refused change leaves
    the file's bytes as they were; a file from an older tickui (which read-only commands
    cannot read) is opened for writing, which migrates it, as any change does."""
    from tickui import schema
    from tickui.store import inspect_file

    version = inspect_file(path) if dbfile.lookup(path) is not None else None
    old = version is not None and version < schema.VERSION
    get = functools.partial(Store.get_task, name=name)
    return await _with_store(path, get, readonly=not old, name=name)


async def cmd_task(args: argparse.Namespace, command: list[str] | None, path: Path) -> int:
    from tickui import commands

    clock = SystemClock()
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
        # Read (read-only: a refused edit leaves the file's bytes as they were), check,
        # then write in one transaction that refuses a task changed meanwhile.
        changes = _task_edit_raw(args, command)
        current = await _read_task(path, args.name)
        spec = commands.edited_spec(current, changes, clock.now())
        return await _with_store(
            path,
            functools.partial(
                commands.save_edit, task=current, spec=spec, changes=changes, clock=clock
            ),
        )

    if args.action == "backfill" and args.cancel and (args.start or args.end):
        raise BadInput("--cancel", "cancels every queued backfill run: give it alone")
    if args.action == "backfill" and not args.cancel:
        # Read-only first: a refused backfill (too many slots, ...) writes nothing.
        task = await _read_task(path, args.name)
        slots = commands.backfill_plan(task, args, clock.now())
        return await _with_store(
            path, functools.partial(commands.save_backfill, task=task, slots=slots, clock=clock)
        )

    async def action(store: Store) -> int:
        if args.action == "export":
            from tickui.export import export_text

            sys.stdout.write(export_text(await store.list_tasks(with_stats=False)))
            return 0
        if args.action == "add":
            task = await store.add_task(spec, clock.now())
            nxt = iso(task.next_run_at) or "none"
            say(f"added {task.name}: {task.spec.schedule_text()}, next run {nxt}")
            return 0
        if args.action == "list":
            tasks = await store.list_tasks()
            if args.json:
                _print_json([t.to_json() for t in tasks])
            else:
                rows = [
                    [
                        t.name,
                        t.spec.schedule_text(),
                        (iso(t.next_run_at) or "-") if t.enabled else "-",
                        "yes" if t.enabled else f"no {t.note or ''}".strip(),
                        t.spec.misfire,
                        t.spec.concurrency,
                        t.stats.last_state or "-",
                        f"{t.source} (overridden)" if t.overridden else t.source,
                    ]
                    for t in tasks
                ]
                headers = ["NAME", "SCHEDULE", "NEXT", "ENABLED", "MISFIRE", "OVERLAP", "LAST"]
                headers.append("SOURCE")
                say(_table(rows, headers) if rows else "no tasks")
            return 0
        if args.action == "show":
            task = await store.get_task(args.name)
            data = task.to_json()
            data["preview"] = [iso(t) for t in preview(task.schedule, clock.now(), 5)]
            data.update(await retry_facts(store, task, clock.now()))
            if args.json:
                _print_json([data])
            else:
                # Redacted item by item, then joined: redacting the joined text again would
                # let one argument's secret swallow the arguments after it.
                for key, value in redact_data(data).items():
                    shown = ", ".join(map(str, value)) if isinstance(value, list) else value
                    if key == "pending" and isinstance(value, dict):
                        shown = value["text"]
                    say(f"{key:>18}: {'-' if shown is None else shown}", redacted=True)
            return 0
        return await commands.change_task(store, args, clock)

    readonly = args.action in ("list", "show", "export")
    named = None if args.action in ("add", "list", "export") else args.name
    empty = None
    if args.action == "export":
        empty = functools.partial(sys.stdout.write, "")
    if args.action == "list":
        empty = (
            functools.partial(_print_json, []) if args.json else functools.partial(say, "no tasks")
        )
    return await _with_store(path, action, readonly=readonly, name=named, empty=empty)


async def cmd_history(args: argparse.Namespace, path: Path) -> int:
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
        if args.json:
            _print_json([o.to_json() for o in occs])
            return 0
        now = SystemClock().now()
        tries = {t.name: t.spec.retries for t in await store.list_tasks(with_stats=False)}
        rows = [
            [
                str(o.id),
                o.task,
                o.kind,
                iso(o.scheduled_for),
                o.state,
                started_text(o, now),
                attempt_text(o.attempt, tries.get(o.task, 0)).removeprefix("attempt ") or "-",
                o.error_code or "",
                safe_text(o.detail or "")[:60],
            ]
            for o in occs
        ]
        headers = [
            "ID", "TASK", "KIND", "SCHEDULED", "STATE", "STARTED", "ATTEMPT", "CODE", "DETAIL"
        ]  # fmt: skip
        say(_table(rows, headers) if rows else "no occurrences")
        return 0

    empty = (
        functools.partial(_print_json, [])
        if args.json
        else functools.partial(say, "no occurrences")
    )
    return await _with_store(path, action, readonly=True, name=args.name, empty=empty)


def cmd_ticks(args: argparse.Namespace, settings: config_mod.Settings) -> int:
    from tickui.tail import main_sync

    bootstrap = args.kafka or settings.ticker.kafka_bootstrap
    if not bootstrap:
        raise BadInput("kafka", "give --kafka BOOTSTRAP (or TICKUI_KAFKA_BOOTSTRAP)")
    topic = args.topic or (DEFAULT_TOPIC[args.wire] if args.wire else settings.ticker.topic)
    if not TOPIC.fullmatch(topic):
        raise BadInput("--topic", f"{checks.shown(topic)} is not a valid Kafka topic name")
    return main_sync(bootstrap, topic, args.json, args.duration, args.count, args.from_beginning)


def run(argv: Sequence[str]) -> int:
    args_part, command = _split_command(argv)
    args = build_parser().parse_args(args_part)
    config_path = getattr(args, "config", None)
    settings = config_mod.load(Path(config_path) if config_path else None, SystemClock().now())
    path = db_path(args, settings)
    if args.command in (None, "demo"):
        from tickui.ui.launch import run_dashboard

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return run_dashboard(args, settings, path, demo=args.command == "demo")
    if args.command == "run":
        from tickui.runner import run_headless

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(run_headless(args, settings, path))
    if args.command == "ticks":
        return cmd_ticks(args, settings)
    if args.command == "task":
        return asyncio.run(cmd_task(args, command, path))
    if args.command == "hooks":
        from tickui.hooks.command import cmd_hooks

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(cmd_hooks(args, path))
    if command is not None:
        raise UsageError("", "'--' and a command only go with 'task add'")
    return asyncio.run(cmd_history(args, path))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # aiokafka logs every failed connection; tickui reports outages itself, in one line,
    # through the breaker's transitions and the metrics.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        code = run(argv)
    except (BadInput, NotFound, StoreError) as exc:
        _complain(exc)
        code = EXIT_BAD_INPUT
    except TickuiError as exc:  # Unavailable and the rest: not the input's fault
        _complain(exc)
        code = EXIT_FAILURE
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        # The reader went away (`tickui history | head`): end quietly, as a command that
        # SIGPIPE ends does, and keep Python from complaining when it flushes stdout.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + 13  # SIGPIPE
    except OSError as exc:
        what = f"{exc.filename}" if exc.filename else "system error"
        _complain(dbfile.os_failure(exc, what))
        code = EXIT_FAILURE
    except sqlite3.Error as exc:
        _complain(f"database: {exc}")
        code = EXIT_FAILURE
    except Exception as exc:  # a bug: still one line, never a traceback on the terminal
        _complain(f"internal error: {type(exc).__name__}: {exc} (please report this)")
        code = EXIT_FAILURE
    sys.exit(code)


def _complain(exc: BaseException | str) -> None:
    """The one line on stderr: redacted, control characters visible, never multi-line."""
    print(f"tickui: {safe_text(exc)}", file=sys.stderr)
