"""The `tickui` command line. Exit 0 on success, 2 on bad input, 1 otherwise."""

# ruff: noqa: E402 (the imports follow the collector's pause)
from __future__ import annotations

import gc

# Loading the command line makes tens of thousands of objects (modules, classes,
# functions, the options) that live as long as the process: the cyclic collector, which
# would walk them over and over while they load (some 4 ms of a listing's start), is
# paused for the imports, and what they made is then set aside for good (gc.freeze) at
# the end of this module.
_COLLECTING = gc.isenabled()
gc.disable()

import argparse
import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from tickui.cli import key as key_cli
from tickui.cli.output import JSON_FLAG, UsageError
from tickui.common import checks
from tickui.common.checks import arg, arg_number
from tickui.common.errors import BAD_INPUT, BadInput, TickuiError
from tickui.common.options import add_argument, add_kafka_arguments, env_value, option
from tickui.common.redact import safe_text

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import NoReturn

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

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter, told the width it would ask shutil for (shutil brings
        bz2 and lzma, and a formatter is made for each argument added)."""
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]


def _help_width() -> int:
    """What argparse's HelpFormatter takes for its width: shutil.get_terminal_size's
    columns ($COLUMNS when a positive number, else the terminal's, else 80), less 2."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):  # no stdout, or not a terminal
            columns = 0
        columns = columns or 80
    return columns - 2


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


def _globals() -> argparse.ArgumentParser:
    shared = _Parser(add_help=False)
    add_argument(shared, option("engine", "db"), suppress=True)
    add_argument(shared, option("store", "url"), suppress=True)
    shared.add_argument(
        "--config",
        type=arg(checks.path_text, "--config"),
        default=argparse.SUPPRESS,
        help="config file (tickui.toml)",
    )
    return shared


# Given before or after the subcommand; a subcommand's copy defaults to SUPPRESS so that it
# does not overwrite `tickui --time-scale 60 demo`.
_SCALE = arg_number("--time-scale", 1, 3600)
_SECONDS = arg_number("--for", 0.001, MAX_SECONDS)
_LAPSE = "run N times as fast on a copy of the database (time-lapse, 1 to 3600)"
_REAL = "with --time-scale: run the real commands (still on a copy of the database)"
_WATCH = (
    "the dashboard without an engine or ticker: it takes no lease and starts nothing"
    " itself; run-now, cancel and edits go through the store to the holder"
)
COMMANDS = (
    "demo", "run", "ticks", "task", "history", "logs", "hooks", "worker", "workers", "store",
    "key", "serve", "audit",
)  # fmt: skip


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser. When `argv` starts with a command (and for `task`, an
    action), only that one is built below the top level: the line parses the same and its
    help is the same; `tickui --help` and a misspelt command get the whole tree."""
    words = list(argv[:2])
    command = words[0] if words and words[0] in COMMANDS else None
    shared = _globals()
    parser = _Parser(prog="tickui", parents=[shared], description="A terminal job scheduler.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    parser.add_argument("--time-scale", type=_SCALE, default=1.0, metavar="N", help=_LAPSE)
    parser.add_argument("--real-commands", action="store_true", help=_REAL)
    parser.add_argument("--watch", action="store_true", help=_WATCH)
    key_cli.add_signing_arguments(parser)  # the dashboard's engine, dispatching to workers
    for name, add in (
        ("demo", _add_demo), ("run", _add_run), ("ticks", _add_ticks), ("task", None),
        ("history", _add_history), ("logs", _add_logs), ("hooks", _add_hooks),
    ):  # fmt: skip
        if command not in (None, name):
            continue
        if add is not None:
            add(sub, shared)
            continue
        from tickui.cli import task_args  # its options (cron's @words, ...): for `task` only

        action = words[1] if command and len(words) > 1 else None
        task_args.add_task_parser(
            sub, shared, _Parser, action if action in task_args.ACTIONS else None
        )
    if command in (None, "serve"):
        from tickui.cli import serve as serve_cli

        serve = sub.add_parser("serve", parents=[shared], help=serve_cli.SAID)
        serve_cli.add_arguments(serve, _WATCH, _LAPSE, _REAL)
    if command in (None, "worker"):
        from tickui.cli import worker as worker_cli

        worker = sub.add_parser("worker", parents=[shared], help="run commands sent over Kafka")
        worker_cli.add_arguments(worker)
    if command in (None, "workers"):
        from tickui.cli import workers as workers_cli

        said = "the workers the engine has heard"
        workers_cli.add_arguments(sub.add_parser("workers", parents=[shared], help=said))
    if command in (None, "store"):
        from tickui.cli import store as store_cli

        said = "move a setup between stores (SQLite, PostgreSQL)"
        store_cli.add_arguments(sub.add_parser("store", help=said))
    if command in (None, "key"):
        said = "make and rotate the key dispatch messages are signed with"
        key_cli.add_arguments(sub.add_parser("key", help=said))
    if command in (None, "audit"):
        from tickui.cli import audit as audit_cli

        said = "who did what to which task, newest first"
        audit_cli.add_arguments(sub.add_parser("audit", parents=[shared], help=said))
    return parser


def _add_demo(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    demo = sub.add_parser("demo", parents=[shared], help="the dashboard on sample tasks")
    demo.add_argument(
        "--time-scale", type=_SCALE, default=argparse.SUPPRESS, metavar="N", help=_LAPSE
    )


def _add_run(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    run = sub.add_parser("run", parents=[shared], help="run the engine headless")
    run.add_argument(
        "--for",
        dest="duration",
        type=_SECONDS,
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
    run.add_argument(
        "--time-scale", type=_SCALE, default=argparse.SUPPRESS, metavar="N", help=_LAPSE
    )
    run.add_argument("--real-commands", action="store_true", default=argparse.SUPPRESS, help=_REAL)
    for table, key in (
        ("engine", "stop_grace"), ("ticker", "interval"), ("kafka", "bootstrap"),
        ("dispatch", "mode"), ("ticker", "topic"), ("kafka", "wire"), ("valkey", "url"),
        ("metrics", "listen"),
    ):  # fmt: skip
        add_argument(run, option(table, key))
    key_cli.add_signing_arguments(run)
    add_kafka_arguments(run)


def _add_ticks(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    ticks = sub.add_parser("ticks", parents=[shared], help="follow ticks on Kafka")
    add_argument(ticks, option("kafka", "bootstrap"), help="host:port[,host:port]")
    add_argument(ticks, option("ticker", "topic"))
    add_argument(ticks, option("kafka", "wire"), help="only picks the default topic; both are read")
    ticks.add_argument("--json", action="store_true", help="one JSON object per line")
    ticks.add_argument(
        "--for", dest="duration", type=_SECONDS, metavar="SECONDS", help="stop after this long"
    )
    ticks.add_argument(
        "--count",
        type=arg_number("--count", 1, 10**9, integer=True),
        metavar="N",
        help="stop after N ticks",
    )
    ticks.add_argument("--from-beginning", action="store_true", help="the topic's oldest first")
    add_kafka_arguments(ticks)


def _add_history(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    hist = sub.add_parser("history", parents=[shared], help="occurrences, newest first")
    hist.add_argument("name", nargs="?", help="one task's only")
    hist.add_argument(
        "--limit",
        type=arg_number("--limit", 1, MAX_HISTORY, integer=True),
        default=50,
        help=f"at most this many (default 50, up to {MAX_HISTORY})",
    )
    hist.add_argument("--json", action="store_true", help=JSON_FLAG)
    hist.add_argument(
        "--follow",
        action="store_true",
        help="then print each run as it settles, until Ctrl-C (with --json: a line each)",
    )


def _add_logs(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    logs = sub.add_parser("logs", parents=[shared], help="one run's output")
    logs.add_argument(
        "run", type=arg_number("RUN", 1, 2**63 - 1, integer=True), metavar="RUN",
        help="the run's id (the ID column of tickui history)",
    )  # fmt: skip
    logs.add_argument("--follow", action="store_true", help="while it runs, print what it adds")


def _add_hooks(sub: argparse._SubParsersAction, shared: argparse.ArgumentParser) -> None:
    hooks = sub.add_parser("hooks", parents=[shared], help="recent hook deliveries")
    hooks.add_argument("--json", action="store_true", help=JSON_FLAG)
    hooks.add_argument(
        "--limit",
        type=arg_number("--limit", 1, 1000, integer=True),
        default=50,
        help="at most this many (default 50, up to 1000)",
    )


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    args = list(argv)
    if "--" in args:
        at = args.index("--")
        return args[:at], args[at + 1 :]
    return args, None


def db_path(args: argparse.Namespace, settings: config_mod.Settings) -> Path | str:
    """The store: a PostgreSQL URL (a text), or a SQLite file's path with a leading `~`
    expanded here, once, so that every command (the read-only ones too) looks at the same
    file. A flag beats the environment, which beats tickui.toml; --store (TICKUI_STORE,
    [store] url) beats --db (TICKUI_DB, [engine] db) at the same level."""
    from tickui.runtime import settings as config_mod

    env = dict(os.environ)
    given, name = getattr(args, "store", None), "--store"
    if given is None:
        given, name = getattr(args, "db", None), "--db"
    if given is None and (from_env := env_value(option("store", "url"), env)):
        given, name = from_env
        given = checks.store_text(given, name)
    if given is None and (from_env := env_value(option("engine", "db"), env)):
        given, name = from_env
        given = checks.path_text(given, name)
    if given is None and settings.store:
        given, name = settings.store, "[store] url"
    if given:
        if checks.is_store_url(given):
            return given
        try:
            return Path(given).expanduser()
        except RuntimeError:  # `~user` with no such user, or no home directory
            raise BadInput(name, f"{checks.shown(given)}: cannot expand '~' here") from None
    return settings.db or config_mod.default_db()


def cmd_ticks(args: argparse.Namespace, settings: config_mod.Settings) -> int:
    from tickui.ticks.config import TOPIC, build, kafka_access, kafka_flags
    from tickui.ticks.tail import main_sync
    from tickui.ticks.wire import DEFAULT_TOPIC

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
    args, extras = build_parser(args_part).parse_known_args(args_part)
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

    wanted = (
        (args.command == "task" and args.action == "list")
        or (args.command == "history" and not args.follow)
        or args.command == "audit"
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
    if args.command == "store":
        import asyncio

        from tickui.cli import store as store_cli

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(store_cli.main(args))
    path = db_path(args, settings)
    if command is None and _listing(args, path):  # read without an event loop
        from tickui.cli import listing

        if args.command == "audit":
            from tickui.cli.audit import audit_now

            return audit_now(args, path)
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
    if args.command == "serve":
        from tickui.cli import serve as serve_cli
        from tickui.runtime.assembly import check_dispatch
        from tickui.ticks.config import kafka_access

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        check_dispatch(settings.dispatch, kafka_access(settings.ticker))  # as the dashboard's
        return serve_cli.main(args, settings, path)
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
            from tickui.cli import worker as worker_cli

            return worker_cli.main(args, settings)
        from tickui.cli import workers as workers_cli

        return asyncio.run(workers_cli.main(args, path))
    if args.command == "hooks":
        from tickui.cli.hooks import cmd_hooks

        if command is not None:
            raise UsageError("", "'--' and a command only go with 'task add'")
        return asyncio.run(cmd_hooks(args, path))
    if command is not None:
        raise UsageError("", "'--' and a command only go with 'task add'")
    if args.command == "audit":
        from tickui.cli.audit import cmd_audit

        return asyncio.run(cmd_audit(args, path))
    if args.command == "logs":
        from tickui.cli.follow import cmd_logs

        return asyncio.run(cmd_logs(args, path))
    from tickui.cli.task import cmd_history

    return asyncio.run(cmd_history(args, path))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = run(argv)
    except BAD_INPUT as exc:
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


gc.freeze()  # what loading the command line made: never garbage, never walked again
if _COLLECTING:
    gc.enable()
