"""`tickui task`'s command line: its actions and their options (the schedule, policies,
retries, ...), built whole for `tickui task --help` or a misspelt action, or only the
action given."""

from __future__ import annotations

import argparse

from tickui.cli.output import JSON_FLAG
from tickui.common import checks
from tickui.common.checks import arg, arg_number
from tickui.common.timeutil import parse_instant
from tickui.model import backfill
from tickui.model.retries import REASONS
from tickui.model.spec import MISFIRE_POLICIES, OVERLAP_POLICIES, check_name

ACTIONS = ("add", "edit", "export", "backfill", "list", "show", "enable", "rm", "run-now",
           "disable")  # fmt: skip
_NAMED_ONLY = {
    "enable": "switch a task on",
    "rm": "delete a task (its history stays)",
    "run-now": "run a task once now (an engine must be running)",
}

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


def add_task_parser(
    sub: argparse._SubParsersAction,
    shared: argparse.ArgumentParser,
    parser_class: type[argparse.ArgumentParser],
    only: str | None = None,
) -> None:
    """`tickui task` and its actions, under `sub`; with `only` (one of ACTIONS), that
    action alone: what it parses and its help are the same."""
    task = sub.add_parser("task", parents=[shared], help="add, list, show and change tasks")
    tsub = task.add_subparsers(dest="action", parser_class=parser_class, required=True)

    def wanted(action: str) -> bool:
        return only in (None, action)

    if wanted("add"):
        add = tsub.add_parser("add", parents=[shared], help="add a task: ... -- ARGV")
        add.add_argument("name", help="the task's name (letters, digits, . _ -)")
        task_options(add)
        _with_argv(add, "-- ARGV...")
    if wanted("edit"):
        said = "change a task: add's options [-- ARGV]"
        edit = tsub.add_parser("edit", parents=[shared], help=said)
        edit.add_argument("name", help="the task to change")
        edit.add_argument(
            "--rename", type=arg(check_name, "--rename"), metavar="NAME", help="its new name"
        )
        task_options(edit, edit=True)
        _with_argv(edit, "[-- ARGV...]")
    if wanted("export"):
        said = "every task as [[task]] entries"
        tsub.add_parser("export", parents=[shared], help=said).set_defaults(name=None)
    if wanted("backfill"):
        _backfill(
            tsub.add_parser("backfill", parents=[shared], help="run past slots in (from, to]")
        )
    if wanted("list"):
        lst = tsub.add_parser("list", parents=[shared], help="every task, with its next run")
        lst.add_argument("--json", action="store_true", help=JSON_FLAG)
    if wanted("show"):
        show = tsub.add_parser(
            "show",
            parents=[shared],
            help="one task, its next fire times and why each is when it is",
        )
        show.add_argument("name", help="the task")
        show.add_argument("--json", action="store_true", help=JSON_FLAG)
    for action, said in _NAMED_ONLY.items():
        if wanted(action):
            named = tsub.add_parser(action, parents=[shared], help=said)
            named.add_argument("name", help="the task")
    if wanted("disable"):
        disable = tsub.add_parser("disable", parents=[shared], help="switch a task off")
        disable.add_argument("name", help="the task")
        disable.add_argument("--note", type=arg(checks.text, "--note"), help="why, shown beside it")


def _backfill(back: argparse.ArgumentParser) -> None:
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


def task_options(parser: argparse.ArgumentParser, edit: bool = False) -> None:
    """`task add`'s options (the schedule, policies, retries, ...): `task edit` takes the
    same ones, each optional; there only the options given are in the namespace (their
    default is SUPPRESS) and only they change. Add an option of `task add` here."""
    from tickui.schedules.cron import MACROS  # (calendar, locale): for add and edit only

    first = len(parser._actions)  # the shared options (--db, --store, ...) come before
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
        _only_given(parser, parser._actions[first:])


def _only_given(parser: argparse.ArgumentParser, options: list[argparse.Action]) -> None:
    """Make each of task_options' `options` absent from the namespace unless given, and
    record their dests (`_task_options`) for edit_raw: the shared options (where the
    store is, the config) are never a task's field."""
    dests = []
    for action in options:
        if action.option_strings:
            action.default = argparse.SUPPRESS
            dests.append(action.dest)
    parser.set_defaults(_task_options=tuple(dests))
