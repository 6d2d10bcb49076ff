"""The `tickui` command line. Exit 0 on success, 2 on bad input, 1 otherwise."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from tickui.cli import key as key_cli
from tickui.cli import worker as worker_cli
from tickui.cli import workers as workers_cli
from tickui.cli.output import UsageError
from tickui.common import checks
from tickui.common.checks import arg, arg_number
from tickui.common.errors import BadInput, NotFound, StoreError, TickuiError
from tickui.common.options import add_argument, env_value, option
from tickui.common.redact import safe_text
from tickui.common.timeutil import parse_instant
from tickui.model import backfill
from tickui.model.retries import REASONS
from tickui.model.spec import MISFIRE_POLICIES, OVERLAP_POLICIES, check_name
from tickui.schedules.cron import MACROS
from tickui.ticks.config import TOPIC, add_kafka_arguments
from tickui.ticks.wire import DEFAULT_TOPIC

if TYPE_CHECKING:
    from tickui.runtime import settings as config_mod

EXIT_BAD_INPUT = 2
MAX_HISTORY = 100_000
EXIT_FAILURE = 1
MAX_SECONDS = 366 * 86400.0  # --for: up to a year


# argparse's words for a value not among the choices: "invalid choice: 'lsit' (choose
# from 'add', 'edit', ...)" (the quotes differ between Python versions).
_INVALID_CHOICE = re.compile(r"invalid choice: (?P<value>.*?) \(choose from (?P<choices>.*)\)$")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line, with exit 2, and names the
    closest choice to a misspelt one."""

    def error(self, message: str) -> NoReturn:
        hint = did_you_mean(message)
        for action in self._actions:  # a subcommand not among the choices: an unknown command
            if isinstance(action, argparse._SubParsersAction):
                named = argparse._get_action_name(action)
                message = message.replace(f"argument {named}: invalid choice", "unknown command")
        raise UsageError("", message + hint)


def did_you_mean(message: str) -> str:
    """ " (did you mean 'list'?)" for argparse's complaint about an unknown choice."""
    found = _INVALID_CHOICE.search(message)
    if found is None:
        return ""
    import difflib

    value = found["value"].strip("'\"")
    choices = [c.strip().strip("'\"") for c in found["choices"].split(",")]
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# The usage line of a command that takes a command: argparse cannot show what follows --.
_ARGV_EPILOG = (
    "ARGV is the program and its arguments, after '--', run without a shell. "
    "For a shell line: -- sh -c 'echo hi && date'."
)


def _with_argv(parser: argparse.ArgumentParser, tail: str) -> None:
    """Show `tail` (`-- ARGV...`) at the end of `parser`'s usage, and say what ARGV is."""
    usage = parser.format_usage().removeprefix("usage: ").rstrip()
    parser.usage = usage.replace("%", "%%") + f" {tail}"
    parser.epilog = _ARGV_EPILOG


def _globals() -> argparse.ArgumentParser:
    shared = _Parser(add_help=False)
    add_argument(shared, option("engine", "db"), suppress=True)
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
    lapse = "run N times as fast on a copy of the database (time-lapse, 1 to 3600)"
    parser.add_argument("--time-scale", type=scale, default=1.0, metavar="N", help=lapse)
    real = "with --time-scale: run the real commands (still on a copy of the database)"
    parser.add_argument("--real-commands", action="store_true", help=real)
    key_cli.add_signing_arguments(parser)  # the dashboard's engine, dispatching to workers
    demo = sub.add_parser("demo", parents=[shared], help="the dashboard on sample tasks")
    demo.add_argument(
        "--time-scale", type=scale, default=argparse.SUPPRESS, metavar="N", help=lapse
    )
    run = sub.add_parser("run", parents=[shared], help="run the engine headless")
    run.add_argument(
        "--for",
        dest="duration",
        type=seconds,
        metavar="SECONDS",
        help="stop after this long; runs still going then get --stop-grace, then are cancelled",
    )
    shown = run.add_mutually_exclusive_group()
    shown.add_argument(
        "-q", "--quiet", action="store_true", help="no line per run, only problems and the summary"
    )
    shown.add_argument(
        "--json", action="store_true", help="each run's start and end as one JSON object a line"
    )
    run.add_argument("--time-scale", type=scale, default=argparse.SUPPRESS, metavar="N", help=lapse)
    run.add_argument("--real-commands", action="store_true", default=argparse.SUPPRESS, help=real)
    for table, key in (
        ("engine", "stop_grace"), ("ticker", "interval"), ("kafka", "bootstrap"),
        ("dispatch", "mode"), ("ticker", "topic"), ("kafka", "wire"), ("valkey", "url"),
    ):  # fmt: skip
        add_argument(run, option(table, key))
    key_cli.add_signing_arguments(run)
    add_kafka_arguments(run)

    ticks = sub.add_parser("ticks", parents=[shared], help="follow ticks on Kafka")
    add_argument(ticks, option("kafka", "bootstrap"), help="host:port[,host:port]")
    add_argument(ticks, option("ticker", "topic"))
    add_argument(ticks, option("kafka", "wire"), help="only picks the default topic; both are read")
    ticks.add_argument("--json", action="store_true", help="one JSON object per line")
    ticks.add_argument(
        "--for", dest="duration", type=seconds, metavar="SECONDS", help="stop after this long"
    )
    ticks.add_argument(
        "--count",
        type=arg_number("--count", 1, 10**9, integer=True),
        metavar="N",
        help="stop after N ticks",
    )
    ticks.add_argument("--from-beginning", action="store_true", help="the topic's oldest first")
    add_kafka_arguments(ticks)

    task = sub.add_parser("task", parents=[shared], help="add, list, show and change tasks")
    tsub = task.add_subparsers(dest="action", parser_class=_Parser, required=True)
    add = tsub.add_parser("add", parents=[shared], help="add a task: ... -- ARGV")
    add.add_argument("name", help="the task's name (letters, digits, . _ -)")
    task_options(add)
    _with_argv(add, "-- ARGV...")
    edit = tsub.add_parser("edit", parents=[shared], help="change a task: add's options [-- ARGV]")
    edit.add_argument("name", help="the task to change")
    edit.add_argument(
        "--rename", type=arg(check_name, "--rename"), metavar="NAME", help="its new name"
    )
    task_options(edit, edit=True)
    _with_argv(edit, "[-- ARGV...]")
    export = tsub.add_parser("export", parents=[shared], help="every task as [[task]] entries")
    export.set_defaults(name=None)
    back = tsub.add_parser("backfill", parents=[shared], help="run past slots in (from, to]")
    back.add_argument("name", help="the task whose past slots run")
    back.add_argument(
        "--from", dest="start", type=arg(parse_instant, "--from"), metavar="INSTANT",
        help="slots after this instant",
    )  # fmt: skip
    back.add_argument(
        "--to", dest="end", type=arg(parse_instant, "--to"), metavar="INSTANT",
        help="up to this instant, included",
    )  # fmt: skip
    most = arg_number("--max", 1, backfill.MAX_MAX, integer=True)
    back.add_argument(
        "--max", dest="limit", type=most, default=backfill.DEFAULT_MAX, metavar="N",
        help=f"at most N slots (default {backfill.DEFAULT_MAX}, up to {backfill.MAX_MAX})",
    )  # fmt: skip
    back.add_argument("--cancel", action="store_true", help="cancel its queued backfill runs")
    json_flag = "one JSON array"
    lst = tsub.add_parser("list", parents=[shared], help="every task, with its next run")
    lst.add_argument("--json", action="store_true", help=json_flag)
    show = tsub.add_parser("show", parents=[shared], help="one task and its recent runs")
    show.add_argument("name", help="the task")
    show.add_argument("--json", action="store_true", help=json_flag)
    for action, said in (
        ("enable", "switch a task on"),
        ("rm", "delete a task (its history stays)"),
        ("run-now", "run a task once now (an engine must be running)"),
    ):
        tsub.add_parser(action, parents=[shared], help=said).add_argument("name", help="the task")
    disable = tsub.add_parser("disable", parents=[shared], help="switch a task off")
    disable.add_argument("name", help="the task")
    disable.add_argument("--note", type=arg(checks.text, "--note"), help="why, shown beside it")

    hist = sub.add_parser("history", parents=[shared], help="occurrences, newest first")
    hist.add_argument("name", nargs="?", help="one task's only")
    hist.add_argument(
        "--limit",
        type=arg_number("--limit", 1, MAX_HISTORY, integer=True),
        default=50,
        help=f"at most this many (default 50, up to {MAX_HISTORY})",
    )
    hist.add_argument("--json", action="store_true", help=json_flag)
    hist.add_argument(
        "--follow",
        action="store_true",
        help="then print each run as it settles, until Ctrl-C (with --json: a line each)",
    )
    logs = sub.add_parser("logs", parents=[shared], help="one run's output")
    logs.add_argument(
        "run", type=arg_number("RUN", 1, 2**63 - 1, integer=True), metavar="RUN",
        help="the run's id (the ID column of tickui history)",
    )  # fmt: skip
    logs.add_argument("--follow", action="store_true", help="while it runs, print what it adds")
    hooks = sub.add_parser("hooks", parents=[shared], help="recent hook deliveries")
    hooks.add_argument("--json", action="store_true", help=json_flag)
    hooks.add_argument(
        "--limit",
        type=arg_number("--limit", 1, 1000, integer=True),
        default=50,
        help="at most this many (default 50, up to 1000)",
    )
    worker = sub.add_parser("worker", parents=[shared], help="run commands sent over Kafka")
    worker_cli.add_arguments(worker)
    workers = sub.add_parser("workers", parents=[shared], help="the workers the engine has heard")
    workers_cli.add_arguments(workers)
    key = sub.add_parser("key", help="make and rotate the key dispatch messages are signed with")
    key_cli.add_arguments(key)
    return parser


def task_options(parser: argparse.ArgumentParser, edit: bool = False) -> None:
    """`task add`'s options (the schedule, policies, retries, ...): `task edit` takes the
    same ones, each optional; there only the options given are in the namespace (their
    default is SUPPRESS) and only they change. Add an option of `task add` here."""
    when = parser.add_mutually_exclusive_group(required=not edit)
    when.add_argument(
        "--cron",
        metavar="EXPR",
        help="a cron schedule: 5 fields (6 with seconds, first), or "
        f"{', '.join(MACROS)}; e.g. '30 2 * * *'",
    )
    when.add_argument("--every", metavar="DURATION", help="an interval: 30s, 5m, 1h (100ms-366d)")
    when.add_argument(
        "--at", metavar="INSTANT", help="once, at an ISO 8601 instant (2027-01-15T08:00:00Z)"
    )
    parser.add_argument("--tz", metavar="ZONE", help="IANA time zone of a cron (default UTC)")
    parser.add_argument(
        "--misfire",
        choices=MISFIRE_POLICIES,
        metavar="|".join(MISFIRE_POLICIES),
        help="slots missed while nothing ran: run_once (one run for them all, default), "
        "skip (none) or run_all (one each)",
    )
    parser.add_argument(
        "--concurrency",
        choices=OVERLAP_POLICIES,
        metavar="|".join(OVERLAP_POLICIES),
        help="a slot while a run is active: forbid (skip it, default), allow (run beside), "
        "replace (cancel the running one) or buffer_one (run it next)",
    )
    parser.add_argument("--timeout", metavar="DURATION", help="stop a run after this long")
    parser.add_argument("--jitter", metavar="DURATION", help="start each run up to this late")
    parser.add_argument("--anchor", metavar="INSTANT", help="an interval's first slot")
    parser.add_argument("--cwd", metavar="DIR", help="the command's working folder")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="set for the command"
    )
    parser.add_argument("--disabled", action="store_true", help="add it switched off")
    parser.add_argument("--retries", metavar="N", help="retry a failed run N times (0-100)")
    parser.add_argument("--retry-delay", metavar="DURATION", help="first retry delay (10s)")
    parser.add_argument("--retry-max-delay", metavar="DURATION", help="longest delay (1h)")
    parser.add_argument(
        "--retry-on",
        metavar="LIST",
        help=f"which failures retry, comma-separated, of {', '.join(REASONS)} "
        "(default exit,timeout,interrupted)",
    )
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
    from tickui.runtime import settings as config_mod

    given, name = getattr(args, "db", None), "--db"
    if given is None and (from_env := env_value(option("engine", "db"), dict(os.environ))):
        given, name = from_env
        given = checks.path_text(given, name)
    if given:
        try:
            return Path(given).expanduser()
        except RuntimeError:  # `~user` with no such user, or no home directory
            raise BadInput(name, f"{checks.shown(given)}: cannot expand '~' here") from None
    return settings.db or config_mod.default_db()


def cmd_ticks(args: argparse.Namespace, settings: config_mod.Settings) -> int:
    from tickui.ticks.config import build, kafka_access, kafka_flags
    from tickui.ticks.tail import main_sync

    flags = {"kafka_bootstrap": (args.kafka, "--kafka"), **kafka_flags(args)}
    bootstrap = kafka_access(build(settings.raw, settings.env, flags))
    if bootstrap is None:
        raise BadInput("kafka", "give --kafka BOOTSTRAP (or TICKUI_KAFKA_BOOTSTRAP)")
    topic = args.topic or (DEFAULT_TOPIC[args.wire] if args.wire else settings.ticker.topic)
    if not TOPIC.fullmatch(topic):
        raise BadInput("--topic", f"{checks.shown(topic)} is not a valid Kafka topic name")
    return main_sync(bootstrap, topic, args.json, args.duration, args.count, args.from_beginning)


def parse(args_part: list[str], command: list[str] | None) -> argparse.Namespace:
    """The command line before `--`; words argparse does not know are refused, with the
    hint that a command to run goes after `--` where one may."""
    args, extras = build_parser().parse_known_args(args_part)
    if extras:
        said = f"unrecognized arguments: {' '.join(extras)}"
        takes = getattr(args, "command", None) == "task" and args.action in ("add", "edit")
        if takes and command is None:
            raise UsageError("", f"{said} (put the command to run after '--': ... -- ARGV)")
        raise UsageError("", said)
    return args


def _listing(args: argparse.Namespace, path: Path) -> bool:
    """`task list` and `history` (not --follow) of a SQLite file: read through a blocking
    read-only connection (tickui.store.reader), which asks for no event loop, no aiosqlite
    and no store implementation; other stores go through the Store."""
    from tickui.store import is_sqlite_file

    wanted = (args.command == "task" and args.action == "list") or (
        args.command == "history" and not args.follow
    )
    return wanted and is_sqlite_file(path)


def run(argv: Sequence[str]) -> int:
    args_part, command = _split_command(argv)
    args = parse(args_part, command)
    # Loaded once the command line is read: `--help` and a bad command line need neither
    # the settings nor the event loop, and each command loads only its own part.
    from tickui.common.clock import SystemClock
    from tickui.runtime import settings as config_mod

    config_path = getattr(args, "config", None)
    settings = config_mod.load(Path(config_path) if config_path else None, SystemClock().now())
    dispatch = settings.dispatch.with_flags(
        getattr(args, "key_file", None), getattr(args, "insecure", False)
    )
    settings = dataclasses.replace(settings, dispatch=dispatch)
    if args.command == "key":
        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return key_cli.main(args)
    path = db_path(args, settings)
    if command is None and _listing(args, path):  # read without an event loop
        from tickui.cli import listing

        return (
            listing.list_now(args, path)
            if args.command == "task"
            else listing.history_now(args, path)
        )
    import asyncio
    import logging

    # aiokafka logs every failed connection; tickui reports outages itself, in one line,
    # through the breaker's transitions and the metrics.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    if args.command in (None, "demo"):
        from tickui.ui.launch import run_dashboard

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        if args.command is None:  # its engine dispatches as the settings say
            from tickui.runtime.assembly import check_dispatch
            from tickui.ticks.config import kafka_access

            check_dispatch(settings.dispatch, kafka_access(settings.ticker))
        return run_dashboard(args, settings, path, demo=args.command == "demo")
    if args.command == "run":
        from tickui.cli.run import run_headless

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(run_headless(args, settings, path))
    if args.command == "ticks":
        return cmd_ticks(args, settings)
    if args.command == "task":
        from tickui.cli.task import cmd_task

        return asyncio.run(cmd_task(args, command, path))
    if args.command in ("worker", "workers"):
        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        if args.command == "worker":
            return worker_cli.main(args, settings)
        return asyncio.run(workers_cli.main(args, path))
    if args.command == "hooks":
        from tickui.cli.hooks import cmd_hooks

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(cmd_hooks(args, path))
    if command is not None:
        raise UsageError("", "'--' and a command only go with 'task add'")
    if args.command == "logs":
        from tickui.cli.follow import cmd_logs

        return asyncio.run(cmd_logs(args, path))
    from tickui.cli.task import cmd_history

    return asyncio.run(cmd_history(args, path))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
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
        from tickui.store import os_failure

        what = f"{exc.filename}" if exc.filename else "system error"
        _complain(os_failure(exc, what))
        code = EXIT_FAILURE
    except Exception as exc:
        # The store's error types, loaded here: --help and the commands that open no
        # database do not load the store.
        from tickui.store import DATABASE_ERRORS

        if isinstance(exc, DATABASE_ERRORS):
            _complain(f"database: {exc}")
        else:  # a bug: still one line, never a traceback on the terminal
            _complain(f"internal error: {type(exc).__name__}: {exc} (please report this)")
        code = EXIT_FAILURE
    sys.exit(code)


def _complain(exc: BaseException | str) -> None:
    """The one line on stderr: redacted, control characters visible, never multi-line."""
    print(f"tickui: {safe_text(exc)}", file=sys.stderr)
